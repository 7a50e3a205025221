// Settings of the trained retrieval experiment (see niah_experiment_config.h).
#include "evals/niah/niah_experiment_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "data/corpus.h"
#include "evals/niah/niah_generate.h"
#include "evals/niah/niah_language.h"
#include "evals/niah/niah_run.h"
#include "evals/niah/niah_train_data.h"
#include "evals/niah/niah_task.h"
#include "models/hf_config.h"
#include "models/placements.h"
#include "train/config_section.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Trainer keys the experiment sets itself (paths, the job's model, the device) or that belong to one invocation.
const std::set<std::string> kOwnedTrainKeys = {"model_config", "teacher", "student", "data", "tokenizer",
                                               "out",          "resume",  "stop_after_steps", "device"};

const char* const kFormat = "hybridlm-niah-experiment";

// The tiny CPU model: 4 layers, hidden 64, 4 query / 2 KV heads of 16, bytes vocabulary (filled in), tied head.
json default_model() {
  return json::parse(R"({
    "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": true, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}})");
}

// Length lists accept numbers or "8k" strings.
std::vector<int64_t> read_lengths(const json& j, const char* key, const std::string& where) {
  HLM_CHECK_INPUT(j.at(key).is_array() && !j.at(key).empty(), where, ".", key, ": a non-empty list of lengths");
  std::vector<int64_t> out;
  for (const json& v : j.at(key)) {
    if (v.is_string()) {
      out.push_back(niah_parse_length(v.get<std::string>(), where + "." + key));
    } else {
      HLM_CHECK_INPUT(v.is_number_integer() && v.get<int64_t>() > 0, where, ".", key,
                      ": lengths are positive token counts (numbers, or strings such as \"8k\")");
      out.push_back(v.get<int64_t>());
    }
  }
  return out;
}

void check_tasks(const std::vector<std::string>& tasks, const std::string& where) {
  HLM_CHECK_INPUT(!tasks.empty(), where, ": give at least one task (", niah_task_names(), ")");
  std::set<std::string> seen;
  for (const std::string& t : tasks) {
    HLM_CHECK_INPUT(seen.insert(std::string(niah_task_from_name(t).name)).second, where, ": task ", t, " twice");
  }
}

void check_lengths(const std::vector<int64_t>& lengths, const std::string& where) {
  HLM_CHECK_INPUT(!lengths.empty(), where, ": give at least one length");
  std::set<int64_t> seen;
  for (int64_t l : lengths) HLM_CHECK_INPUT(l > 0 && seen.insert(l).second, where, ": length ", l, " twice or < 1");
}

}  // namespace

NiahExperimentConfig niah_experiment_defaults() {
  NiahExperimentConfig c;
  c.model = default_model();
  // A few minutes on 2 cores: 96 rows of 512 tokens per architecture.
  c.train = train_config_defaults(TrainJob::Pretrain);
  c.train.tokens = 49152;
  c.train.seq_len = 512;
  c.train.batch_rows = 8;
  c.train.micro_batch_rows = 8;
  c.train.lr_rec = c.train.lr_rest = 3e-3;
  c.train.min_lr = 3e-4;
  c.train.warmup_fraction = 0.05;
  c.train.held_out_docs = 2;
  c.train.eval_tokens = 512;
  c.train.eval_every_tokens = 0;
  c.train.checkpoint_every_steps = 8;
  c.train.log_every_steps = 4;
  return c;
}

