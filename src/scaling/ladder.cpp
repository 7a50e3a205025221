#include "scaling/ladder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/data_mixture.h"
#include "data/data_pack.h"
#include "data/data_split.h"
#include "data/data_stream.h"
#include "data/tokenizer.h"
#include "models/convert.h"
#include "models/tensor_table.h"
#include "scaling/scaling_points.h"
#include "scaling/scaling_report.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string> kArchitectures = {"transformer", "hybrid", "gdn"};

template <typename T>
T get_key(const json& j, const std::string& key, const std::string& where) {
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw_input_error(where, ": key '", key, "' is missing or has the wrong type");
  }
}

void check_keys(const json& j, const std::set<std::string>& allowed, const std::string& where) {
  HLM_CHECK_INPUT(j.is_object(), where, ": expected a JSON object");
  for (const auto& [key, value] : j.items())
    HLM_CHECK_INPUT(allowed.count(key), where, ": unknown key '", key, "'");
}

LadderSize size_from_json(const json& j, const std::string& where) {
  check_keys(j, {"name", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "intermediate_size"},
             where);
  LadderSize s;
  s.name = get_key<std::string>(j, "name", where);
  s.hidden_size = get_key<int64_t>(j, "hidden_size", where);
  s.num_hidden_layers = get_key<int64_t>(j, "num_hidden_layers", where);
  s.num_attention_heads = get_key<int64_t>(j, "num_attention_heads", where);
  s.num_key_value_heads = get_key<int64_t>(j, "num_key_value_heads", where);
  s.head_dim = get_key<int64_t>(j, "head_dim", where);
  s.intermediate_size = get_key<int64_t>(j, "intermediate_size", where);
  HLM_CHECK_INPUT(!s.name.empty() && s.name.find_first_of("/\\ ,") == std::string::npos, where,
                  ": name must be non-empty without '/', '\\', ',' or spaces");
  for (int64_t v : {s.hidden_size, s.num_hidden_layers, s.num_attention_heads, s.num_key_value_heads, s.head_dim,
                    s.intermediate_size})
    HLM_CHECK_INPUT(v > 0, where, ": every size must be a positive integer");
  HLM_CHECK_INPUT(s.num_attention_heads % s.num_key_value_heads == 0, where,
                  ": num_attention_heads must be a multiple of num_key_value_heads");
  return s;
}

json size_to_json(const LadderSize& s) {
  return {{"name", s.name},
          {"hidden_size", s.hidden_size},
          {"num_hidden_layers", s.num_hidden_layers},
          {"num_attention_heads", s.num_attention_heads},
          {"num_key_value_heads", s.num_key_value_heads},
          {"head_dim", s.head_dim},
          {"intermediate_size", s.intermediate_size}};
}

ScalingOptions fit_from_json(const json& j, const std::string& where) {
  check_keys(j, {"weights", "grid", "bounds", "bootstrap", "seed", "flops", "savings_n", "target_loss", "reference",
                 "fixed_exponents"},
             where);
  ScalingOptions o;
  o.fit.bounds = "olmo";  // small ladders: OLMo-core's box keeps exponents and E in a sane range
  if (j.contains("weights")) o.fit.weights = parse_fit_weights(get_key<std::string>(j, "weights", where));
  if (j.contains("grid")) {
    const std::string grid = get_key<std::string>(j, "grid", where);
    o.fit.grid = grid.substr(0, grid.find(':'));
    if (grid.find(':') != std::string::npos) {
      try {
        o.fit.grid_size = std::stoi(grid.substr(grid.find(':') + 1));
      } catch (const std::exception&) {
        throw_input_error(where, ": grid '", grid, "': expected epoch, olmo or olmo:S");
      }
    }
  }
  if (j.contains("bounds")) o.fit.bounds = get_key<std::string>(j, "bounds", where);
  if (j.contains("bootstrap")) o.bootstrap = get_key<int>(j, "bootstrap", where);
  if (j.contains("seed")) o.seed = get_key<uint64_t>(j, "seed", where);
  if (j.contains("flops")) o.flops = get_key<std::vector<double>>(j, "flops", where);
  if (j.contains("savings_n")) o.savings_n = get_key<std::vector<double>>(j, "savings_n", where);
  if (j.contains("target_loss") && !j["target_loss"].is_null()) o.target_loss = get_key<double>(j, "target_loss", where);
  if (j.contains("reference")) o.reference = get_key<std::string>(j, "reference", where);
  if (j.contains("fixed_exponents") && !j["fixed_exponents"].is_null())
    o.fixed_exponent = get_key<double>(j, "fixed_exponents", where);
  scaling_options_validate(o);
  return o;
}

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", r);
  return buf;
}

