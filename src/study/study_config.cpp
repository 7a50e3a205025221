// Reading, writing and checking the study settings (study_config.h). The trainer sections reuse the trainer's own
// settings table through train_config_{to,from}_json, so every TrainConfig key is accepted with its own type check.
#include "study/study_config.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "analysis/sentence_states.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/parallel_set.h"
#include "models/architecture.h"
#include "models/config_classes.h"
#include "models/hf_config.h"
#include "models/placements.h"
#include "train/config_section.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Trainer keys the study sets itself (paths) or that belong to one invocation (stop_after_steps).
const std::set<std::string> kStudyOwnedTrainKeys = {"model_config", "teacher", "student", "data",
                                                    "tokenizer",    "out",     "resume",  "stop_after_steps"};

// The demo teacher: a tiny Qwen3 (8 layers, hidden 64, bytes vocabulary, tied embeddings).
json demo_teacher_model() {
  return json::parse(R"({
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 192, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
    "attention_bias": false, "hidden_act": "silu", "dtype": "float32",
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}})");
}

// Expands layer_types when a model config leaves it out (every layer full attention).
json with_layer_types(json model) {
  // Only within parse_model_config's layer limit: anything else is left for it to refuse, before any allocation.
  if (model.is_object() && !model.contains("layer_types") && model.contains("num_hidden_layers") &&
      model["num_hidden_layers"].is_number_unsigned() &&
      model["num_hidden_layers"].get<uint64_t>() <= static_cast<uint64_t>(kModelMaxLayers))
    model["layer_types"] = json(std::vector<std::string>(model["num_hidden_layers"].get<size_t>(), "full_attention"));
  return model;
}

// A teacher architecture the study can pretrain and convert: an architecture with a hybrid student
// (ArchitectureSpec::hybrid_student, models/convert.h), with its config class's facts (HF class, Granite's scalars).
struct TeacherArchitecture {
  std::string_view model_type, hf_class;
  bool granite_scalars;
};
constexpr const char* kGraniteScalarKeys[] = {"embedding_multiplier", "attention_multiplier", "residual_multiplier",
                                              "logits_scaling"};

TeacherArchitecture teacher_architecture(const std::string& name, const std::string& where) {
  std::string teachers;
  for (const ArchitectureSpec* spec : architecture_specs()) {
    if (spec->hybrid_student.empty()) continue;
    const std::optional<ConfigClassFacts> facts = config_class_facts(spec->architecture);
    if (!facts) continue;
    if (name == spec->model_type) return {spec->model_type, facts->hf_class, facts->granite_scalars};
    teachers += str_cat(teachers.empty() ? "" : " or ", spec->model_type);
  }
  throw_input_error(where, ".architecture: '", name, "' is not a teacher architecture (", teachers, ")");
}

double& granite_scalar(StudyGraniteMultipliers& g, const std::string& key) {
  if (key == "embedding_multiplier") return g.embedding_multiplier;
  if (key == "attention_multiplier") return g.attention_multiplier;
  if (key == "residual_multiplier") return g.residual_multiplier;
  return g.logits_scaling;
}

// Reads teacher.architecture and teacher.granite and writes them into a model_config object: model_type,
// architectures, and for granite the four scalars (over the object's own values when it was granite already, then
// teacher.granite). Idempotent, so the resolved config reads back to itself.
void resolve_teacher_architecture(StudyConfig& c, const json* t, const std::string& where) {
  const bool given = t != nullptr && t->contains("architecture");
  const bool granite_given = t != nullptr && t->contains("granite");
  if (!c.teacher_model.is_object()) {  // teacher.dir or a config path: the file says; a given name must match it
    c.teacher_architecture.clear();
    if (given) {
      read_config_key(*t, "architecture", c.teacher_architecture, where);
      teacher_architecture(c.teacher_architecture, where);
    }
    HLM_CHECK_INPUT(!granite_given, where,
                    ".granite: only with a model_config object (an existing model or config file keeps its own)");
    return;
  }
  json& model = c.teacher_model;
  const std::string own = model.contains("model_type") && model["model_type"].is_string()
                              ? model["model_type"].get<std::string>()
                              : std::string();
  if (given) read_config_key(*t, "architecture", c.teacher_architecture, where);
  else c.teacher_architecture = own;
  const TeacherArchitecture arch = teacher_architecture(c.teacher_architecture, where);
  c.teacher_granite = StudyGraniteMultipliers{};
  if (arch.granite_scalars && own == arch.model_type)
    for (const char* key : kGraniteScalarKeys)
      if (model.contains(key) && model[key].is_number()) granite_scalar(c.teacher_granite, key) = model[key].get<double>();
  if (granite_given) {
    HLM_CHECK_INPUT(arch.granite_scalars, where, ".granite: the multipliers belong to a granite teacher, not ",
                    arch.model_type);
    const json& g = (*t)["granite"];
    const std::string gw = where + ".granite";
    check_config_keys(g, {"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"}, gw);
    for (const char* key : kGraniteScalarKeys) read_config_key(g, key, granite_scalar(c.teacher_granite, key), gw);
  }
  model["model_type"] = std::string(arch.model_type);
  model["architectures"] = json::array({std::string(arch.hf_class)});
  for (const char* key : kGraniteScalarKeys) {
    if (arch.granite_scalars) model[key] = granite_scalar(c.teacher_granite, key);
    else model.erase(key);
  }
  if (arch.granite_scalars) {
    HLM_CHECK_INPUT(c.teacher_granite.logits_scaling != 0.0, where, ".granite.logits_scaling must be non-zero");
    for (const char* key : {"use_sliding_window", "sliding_window", "max_window_layers"}) model.erase(key);  // Qwen3's
  } else {
    model.erase("mlp_bias");
  }
}

}  // namespace