NiahExperimentConfig niah_experiment_config_from_json(const json& j, const std::string& source) {
  NiahExperimentConfig c = niah_experiment_defaults();
  check_config_keys(j,
             {"format", "version", "corpus", "tokenizer", "langs", "held_out_docs", "device", "architectures", "model",
              "full", "full_fraction", "train_data", "train", "eval"},
             source);
  if (j.contains("format")) HLM_CHECK_INPUT(j["format"] == kFormat, source, ": format must be \"", kFormat, "\"");
  if (j.contains("version")) HLM_CHECK_INPUT(j["version"] == 1, source, ": version must be 1");
  read_config_key(j, "corpus", c.corpus, source);
  read_config_key(j, "tokenizer", c.tokenizer, source);
  read_config_key(j, "langs", c.langs, source);
  read_config_key(j, "held_out_docs", c.held_out_docs, source);
  read_config_key(j, "device", c.device, source);
  read_config_key(j, "architectures", c.architectures, source);
  if (j.contains("model")) {
    HLM_CHECK_INPUT(j["model"].is_object(), source, ".model: an object of HF-style config fields");
    c.model = j["model"];
  }
  read_config_key(j, "full", c.full, source);
  read_config_key(j, "full_fraction", c.full_fraction, source);
  if (j.contains("train_data")) {
    const json& t = j["train_data"];
    const std::string where = source + ".train_data";
    check_config_keys(t, {"tasks", "lengths", "seed", "docs_margin", "packed", "stages", "value_digits_min"}, where);
    read_config_key(t, "tasks", c.train_tasks, where);
    if (t.contains("lengths")) c.train_lengths = read_lengths(t, "lengths", where);
    read_config_key(t, "seed", c.train_seed, where);
    read_config_key(t, "docs_margin", c.docs_margin, where);
    read_config_key(t, "packed", c.train_packed, where);
    read_config_key(t, "value_digits_min", c.train_value_digits_min, where);
    if (t.contains("stages")) {
      HLM_CHECK_INPUT(t["stages"].is_array(), where,
                      ".stages: a list of {\"lengths\": [...], \"tokens\": N[, \"tasks\": [...], \"keys\": K]}");
      for (size_t k = 0; k < t["stages"].size(); ++k) {
        const json& st = t["stages"][k];
        const std::string at = where + ".stages[" + std::to_string(k) + "]";
        HLM_CHECK_INPUT(st.is_object() && st.contains("lengths") && st.contains("tokens"), at,
                        ": an object with lengths and tokens");
        check_config_keys(st, {"lengths", "tokens", "tasks", "keys"}, at);
        NiahTrainStage stage;
        stage.lengths = read_lengths(st, "lengths", at);
        read_config_key(st, "tokens", stage.tokens, at);
        HLM_CHECK_INPUT(stage.tokens > 0, at, ".tokens must be positive");
        read_config_key(st, "tasks", stage.tasks, at);  // [] (the resolved form of "not given"): train_data.tasks
        if (!stage.tasks.empty()) check_tasks(stage.tasks, at + ".tasks");
        read_config_key(st, "keys", stage.keys, at);
        HLM_CHECK_INPUT(niah_train_keys_valid(stage.keys), at, ".keys must be 2, 3 or 4 (got ",
                        stage.keys, "): needle keys of the stage's multikey and none prompts (0: OneRULER's 4)");
        c.train_stages.push_back(std::move(stage));
      }
      // lengths: the stages' lengths in order of first use; a given list must be that one.
      std::vector<int64_t> derived;
      for (const NiahTrainStage& stage : c.train_stages)
        for (int64_t l : stage.lengths)
          if (std::find(derived.begin(), derived.end(), l) == derived.end()) derived.push_back(l);
      // An empty list (the resolved form of a config without stages) is no curriculum.
      HLM_CHECK_INPUT(derived.empty() || !t.contains("lengths") || c.train_lengths == derived, where,
                      ".lengths: with stages it is the stages' lengths in order of first use; leave it out");
      if (!derived.empty()) c.train_lengths = derived;
    }
  }
  if (j.contains("train")) {
    json t = j["train"];
    if (t.is_object() && t.contains("loss")) {
      read_config_key(t, "loss", c.train_loss, source + ".train");
      HLM_CHECK_INPUT(c.train_loss == "answer" || c.train_loss == "all", source,
                      ".train.loss: \"answer\" or \"all\" (got \"", c.train_loss, "\")");
      t.erase("loss");
    }
    c.train = train_config_section(c.train, t, kOwnedTrainKeys,
                                   "the experiment itself (device: the top-level key or --device)", source + ".train");
  }
  if (!c.train_stages.empty()) {
    // train.tokens: the sum of the stages' tokens; a given value must be that sum.
    int64_t sum = 0;
    for (const NiahTrainStage& stage : c.train_stages) sum += stage.tokens;
    const bool given = j.contains("train") && j["train"].is_object() && j["train"].contains("tokens");
    HLM_CHECK_INPUT(!given || c.train.tokens == sum, source, ".train.tokens (", c.train.tokens,
                    "): with train_data.stages it is the sum of the stages' tokens (", sum, "); leave it out");
    c.train.tokens = sum;
  }
  if (j.contains("eval")) {
    const json& e = j["eval"];
    const std::string where = source + ".eval";
    check_config_keys(e,
                      {"tasks", "lengths", "n", "seed", "max_new_tokens", "stop", "max_batch", "max_memory", "split",
                       "precision", "prefill_chunk"},
                      where);
    read_config_key(e, "tasks", c.eval_tasks, where);
    if (e.contains("lengths")) c.eval_lengths = read_lengths(e, "lengths", where);
    read_config_key(e, "n", c.eval_n, where);
    read_config_key(e, "seed", c.eval_seed, where);
    read_config_key(e, "max_new_tokens", c.max_new_tokens, where);
    read_config_key(e, "stop", c.stop, where);
    read_config_key(e, "max_batch", c.max_batch, where);
    read_config_key(e, "max_memory", c.max_memory, where);
    read_config_key(e, "split", c.split, where);
    read_config_key(e, "precision", c.eval_precision, where);
    read_config_key(e, "prefill_chunk", c.prefill_chunk, where);
  }
  return c;
}