// The final validation of a run: mean CE of the last "valid" record of its metrics.jsonl and the training tokens
// seen by then (fewer than planned when the corpus ran out).
struct FinalValid {
  double loss = 0;
  int64_t tokens = 0;
};
FinalValid final_valid(const fs::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  HLM_CHECK_INPUT(in.good(), run_dir.string(), ": no metrics.jsonl");
  FinalValid v{std::nan(""), 0};
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object() && r.value("type", "") == "valid" && r.contains("mean") && r["mean"].contains("ce") &&
        r["mean"]["ce"].is_number()) {
      v.loss = r["mean"]["ce"].get<double>();
      v.tokens = r.value("tokens", int64_t{0});
    }
  }
  HLM_CHECK_INPUT(std::isfinite(v.loss) && v.tokens > 0, run_dir.string(),
                  ": metrics.jsonl has no finite validation loss after training");
  return v;
}

std::set<std::string> finished_runs(const fs::path& csv) {
  std::set<std::string> done;
  std::ifstream in(csv);
  std::string line;
  if (!std::getline(in, line)) return done;
  std::vector<std::string> header;
  {
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) header.push_back(c);
  }
  const auto it = std::find(header.begin(), header.end(), "run");
  HLM_CHECK_INPUT(it != header.end(), csv.string(), ": no 'run' column (not a ladder's runs.csv)");
  const size_t col = static_cast<size_t>(it - header.begin());
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (cells.size() > col) done.insert(cells[col]);
  }
  return done;
}

bool has_checkpoint(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return false;
  for (const auto& e : fs::directory_iterator(run_dir, ec))
    if (e.is_directory() && e.path().filename().string().rfind("checkpoint-", 0) == 0) return true;
  return false;
}

// Why a ladder directory's saved config (ladder.json) and this one would train incomparable runs: the data, the
// tokenizer, the GDN and RoPE settings, the trainer recipe (cadence of logging, checkpoints and validation aside)
// and the shape of a size of the same name must agree. Architectures, sizes and ratios may be added; fit settings
// may change (the fit reruns over runs.csv).
std::vector<std::string> ladder_recipe_differences(const json& saved, const json& now) {
  std::vector<std::string> diff;
  for (const char* key : {"data", "tokenizer", "neg_eigval", "rope_theta"})
    if (saved.value(key, json()) != now.value(key, json())) diff.push_back(key);
  static const std::set<std::string> kFree = {"log_every_steps", "checkpoint_every_steps", "eval_every_tokens",
                                              "recompute"};
  const json saved_train = saved.value("train", json::object()), now_train = now.value("train", json::object());
  for (const auto& [key, value] : now_train.items())
    if (!kFree.count(key) && saved_train.value(key, json()) != value) diff.push_back("train." + key);
  for (const json& s : saved.value("sizes", json::array()))
    for (const json& n : now.value("sizes", json::array()))
      if (s.value("name", "") == n.value("name", "") && s != n) diff.push_back("sizes." + n.value("name", ""));
  return diff;
}

}  // namespace