StudyConfig study_config_defaults() {
  StudyConfig c;
  c.data = "data/corpus/demo";
  c.parallel = "data/parallel-demo/chromium_nway.jsonl";
  c.teacher_model = with_layer_types(demo_teacher_model());
  // Teacher pretraining: long enough for a byte model to learn the scripts' byte patterns, short enough for 2 cores.
  c.pretrain = train_config_defaults(TrainJob::Pretrain);
  c.pretrain.tokens = 131072;
  c.pretrain.seq_len = 128;
  c.pretrain.batch_rows = 8;
  c.pretrain.micro_batch_rows = 8;
  c.pretrain.lr_rec = c.pretrain.lr_rest = 2e-3;
  c.pretrain.min_lr = 3e-4;
  c.pretrain.held_out_docs = 20;
  c.pretrain.eval_tokens = 1024;
  c.pretrain.eval_every_tokens = 0;
  c.pretrain.checkpoint_every_steps = 64;  // each checkpoint is fsync'ed: few of them in a 2-minute demo
  c.pretrain.log_every_steps = 16;
  // Distillation: Table C.3's recipe (two peak rates, warmup, cosine, clip 1, τ = 1) scaled to a tiny budget; the
  // peak rates are raised for the tiny model and budget (Table C.3's 7e-5 / 2e-5 are for a 4B model and 1B tokens).
  c.distill = train_config_defaults(TrainJob::Distill);
  c.distill.tokens = 40960;
  c.distill.seq_len = 64;
  c.distill.batch_rows = 4;
  c.distill.micro_batch_rows = 4;
  c.distill.lr_rec = 3e-3;
  c.distill.lr_rest = 1e-3;
  c.distill.min_lr = 1e-4;
  c.distill.held_out_docs = 20;
  c.distill.eval_tokens = 512;
  c.distill.eval_every_tokens = 8192;
  c.distill.checkpoint_every_steps = 80;
  c.distill.log_every_steps = 40;
  c.placements = {"standard_periodic", "reverse_periodic", "sandwich", "interleaved_sandwich", "endpoint_spread"};
  c.align_langs = {};
  c.max_pairs = 12;
  c.sigma_sample = 1024;
  c.locality_max_units = 4;
  return c;
}