json niah_experiment_config_to_json(const NiahExperimentConfig& c) {
  return {{"format", kFormat},
          {"version", 1},
          {"corpus", c.corpus},
          {"tokenizer", c.tokenizer},
          {"langs", c.langs},
          {"held_out_docs", c.held_out_docs},
          {"device", c.device},
          {"architectures", c.architectures},
          {"model", c.model},
          {"full", c.full},
          {"full_fraction", c.full_fraction},
          {"train_data",
           {{"tasks", c.train_tasks},
            {"lengths", c.train_lengths},
            {"seed", c.train_seed},
            {"docs_margin", c.docs_margin},
            {"packed", c.train_packed},
            {"value_digits_min", c.train_value_digits_min},
            {"stages",
             [&] {
               json stages = json::array();
               for (const NiahTrainStage& st : c.train_stages)
                 stages.push_back(
                     {{"lengths", st.lengths}, {"tokens", st.tokens}, {"tasks", st.tasks}, {"keys", st.keys}});
               return stages;
             }()}}},
          {"train", [&] {
             json t = train_config_section_to_json(c.train, kOwnedTrainKeys);
             t["loss"] = c.train_loss;
             return t;
           }()},
          {"eval",
           {{"tasks", c.eval_tasks},
            {"lengths", c.eval_lengths},
            {"n", c.eval_n},
            {"seed", c.eval_seed},
            {"max_new_tokens", c.max_new_tokens},
            {"stop", c.stop},
            {"max_batch", c.max_batch},
            {"max_memory", c.max_memory},
            {"split", c.split},
            {"precision", c.eval_precision},
            {"prefill_chunk", c.prefill_chunk}}}};
}

namespace {

int full_layers_of(const NiahExperimentConfig& c, int layers) {
  return c.full > 0 ? static_cast<int>(c.full) : placement_full_from_fraction(c.full_fraction, layers);
}

int model_layers(const NiahExperimentConfig& c) {
  HLM_CHECK_INPUT(c.model.contains("num_hidden_layers") && c.model["num_hidden_layers"].is_number_integer() &&
                      c.model["num_hidden_layers"].get<int64_t>() >= 1 &&
                      c.model["num_hidden_layers"].get<int64_t>() <= kModelMaxLayers,
                  "model.num_hidden_layers: required, a positive layer count");
  return c.model["num_hidden_layers"].get<int>();
}

std::vector<std::string> layer_types_of(const NiahExperimentConfig& c, const std::string& arch) {
  const int layers = model_layers(c);
  if (arch == kNiahBaselineArch) return std::vector<std::string>(static_cast<size_t>(layers), "full_attention");
  if (arch == kNiahGdnArch) return std::vector<std::string>(static_cast<size_t>(layers), "linear_attention");
  const std::optional<Placement> p = placement_from_name(arch);
  HLM_CHECK_INPUT(p.has_value(), "architectures: unknown architecture '", arch, "' (expected ", kNiahBaselineArch,
                  ", ", kNiahGdnArch, " or a placement: ", placement_names(), ")");
  std::vector<std::string> types(static_cast<size_t>(layers), "linear_attention");
  for (int l : placement_layers(*p, layers, full_layers_of(c, layers))) types[static_cast<size_t>(l)] = "full_attention";
  return types;
}

}  // namespace