LadderConfig ladder_config_from_json(const json& j, const std::string& source) {
  check_keys(j, {"format", "data", "tokenizer", "architectures", "sizes", "tokens_per_param", "neg_eigval",
                 "rope_theta", "train", "fit"},
             source);
  HLM_CHECK_INPUT(j.value("format", "") == "hybridlm-scaling-ladder", source,
                  ": not a ladder config (\"format\": \"hybridlm-scaling-ladder\" expected)");
  LadderConfig c;
  c.source = j;
  c.data = get_key<std::string>(j, "data", source);
  if (j.contains("tokenizer")) c.tokenizer = get_key<std::string>(j, "tokenizer", source);
  if (j.contains("architectures")) c.architectures = get_key<std::vector<std::string>>(j, "architectures", source);
  HLM_CHECK_INPUT(!c.architectures.empty(), source, ": architectures is empty");
  for (const std::string& a : c.architectures)
    HLM_CHECK_INPUT(std::find(kArchitectures.begin(), kArchitectures.end(), a) != kArchitectures.end(), source,
                    ": unknown architecture '", a, "' (expected transformer, hybrid or gdn)");
  HLM_CHECK_INPUT(j.contains("sizes") && j["sizes"].is_array() && !j["sizes"].empty(), source,
                  ": sizes must be a non-empty array");
  std::set<std::string> names;
  for (size_t i = 0; i < j["sizes"].size(); ++i) {
    c.sizes.push_back(size_from_json(j["sizes"][i], source + ": sizes[" + std::to_string(i) + "]"));
    HLM_CHECK_INPUT(names.insert(c.sizes.back().name).second, source, ": size name '", c.sizes.back().name,
                    "' is used twice");
    if (std::find(c.architectures.begin(), c.architectures.end(), "hybrid") != c.architectures.end())
      HLM_CHECK_INPUT(c.sizes.back().num_hidden_layers >= 4, source, ": sizes[", i,
                      "]: the hybrid (GDN 3:1) needs at least 4 layers");
  }
  c.tokens_per_param = get_key<std::vector<double>>(j, "tokens_per_param", source);
  HLM_CHECK_INPUT(!c.tokens_per_param.empty(), source, ": tokens_per_param is empty");
  for (double r : c.tokens_per_param)
    HLM_CHECK_INPUT(std::isfinite(r) && r > 0, source, ": tokens_per_param values must be positive, got ", r);
  if (j.contains("neg_eigval")) c.neg_eigval = get_key<bool>(j, "neg_eigval", source);
  if (j.contains("rope_theta")) c.rope_theta = get_key<double>(j, "rope_theta", source);
  HLM_CHECK_INPUT(c.rope_theta > 0, source, ": rope_theta must be positive");

  // The recipe: pretrain defaults, overlaid with "train".
  json recipe = train_config_to_json(train_config_defaults(TrainJob::Pretrain));
  if (j.contains("train")) {
    const json& t = j["train"];
    HLM_CHECK_INPUT(t.is_object(), source, ": train must be an object");
    for (const auto& [key, value] : t.items()) {
      static const std::set<std::string> kPerRun = {"data", "tokenizer", "model_config", "out", "tokens", "resume",
                                                    "job", "teacher", "student", "format", "version"};
      HLM_CHECK_INPUT(!kPerRun.count(key), source, ": train.", key, " is set by the ladder itself");
      if (key == "lr") {
        recipe["lr_rec"] = value;
        recipe["lr_rest"] = value;
      } else {
        recipe[key] = value;
      }
    }
  }
  c.train = train_config_from_json(recipe, source + ": train");
  c.train.data = c.data;
  c.train.tokenizer = c.tokenizer;
  c.train.resume.clear();
  {
    TrainConfig probe = c.train;  // the recipe's numbers, with a one-step budget
    probe.tokens = std::max<int64_t>(1, probe.batch_rows * probe.seq_len);
    probe.out = "runs/<run>";             // set per run
    probe.model_config = "models/<model>.json";
    try {
      train_config_validate(probe);
    } catch (Error& e) {
      e.add_context(source, ": train");
      throw;
    }
  }
  c.fit = j.contains("fit") ? fit_from_json(j["fit"], source + ": fit") : fit_from_json(json::object(), source);
  return c;
}

LadderConfig ladder_config_load(const fs::path& path) {
  std::ifstream in(path);
  HLM_CHECK_INPUT(in.good(), "--config: cannot open ", path.string());
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    throw_input_error(path.string(), ": invalid JSON (", e.what(), ")");
  }
  return ladder_config_from_json(j, path.string());
}