StudyConfig study_config_from_json(const json& j, const std::string& source) {
  StudyConfig c = study_config_defaults();
  check_config_keys(j, {"format", "version", "data", "tokenizer", "parallel", "teacher", "pretrain", "distill", "placements",
                 "compare", "replicates", "analysis"},
             source);
  if (j.contains("format"))
    HLM_CHECK_INPUT(j["format"] == "hybridlm-study", source, ": format must be \"hybridlm-study\"");
  read_config_key(j, "data", c.data, source);
  read_config_key(j, "tokenizer", c.tokenizer, source);
  read_config_key(j, "parallel", c.parallel, source);
  if (j.contains("teacher")) {
    const json& t = j["teacher"];
    const std::string where = source + ": teacher";
    check_config_keys(t, {"dir", "model_config", "architecture", "granite"}, where);
    HLM_CHECK_INPUT(!(t.contains("dir") && t.contains("model_config")), where,
                    ": give either dir (an existing model) or model_config (pretrain one), not both");
    read_config_key(t, "dir", c.teacher_dir, where);
    if (t.contains("dir")) c.teacher_model = nullptr;
    if (t.contains("model_config")) {
      HLM_CHECK_INPUT(t["model_config"].is_object() || t["model_config"].is_string(), where,
                      ".model_config: an HF-style config object or a path to one");
      c.teacher_model = with_layer_types(t["model_config"]);
    }
    resolve_teacher_architecture(c, &t, where);
  }
  if (j.contains("pretrain")) c.pretrain = train_config_section(c.pretrain, j["pretrain"], kStudyOwnedTrainKeys, "the study itself",
                                                 source + ": pretrain");
  if (j.contains("distill")) c.distill = train_config_section(c.distill, j["distill"], kStudyOwnedTrainKeys, "the study itself",
                                                 source + ": distill");
  if (j.contains("placements")) {
    const json& p = j["placements"];
    const std::string where = source + ": placements";
    check_config_keys(p, {"names", "full", "full_fraction", "convert_seed", "neg_eigval"}, where);
    read_config_key(p, "names", c.placements, where);
    read_config_key(p, "full", c.full, where);
    read_config_key(p, "full_fraction", c.full_fraction, where);
    read_config_key(p, "convert_seed", c.convert_seed, where);
    read_config_key(p, "neg_eigval", c.neg_eigval, where);
  }
  if (j.contains("compare")) {
    check_config_keys(j["compare"], {"exclude", "exclude_mnw_Mymr"}, source + ": compare");
    read_config_key(j["compare"], "exclude", c.exclude, source + ": compare");
    read_config_key(j["compare"], "exclude_mnw_Mymr", c.exclude_mnw_Mymr, source + ": compare");
  }
  if (j.contains("replicates")) {
    const std::string where = source + ": replicates";
    check_config_keys(j["replicates"], {"data_seeds", "placements"}, where);
    read_config_key(j["replicates"], "data_seeds", c.data_seeds, where);
    read_config_key(j["replicates"], "placements", c.replicate, where);
  }
  if (j.contains("analysis")) {
    const json& a = j["analysis"];
    const std::string where = source + ": analysis";
    check_config_keys(a, {"anchor", "langs", "points", "max_pairs", "sigma_sample", "locality_k", "locality_max_units", "device"},
               where);
    read_config_key(a, "anchor", c.anchor, where);
    read_config_key(a, "langs", c.align_langs, where);
    read_config_key(a, "points", c.align_points, where);
    read_config_key(a, "max_pairs", c.max_pairs, where);
    read_config_key(a, "sigma_sample", c.sigma_sample, where);
    read_config_key(a, "locality_k", c.locality_k, where);
    read_config_key(a, "locality_max_units", c.locality_max_units, where);
    read_config_key(a, "device", c.analysis_device, where);
  }
  return c;
}

json study_config_to_json(const StudyConfig& c) {
  json teacher = json::object();
  if (!c.teacher_dir.empty()) teacher["dir"] = c.teacher_dir;
  else teacher["model_config"] = c.teacher_model;
  if (!c.teacher_architecture.empty()) teacher["architecture"] = c.teacher_architecture;
  if (c.teacher_model.is_object() && teacher_architecture(c.teacher_architecture, "teacher").granite_scalars)
    teacher["granite"] = {{"embedding_multiplier", c.teacher_granite.embedding_multiplier},
                          {"attention_multiplier", c.teacher_granite.attention_multiplier},
                          {"residual_multiplier", c.teacher_granite.residual_multiplier},
                          {"logits_scaling", c.teacher_granite.logits_scaling}};
  return {{"format", "hybridlm-study"},
          {"version", 1},
          {"data", c.data},
          {"tokenizer", c.tokenizer},
          {"parallel", c.parallel},
          {"teacher", teacher},
          {"pretrain", train_config_section_to_json(c.pretrain, kStudyOwnedTrainKeys)},
          {"distill", train_config_section_to_json(c.distill, kStudyOwnedTrainKeys)},
          {"placements",
           {{"names", c.placements},
            {"full", c.full},
            {"full_fraction", c.full_fraction},
            {"convert_seed", c.convert_seed},
            {"neg_eigval", c.neg_eigval}}},
          {"compare", {{"exclude", c.exclude}, {"exclude_mnw_Mymr", c.exclude_mnw_Mymr}}},
          {"replicates", {{"data_seeds", c.data_seeds}, {"placements", c.replicate}}},
          {"analysis",
           {{"anchor", c.anchor},
            {"langs", c.align_langs},
            {"points", c.align_points},
            {"max_pairs", c.max_pairs},
            {"sigma_sample", c.sigma_sample},
            {"locality_k", c.locality_k},
            {"locality_max_units", c.locality_max_units},
            {"device", c.analysis_device}}}};
}