json niah_arch_model_config(const NiahExperimentConfig& c, const std::string& arch, int64_t vocab_size) {
  json m = c.model;
  m["model_type"] = "qwen3_hybrid";
  m["layer_types"] = layer_types_of(c, arch);
  if (!m.contains("vocab_size")) m["vocab_size"] = vocab_size;
  return m;
}

std::string niah_arch_layout(const NiahExperimentConfig& c, const std::string& arch) {
  std::string out;
  for (const std::string& t : layer_types_of(c, arch)) out += t == "full_attention" ? 'A' : 'R';
  return out;
}

NiahExperimentConfig niah_experiment_resolve(const NiahExperimentConfig& config) {
  NiahExperimentConfig c = config;
  HLM_CHECK_INPUT(c.device == "cpu" || c.device == "cuda", "device: '", c.device, "' (expected cpu or cuda)");
  HLM_CHECK_INPUT(fs::is_regular_file(fs::path(c.corpus) / "corpus.json"), "corpus ", c.corpus,
                  ": not a corpus directory (no corpus.json; `make corpus-demo` builds data/corpus/demo)");
  const Corpus corpus = Corpus::open(c.corpus);
  if (c.langs.empty()) {
    for (const CorpusLanguage& l : corpus.languages())
      for (const NiahLanguage& t : niah_languages())
        if (t.code == l.code) c.langs.push_back(l.code);
    HLM_CHECK_INPUT(!c.langs.empty(), "corpus ", c.corpus, ": no language with a NIAH template (",
                    niah_language_codes(), ")");
  }
  std::set<std::string> seen;
  for (const std::string& l : c.langs) {
    niah_language(l);
    corpus.language(l);
    HLM_CHECK_INPUT(seen.insert(l).second, "langs: ", l, " twice");
  }
  HLM_CHECK_INPUT(c.held_out_docs >= 1, "held_out_docs must be >= 1 (got ", c.held_out_docs, ")");
  HLM_CHECK_INPUT(!c.architectures.empty() && c.architectures.front() == kNiahBaselineArch,
                  "architectures: the first must be ", kNiahBaselineArch, " (the baseline of the deficits)");
  std::set<std::string> archs;
  for (const std::string& a : c.architectures) {
    HLM_CHECK_INPUT(archs.insert(a).second, "architectures: ", a, " twice");
    layer_types_of(c, a);  // unknown names, bad F
  }
  for (const char* key : {"model_type", "layer_types", "architectures"})
    HLM_CHECK_INPUT(!c.model.contains(key), "model.", key, ": set by the experiment per architecture, not allowed here");
  HLM_CHECK_INPUT(c.full >= 0, "full must be >= 0");
  for (const std::string& a : c.architectures)  // every field parses (model/hf_config.h), before any work
    parse_model_config(niah_arch_model_config(c, a, 256), "model (" + a + ")");
  check_tasks(c.train_tasks, "train_data.tasks");
  check_lengths(c.train_lengths, "train_data.lengths");
  for (size_t k = 0; k < c.train_stages.size(); ++k) {
    const std::string at = "train_data.stages[" + std::to_string(k) + "]";
    check_lengths(c.train_stages[k].lengths, at + ".lengths");
    HLM_CHECK_INPUT(c.train_stages[k].tokens >= c.train.seq_len * c.train.batch_rows, at, ".tokens (",
                    c.train_stages[k].tokens, ") is less than one step of train.batch_rows × train.seq_len (",
                    c.train.seq_len * c.train.batch_rows, " tokens)");
  }
  HLM_CHECK_INPUT(c.docs_margin >= 1.0 && c.docs_margin <= 10.0, "train_data.docs_margin must be in [1, 10]");
  HLM_CHECK_INPUT(c.train_value_digits_min >= 2 && c.train_value_digits_min <= 7,
                  "train_data.value_digits_min must be in [2, 7] (got ", c.train_value_digits_min, ")");
  check_tasks(c.eval_tasks, "eval.tasks");
  check_lengths(c.eval_lengths, "eval.lengths");
  HLM_CHECK_INPUT(c.eval_n >= 1 && c.max_batch >= 1 && c.max_new_tokens >= 1,
                  "eval.n, eval.max_batch and eval.max_new_tokens must be positive");
  HLM_CHECK_INPUT(c.train_seed != c.eval_seed, "train_data.seed (", c.train_seed, ") must differ from eval.seed: ",
                  "sample i of a (language, task) draws the same keys, values and depths from the same seed");
  HLM_CHECK_INPUT(c.split == "valid" || c.split == "test" || c.split == "both", "eval.split: valid, test or both");
  niah_kv_element_bytes(c.eval_precision, "eval.precision");
  HLM_CHECK_INPUT(c.eval_precision == "fp32" || c.device == "cuda", "eval.precision bf16 needs device cuda (the CPU ",
                  "engine runs fp32 only; device is '", c.device, "')");
  HLM_CHECK_INPUT(c.prefill_chunk >= 1, "eval.prefill_chunk must be positive (got ", c.prefill_chunk, ")");
  c.train.device = c.device;
  c.train.data = c.train.tokenizer = c.train.out = c.train.model_config = "-";  // filled in per stage
  train_config_validate(c.train);
  c.train.data = c.train.out = c.train.model_config = "";
  c.train.tokenizer = c.tokenizer;
  const int64_t positions = c.model.value("max_position_embeddings", int64_t{0});
  HLM_CHECK_INPUT(positions <= 0 || positions >= c.train.seq_len, "model.max_position_embeddings (", positions,
                  ") < train.seq_len (", c.train.seq_len, "): training examples are seq_len tokens long");
  return c;
}