json ladder_config_to_json(const LadderConfig& c) {
  json j;
  j["format"] = "hybridlm-scaling-ladder";
  j["data"] = c.data;
  j["tokenizer"] = c.tokenizer;
  j["architectures"] = c.architectures;
  j["sizes"] = json::array();
  for (const LadderSize& s : c.sizes) j["sizes"].push_back(size_to_json(s));
  j["tokens_per_param"] = c.tokens_per_param;
  j["neg_eigval"] = c.neg_eigval;
  j["rope_theta"] = c.rope_theta;
  json train = train_config_to_json(c.train);
  for (const char* k : {"format", "version", "job", "data", "tokenizer", "model_config", "out", "tokens", "resume",
                        "teacher", "student"})
    train.erase(k);
  j["train"] = train;
  json fit = scaling_options_json(c.fit);
  fit.erase("huber_delta");
  if (fit["target_loss"].is_null()) fit.erase("target_loss");
  if (fit["reference"].is_null()) fit.erase("reference");
  j["fit"] = fit;
  return j;
}

ModelConfig ladder_model_config(const LadderConfig& config, const std::string& arch, const LadderSize& s,
                                int64_t vocab_size) {
  const json dense = {{"model_type", "qwen3"},
                      {"architectures", {"Qwen3ForCausalLM"}},
                      {"vocab_size", vocab_size},
                      {"hidden_size", s.hidden_size},
                      {"intermediate_size", s.intermediate_size},
                      {"num_hidden_layers", s.num_hidden_layers},
                      {"num_attention_heads", s.num_attention_heads},
                      {"num_key_value_heads", s.num_key_value_heads},
                      {"head_dim", s.head_dim},
                      {"max_position_embeddings", config.train.seq_len},
                      {"rms_norm_eps", 1e-6},
                      {"tie_word_embeddings", false},
                      {"hidden_act", "silu"},
                      {"dtype", "float32"},
                      {"rope_parameters", {{"rope_theta", config.rope_theta}, {"rope_type", "default"}}}};
  const std::string where = "ladder model " + arch + "-" + s.name;
  ModelConfig transformer = parse_model_config(dense, where);
  if (arch == "transformer") return transformer;
  std::vector<int> full;
  for (int i = 0; i < static_cast<int>(s.num_hidden_layers); ++i)
    if (i % 4 == 3) full.push_back(i);
  if (arch == "gdn" || full.empty()) full = {0};  // convert needs one; gdn turns it linear below
  ConvertOptions options;
  options.neg_eigval = config.neg_eigval;
  ModelConfig hybrid = convert_student_config(transformer, full, options);
  if (arch == "hybrid") return hybrid;
  HLM_CHECK(arch == "gdn", "unknown ladder architecture ", arch);
  json j = model_config_to_json(hybrid);
  for (auto& t : j["layer_types"]) t = "linear_attention";
  return parse_model_config(j, where);
}

int64_t non_embedding_parameters(const ModelConfig& config) {
  int64_t n = 0;
  for (const TensorSpec& spec : expected_tensors(config))
    if (spec.name != "model.embed_tokens.weight" && spec.name != "lm_head.weight") n += spec.shape.numel();
  return n;
}

std::vector<LadderRun> ladder_plan(const LadderConfig& config, int64_t vocab_size) {
  const TrainPlan plan_unit = train_plan([&] {
    TrainConfig t = config.train;
    t.tokens = t.batch_rows * t.seq_len;
    return t;
  }());
  const int64_t per_step = plan_unit.tokens_per_step;
  std::vector<LadderRun> runs;
  for (const std::string& arch : config.architectures)
    for (const LadderSize& s : config.sizes) {
      const int64_t n = non_embedding_parameters(ladder_model_config(config, arch, s, vocab_size));
      for (double r : config.tokens_per_param) {
        LadderRun run;
        run.arch = arch;
        run.size = s;
        run.tokens_per_param = r;
        run.N = n;
        run.steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(r * static_cast<double>(n) / per_step)));
        run.tokens = run.steps * per_step;
        run.id = arch + "-" + s.name + "-tpp" + ratio_text(r);
        runs.push_back(run);
      }
    }
  return runs;
}