std::set<std::string> study_excluded_languages(const StudyConfig& c) {
  std::set<std::string> out(c.exclude.begin(), c.exclude.end());
  if (c.exclude_mnw_Mymr) {
    const Corpus corpus = Corpus::open(c.data);
    for (const CorpusLanguage& l : corpus.languages())
      if (l.code == kSeedExcludedLanguage) out.insert(l.code);
  }
  return out;
}

std::vector<uint64_t> study_data_seeds(const StudyConfig& c) {
  return c.data_seeds.empty() ? std::vector<uint64_t>{c.distill.data_seed} : c.data_seeds;
}

int study_teacher_layers(const StudyConfig& c) {
  if (!c.teacher_dir.empty()) {
    HLM_CHECK_INPUT(fs::is_regular_file(fs::path(c.teacher_dir) / "config.json"), "teacher.dir ", c.teacher_dir,
                    ": not a model directory (no config.json)");
    return static_cast<int>(load_model_config(fs::path(c.teacher_dir) / "config.json").num_hidden_layers);
  }
  if (c.teacher_model.is_string()) {
    const std::string path = c.teacher_model.get<std::string>();
    HLM_CHECK_INPUT(fs::is_regular_file(path), "teacher.model_config ", path, ": no such file");
    return static_cast<int>(load_model_config(path).num_hidden_layers);
  }
  return static_cast<int>(parse_model_config(c.teacher_model, "teacher.model_config").num_hidden_layers);
}

std::vector<StudyStudent> study_resolve_students(const StudyConfig& c, int layers) {
  HLM_CHECK_INPUT(!c.placements.empty(), "placements.names: empty (the study needs at least ", kStudyBaseline, ")");
  HLM_CHECK_INPUT(c.full >= 0 && c.full <= layers, "placements.full: ", c.full, " is not in [0, ", layers, "]");
  const int full = c.full > 0 ? c.full : placement_full_from_fraction(c.full_fraction, layers);
  std::vector<StudyStudent> students;
  for (const std::string& spec : c.placements) {
    StudyStudent s;
    s.placement = spec;
    const bool named = placement_from_name(spec).has_value();
    // Custom lists keep their own length; named placements use F.
    const ResolvedPlacement r = placement_resolve(spec, layers, named ? std::optional<int>(full) : std::nullopt);
    s.full_layers = r.full_layers;
    if (named) {
      s.label = spec;
    } else {
      s.label = "custom";
      for (size_t i = 0; i < r.full_layers.size(); ++i) s.label += (i ? "-" : "_") + std::to_string(r.full_layers[i]);
    }
    for (const StudyStudent& other : students)
      HLM_CHECK_INPUT(other.label != s.label, "placements.names: '", spec, "' is listed twice");
    students.push_back(std::move(s));
  }
  const auto base = std::find_if(students.begin(), students.end(),
                                 [](const StudyStudent& s) { return s.label == kStudyBaseline; });
  HLM_CHECK_INPUT(base != students.end(), "placements.names must include ", kStudyBaseline,
                  " (the baseline of R and Figure 6)");
  std::rotate(students.begin(), base, base + 1);
  return students;
}