std::vector<NiahTrainStage> niah_experiment_stages(const NiahExperimentConfig& c) {
  if (!c.train_stages.empty()) return c.train_stages;
  return {NiahTrainStage{c.train_lengths, c.train.tokens, {}, 0}};  // the train_data tasks, OneRULER's keys
}

std::string niah_experiment_fields_text() {
  return "  corpus, tokenizer, langs (default: every corpus language with a template), held_out_docs (M: evaluation\n"
         "    haystacks from the [0, 2M) held-out documents, training haystacks from the rest), device (cpu|cuda)\n"
         "  architectures: full_attention (first), gdn, placement names (standard_periodic, reverse_periodic, ...)\n"
         "  model: HF-style fields shared by every architecture (qwen3_hybrid; layer_types filled in); full,\n"
         "    full_fraction: full-attention layers of the placement hybrids\n"
         "  train_data: {tasks, lengths, seed, docs_margin, packed, stages, value_digits_min}: NIAH-format\n"
         "    training examples from training text; packed: as many whole examples per row as fit, each its own\n"
         "    sequence; stages: [{lengths, tokens, tasks, keys}, ...], a curriculum of pretrain runs, each from the\n"
         "    previous stage's model (tasks: the stage's own task list; keys 2-4: needle keys of its multikey and\n"
         "    none prompts); value_digits_min n: training values of a uniform [n, 7] digits (evaluation: 7)\n"
         "  train: `hybridlm pretrain` settings (tokens, seq_len, batch_rows, micro_batch_rows, lr, min_lr,\n"
         "    precision, checkpoint_every_steps, ...); every training row is exactly seq_len tokens; loss:\n"
         "    answer (default: CE only on the answer's tokens, mean over them) or all (CE on every token)\n"
         "  eval: {tasks, lengths, n, seed, max_new_tokens, stop, max_batch, max_memory, split, precision (fp32, or\n"
         "    bf16 on cuda: bf16 weights, GEMMs and KV cache), prefill_chunk (prompt tokens per prefill step)}\n";
}

}  // namespace hlm