LadderCorpusCoverage ladder_corpus_coverage(const LadderConfig& config) {
  const Corpus corpus = Corpus::open(config.data);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(config.tokenizer);
  // The trainer sets only the anchor share; the tier ratios are DataConfig's.
  const double tiers[3] = {DataConfig{}.tier_ratio[0], DataConfig{}.tier_ratio[1], DataConfig{}.tier_ratio[2]};
  const std::map<std::string, double> shares = mixture_shares(corpus.languages(), config.train.anchor_share, tiers);
  const std::vector<CorpusDocuments> all = corpus_read_all(corpus);  // as TrainStream reads them (empties skipped)
  LadderCorpusCoverage c;
  c.corpus_languages = corpus.languages();
  double best = std::numeric_limits<double>::infinity();
  for (size_t l = 0; l < all.size(); ++l) {
    LadderCorpusLanguage lang;
    lang.code = corpus.languages()[l].code;
    lang.share = shares.at(lang.code);
    const std::vector<std::string>& texts = all[l].texts;
    const DocumentSplit split = split_documents(lang.code, static_cast<int64_t>(texts.size()),
                                                config.train.held_out_docs);
    for (int64_t d : split.train) lang.train_tokens += static_cast<int64_t>(tokenizer->encode(texts[d]).size());
    c.train_tokens += lang.train_tokens;
    const double limit = lang.share > 0 ? static_cast<double>(lang.train_tokens) / lang.share
                                        : std::numeric_limits<double>::infinity();
    if (limit < best) {
      best = limit;
      c.limiting = lang.code;
    }
    c.languages.push_back(lang);
  }
  c.max_tokens = std::isfinite(best) ? static_cast<int64_t>(std::floor(best)) : 0;
  return c;
}

int64_t ladder_corpus_shortfall(const LadderCorpusCoverage& coverage, const LadderConfig& config, int64_t tokens) {
  DataConfig data;
  data.anchor_share = config.train.anchor_share;
  data.token_budget = tokens;
  const std::map<std::string, int64_t> quotas = mixture_quotas(coverage.corpus_languages, data);
  int64_t short_by = 0;
  for (const LadderCorpusLanguage& lang : coverage.languages)
    short_by += std::max<int64_t>(0, quotas.at(lang.code) - lang.train_tokens);
  return short_by;
}