void study_config_validate(const StudyConfig& c) {
  HLM_CHECK_INPUT(!c.data.empty(), "data: the corpus directory is required");
  HLM_CHECK_INPUT(fs::is_regular_file(fs::path(c.data) / "corpus.json"), "data ", c.data,
                  ": not a corpus directory (no corpus.json; `make corpus-demo` builds data/corpus/demo)");
  HLM_CHECK_INPUT(c.tokenizer == "bytes" || fs::is_regular_file(c.tokenizer), "tokenizer ", c.tokenizer,
                  ": not \"bytes\" and no such file");
  if (!c.parallel.empty())
    HLM_CHECK_INPUT(fs::is_regular_file(c.parallel), "parallel ", c.parallel,
                    ": no such parallel set (`make corpus-demo` builds data/parallel-demo)");
  const Corpus corpus = Corpus::open(c.data);
  for (const std::string& code : c.exclude) {
    bool found = false;
    for (const CorpusLanguage& l : corpus.languages()) found = found || l.code == code;
    HLM_CHECK_INPUT(found, "compare.exclude: ", code, " is not a language of the corpus ", c.data);
  }
  if (!c.parallel.empty() && !c.align_langs.empty()) {
    const ParallelSet set = parallel_set_load(c.parallel);
    for (const std::string& code : c.align_langs)
      HLM_CHECK_INPUT(std::find(set.langs.begin(), set.langs.end(), code) != set.langs.end(), "analysis.langs: ",
                      code, " is not a language of the parallel set ", c.parallel);
  }
  HLM_CHECK_INPUT(!c.teacher_dir.empty() || !c.teacher_model.is_null(),
                  "teacher: give dir (an existing model) or model_config");
  if (!c.teacher_dir.empty()) HLM_CHECK_INPUT(fs::is_directory(c.teacher_dir), "teacher.dir ", c.teacher_dir, ": no such directory");
  study_resolve_students(c, study_teacher_layers(c));
  if (!c.teacher_model.is_object() && !c.teacher_architecture.empty()) {
    const fs::path file = c.teacher_dir.empty() ? fs::path(c.teacher_model.get<std::string>())
                                                : fs::path(c.teacher_dir) / "config.json";
    const std::string model_type = load_model_config(file).model_type;
    HLM_CHECK_INPUT(model_type == c.teacher_architecture, "teacher.architecture is ", c.teacher_architecture,
                    " but ", file.string(), " has model_type ", model_type);
  }
  // Replicates: distinct seeds, the first being the one every placement runs with; replicated placements are
  // entries of placements.names and include the baseline (R and the Figure 6 target of a seed need its run).
  if (!c.data_seeds.empty())
    HLM_CHECK_INPUT(c.data_seeds.front() == c.distill.data_seed, "replicates.data_seeds: the first seed (",
                    c.data_seeds.front(), ") is the one every placement runs with and must equal distill.data_seed (",
                    c.distill.data_seed, "); list ", c.distill.data_seed, " first");
  for (size_t i = 0; i < c.data_seeds.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      HLM_CHECK_INPUT(c.data_seeds[i] != c.data_seeds[k], "replicates.data_seeds: ", c.data_seeds[i], " is listed twice");
  if (!c.replicate.empty()) {
    HLM_CHECK_INPUT(c.data_seeds.size() >= 2, "replicates.placements: needs at least two data_seeds, got ",
                    c.data_seeds.size());
    HLM_CHECK_INPUT(std::find(c.replicate.begin(), c.replicate.end(), kStudyBaseline) != c.replicate.end(),
                    "replicates.placements must include ", kStudyBaseline, " (R and the Figure 6 target of each seed)");
    for (size_t i = 0; i < c.replicate.size(); ++i) {
      HLM_CHECK_INPUT(std::find(c.placements.begin(), c.placements.end(), c.replicate[i]) != c.placements.end(),
                      "replicates.placements: '", c.replicate[i], "' is not an entry of placements.names");
      for (size_t k = 0; k < i; ++k)
        HLM_CHECK_INPUT(c.replicate[i] != c.replicate[k], "replicates.placements: '", c.replicate[i],
                        "' is listed twice");
    }
  }
  // The trainer's own range checks, with placeholder paths (the study fills them in).
  TrainConfig p = c.pretrain;
  p.data = c.data, p.out = "-", p.model_config = "-";
  if (c.teacher_dir.empty()) train_config_validate(p);
  TrainConfig d = c.distill;
  d.data = c.data, d.out = "-", d.teacher = "-", d.student = "-";
  train_config_validate(d);
  parse_layer_points([&] {
    std::string list;
    for (const std::string& p : c.align_points) list += (list.empty() ? "" : ",") + p;
    return list;
  }());
  HLM_CHECK_INPUT(!c.align_points.empty(), "analysis.points: empty");
  HLM_CHECK_INPUT(c.max_pairs >= 0 && c.locality_max_units >= 0 && c.sigma_sample >= 2,
                  "analysis: max_pairs and locality_max_units must be >= 0, sigma_sample >= 2");
  HLM_CHECK_INPUT(!c.locality_k.empty(), "analysis.locality_k: empty");
  HLM_CHECK_INPUT(c.analysis_device == "cpu" || c.analysis_device == "cuda", "analysis.device: '",
                  c.analysis_device, "' is not a device (cpu or cuda)");
  for (int64_t k : c.locality_k) HLM_CHECK_INPUT(k >= 1, "analysis.locality_k: windows must be positive, got ", k);
}

}  // namespace hlm