LadderSummary ladder_run(const LadderConfig& config, const fs::path& out, TrainDevice* device,
                         const std::function<void(const std::string&)>& log) {
  const auto say = [&](const std::string& s) {
    if (log) log(s);
  };
  const json resolved = ladder_config_to_json(config);
  if (fs::exists(out / "ladder.json")) {
    std::ifstream in(out / "ladder.json");
    const json saved = json::parse(in, nullptr, /*allow_exceptions=*/false);
    HLM_CHECK_INPUT(saved.is_object(), (out / "ladder.json").string(), ": not valid JSON");
    const std::vector<std::string> diff = ladder_recipe_differences(saved, resolved);
    std::string list;
    for (const std::string& d : diff) list += (list.empty() ? "" : ", ") + d;
    HLM_CHECK_INPUT(diff.empty(), "--out ", out.string(), ": its ladder.json trained with other settings (", list,
                    "); runs.csv would mix recipes. Use a new --out (adding architectures, sizes or ratios and changing "
                    "fit settings or logging cadence is fine)");
  }
  std::error_code ec;
  fs::create_directories(out / "models", ec);
  HLM_CHECK_INPUT(!ec, "--out: cannot create ", (out / "models").string(), ": ", ec.message());
  fs::create_directories(out / "runs", ec);
  {
    std::ofstream f(out / "ladder.json");
    HLM_CHECK_INPUT(f.good(), "--out: cannot write ", (out / "ladder.json").string());
    f << resolved.dump(2) << "\n";
  }
  const int64_t vocab = tokenizer_load(config.tokenizer)->vocab_size();
  const std::vector<LadderRun> plan = ladder_plan(config, vocab);

  LadderSummary summary;
  summary.total = static_cast<int>(plan.size());
  summary.runs_csv = out / "runs.csv";
  std::set<std::string> done = finished_runs(summary.runs_csv);
  if (!fs::exists(summary.runs_csv)) {
    std::ofstream f(summary.runs_csv);
    f << "arch,N,D,loss,run,size,tokens_per_param,steps,seconds\n";
  }
  int index = 0;
  for (const LadderRun& run : plan) {
    ++index;
    const std::string tag = "[" + std::to_string(index) + "/" + std::to_string(plan.size()) + "] " + run.id;
    if (done.count(run.id)) {
      ++summary.skipped;
      say(tag + ": in runs.csv, skipped");
      continue;
    }
    const fs::path model_config = out / "models" / (run.arch + "-" + run.size.name + ".json");
    if (!fs::exists(model_config)) {
      std::ofstream f(model_config);
      f << model_config_to_json(ladder_model_config(config, run.arch, run.size, vocab)).dump(2) << "\n";
      HLM_CHECK_INPUT(f.good(), "--out: cannot write ", model_config.string());
    }
    const fs::path run_dir = out / "runs" / run.id;
    double seconds = 0;
    if (!fs::exists(run_dir / "test.json")) {
      TrainConfig t = config.train;
      t.model_config = model_config.string();
      t.out = run_dir.string();
      t.tokens = run.tokens;
      if (has_checkpoint(run_dir)) {
        t.resume = run_dir.string();
        say(tag + ": resuming from its checkpoint");
      } else if (fs::exists(run_dir)) {
        fs::remove_all(run_dir, ec);  // ended before its first checkpoint: nothing to keep
        HLM_CHECK_INPUT(!ec, run_dir.string(), ": cannot clear an unfinished run: ", ec.message());
      }
      say(tag + ": N " + std::to_string(run.N) + ", D " + std::to_string(run.tokens) + " (" +
          std::to_string(run.steps) + " steps)");
      const auto t0 = std::chrono::steady_clock::now();
      const TrainResult result = train_run(t, {}, device);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      HLM_CHECK_INPUT(result.status == TrainStatus::Completed || result.status == TrainStatus::DataExhausted,
                      run.id, ": training did not complete (", result.message, ")");
      if (result.status == TrainStatus::DataExhausted)
        say(tag + ": warning: the corpus ran out before the planned tokens (" + result.message + ")");
    }
    const FinalValid valid = final_valid(run_dir);
    if (valid.tokens != run.tokens)
      say(tag + ": trained " + std::to_string(valid.tokens) + " tokens of the " + std::to_string(run.tokens) +
          " planned; D records what was trained");
    char line[512];
    std::snprintf(line, sizeof line, "%s,%lld,%lld,%.8g,%s,%s,%g,%lld,%.1f\n", run.arch.c_str(),
                  static_cast<long long>(run.N), static_cast<long long>(valid.tokens), valid.loss, run.id.c_str(),
                  run.size.name.c_str(), run.tokens_per_param, static_cast<long long>(run.steps), seconds);
    std::ofstream f(summary.runs_csv, std::ios::app);
    f << line;
    HLM_CHECK_INPUT(f.good(), "--out: cannot append to ", summary.runs_csv.string());
    ++summary.trained;
    say(tag + ": final validation loss " + std::to_string(valid.loss));
  }

  // The fits, over every architecture that has enough points.
  const std::vector<ScalingPoint> points = read_scaling_points(summary.runs_csv);
  say("fitting " + std::to_string(points.size()) + " points" +
      (config.fit.bootstrap ? " with " + std::to_string(config.fit.bootstrap) + " bootstrap resamples" : ""));
  const ScalingAnalysis analysis = run_scaling_analysis(points, config.fit, [&](const std::string& arch, int k, int n) {
    if (k == n || k % std::max(1, n / 10) == 0)
      say("bootstrap " + arch + ": " + std::to_string(k) + "/" + std::to_string(n));
  });
  summary.fit_dir = out / "fit";
  write_scaling_outputs(analysis, summary.fit_dir);
  {
    std::ofstream f(summary.fit_dir / "options.json");
    f << scaling_options_json(config.fit).dump(2) << "\n";
  }
  return summary;
}

}  // namespace hlm
