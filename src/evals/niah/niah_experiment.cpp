// The trained retrieval experiment: data, training, evaluation stages (see niah_experiment.h).
#include "evals/niah/niah_experiment.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "data/corpus.h"
#include "data/unicode_text.h"
#include "evals/niah/niah_experiment_report.h"
#include "evals/niah/niah_train_data.h"
#include "infer/cpu_engine.h"
#include "infer/eos.h"
#include "models/json_file.h"
#include "models/model.h"
#include "models/model_train.h"
#include "models/safetensors.h"
#include "train/checkpoint_io.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// An exclusive flock on a file for the object's lifetime: processes that share an output folder take turns.
class FileLock {
 public:
  explicit FileLock(const fs::path& file) : fd_(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    HLM_CHECK_INPUT(fd_ >= 0, file.string(), ": cannot open the lock file: ", std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      HLM_CHECK_INPUT(errno == EINTR, file.string(), ": flock failed: ", std::strerror(errno));
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

std::string fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, a, b, c);
  return buf;
}

// The resolved config must not change under an existing output folder (device may: the same run can move).
void check_same_config(const fs::path& out, const json& resolved) {
  const fs::path path = out / "config.json";
  if (!fs::exists(path)) return;
  json saved = json_file_read(path), now = resolved;
  // Folders written before train.loss existed trained with the loss on every token; before eval.precision and
  // eval.prefill_chunk existed they evaluated in fp32 with prefill chunks of 512 tokens.
  if (saved.contains("train") && saved["train"].is_object() && !saved["train"].contains("loss"))
    saved["train"]["loss"] = "all";
  // Before train_data.packed and train_data.stages existed: one stage, one example per row.
  if (saved.contains("train_data") && saved["train_data"].is_object()) {
    if (!saved["train_data"].contains("packed")) saved["train_data"]["packed"] = false;
    if (!saved["train_data"].contains("value_digits_min")) saved["train_data"]["value_digits_min"] = 7;
    if (!saved["train_data"].contains("stages")) saved["train_data"]["stages"] = json::array();
  }
  if (saved.contains("eval") && saved["eval"].is_object()) {
    if (!saved["eval"].contains("precision")) saved["eval"]["precision"] = "fp32";
    if (!saved["eval"].contains("prefill_chunk")) saved["eval"]["prefill_chunk"] = 512;
  }
  saved.erase("device");
  now.erase("device");
  if (saved == now) return;
  std::string keys;
  for (const auto& [key, value] : now.items())
    if (!saved.contains(key) || saved[key] != value) keys += (keys.empty() ? "" : ", ") + key;
  throw_input_error(out.string(), ": holds an experiment with another config (differs in: ",
                    keys.empty() ? std::string("keys") : keys, "); use another --out");
}

// The longest answer the evaluation can ask for must fit max_new_tokens (else every such item is cut short).
void check_answer_budget(const NiahExperimentConfig& c, const Tokenizer& tokenizer) {
  for (const std::string& code : c.langs)
    for (const std::string& t : c.eval_tasks) {
      const NiahTaskSpec& task = niah_task_from_name(t);
      NiahSample s;
      if (!task.query_present) s.expected = {std::string(niah_language(code).none_word)};
      else s.expected.assign(static_cast<size_t>(task.queries * task.values_per_key), "9999999");
      const std::string answer = niah_answer_text(s);
      const auto tokens = static_cast<int64_t>(tokenizer.encode(answer).size());
      HLM_CHECK_INPUT(tokens <= c.max_new_tokens, "eval.max_new_tokens ", c.max_new_tokens, " is less than the ",
                      tokens, " tokens of the longest ", code, " ", task.name, " answer of the trained format (",
                      answer.substr(1), ")");
    }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Folders of curriculum stage k (train_data.stages): <out>/data/stage-<k> and <out>/runs/<arch>/stage-<k>; without
// stages the one stage uses <out>/data and <out>/runs/<arch> (the layout before stages existed).
fs::path stage_data_dir(const NiahExperimentConfig& c, const fs::path& out, size_t k) {
  return c.train_stages.empty() ? out / "data" : out / "data" / ("stage-" + std::to_string(k));
}
fs::path stage_run_dir(const NiahExperimentConfig& c, const fs::path& out, const std::string& arch, size_t k) {
  return c.train_stages.empty() ? out / "runs" / arch : out / "runs" / arch / ("stage-" + std::to_string(k));
}
size_t stage_count(const NiahExperimentConfig& c) { return niah_experiment_stages(c).size(); }
// The run whose model/ is the architecture's trained model: the last stage's.
fs::path final_run_dir(const NiahExperimentConfig& c, const fs::path& out, const std::string& arch) {
  return stage_run_dir(c, out, arch, stage_count(c) - 1);
}

// Stage 2 for one architecture: train (or resume, or skip) every curriculum stage in order into its run folder;
// stage k > 0 starts from stage k − 1's model (TrainHooks::init_student) with its own LR schedule.
void train_arch(const NiahExperimentConfig& c, const std::string& arch, const fs::path& out,
                const Tokenizer& tokenizer, const NiahExperimentDevice& device, const NiahLog& log) {
  const int64_t vocab = tokenizer.vocab_size();
  const fs::path model_config = out / "models" / (arch + ".json");
  fs::create_directories(model_config.parent_path());
  const json mc = niah_arch_model_config(c, arch, vocab);
  file_write_atomic(model_config, mc.dump(2) + "\n");
  const std::vector<NiahTrainStage> stages = niah_experiment_stages(c);
  for (size_t k = 0; k < stages.size(); ++k) {
    const fs::path dir = stage_run_dir(c, out, arch, k);
    const fs::path marker = dir / "niah_train.json";
    if (!(fs::exists(dir / "model") && fs::exists(dir / "test.json"))) {
      TrainConfig tc = c.train;
      tc.tokens = stages[k].tokens;
      tc.job = TrainJob::Pretrain;
      tc.model_config = model_config.string();
      tc.data = stage_data_dir(c, out, k).string();
      tc.tokenizer = c.tokenizer;
      tc.out = dir.string();
      tc.device = c.device;
      tc.resume.clear();
      if (fs::exists(dir) && !checkpoint_list(dir).empty()) {
        tc.resume = dir.string();
        log("niah experiment: " + arch + ": resuming from " + checkpoint_list(dir).back().string());
      } else {
        fs::remove_all(dir);
      }
      std::unique_ptr<TrainDevice> dev;
      if (tc.device != "cpu") {
        HLM_CHECK_INPUT(static_cast<bool>(device.make_trainer), "niah experiment: device '", tc.device,
                        "' needs an accelerator, and this caller passed none");
        dev = device.make_trainer(tc);
      }
      TrainHooks hooks = niah_train_hooks(c, tokenizer);
      if (k > 0) {
        const fs::path previous = stage_run_dir(c, out, arch, k - 1) / "model";
        hooks.init_student = [previous](Model& student) {
          Model loaded = model_load_trainable(previous);
          const ModelConfig &a = loaded.config(), &b = student.config();
          HLM_CHECK(a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
                        a.num_hidden_layers == b.num_hidden_layers && a.layer_types == b.layer_types,
                    previous.string(), ": the previous stage's model has another config than this stage's");
          student.mutable_weights() = loaded.mutable_weights();
        };
      }
      log("niah experiment: training " + arch + " (" + niah_arch_layout(c, arch) + ")" +
          (stages.size() > 1 ? " stage " + std::to_string(k + 1) + " of " + std::to_string(stages.size()) : "") +
          " into " + dir.string() + (k > 0 && tc.resume.empty() ? " from the previous stage's model" : ""));
      const auto t0 = std::chrono::steady_clock::now();
      const TrainResult res = train_run(tc, hooks, dev.get());
      const double seconds = seconds_since(t0);
      if (res.status == TrainStatus::Diverged)
        throw_internal_error(dir.string(), ": the training run diverged: ", res.message);
      if (res.status == TrainStatus::EvaluationFailed) throw_input_error(dir.string(), ": ", res.message);
      HLM_CHECK(res.status == TrainStatus::Completed || res.status == TrainStatus::DataExhausted, dir.string(),
                ": the training run did not finish: ", res.message);
      double before = 0;
      if (fs::exists(marker)) before = json_file_read(marker).value("seconds", 0.0);
      file_write_atomic(marker, json({{"seconds", before + seconds},
                                      {"tokens", res.tokens_seen},
                                      {"steps", res.step},
                                      {"status", res.status == TrainStatus::Completed ? "completed" : "data_exhausted"},
                                      {"message", res.message}})
                                        .dump(2) +
                                    "\n");
    }
  }
}

bool training_finished(const NiahExperimentConfig& c, const fs::path& out, const std::string& arch) {
  const fs::path dir = final_run_dir(c, out, arch);
  return fs::exists(dir / "model" / "config.json") && fs::exists(dir / "test.json");
}

// An architecture's training figures from runs/<arch> (training finished).
void read_training(const NiahExperimentConfig& c, const std::string& arch, const fs::path& out, int64_t vocab,
                   NiahArchResult& r) {
  const fs::path dir = final_run_dir(c, out, arch);
  const json mc = niah_arch_model_config(c, arch, vocab);
  r.arch = arch;
  r.layout = niah_arch_layout(c, arch);
  // Seconds and tokens summed over the curriculum's stages; tokens/s the median over all their steps.
  std::vector<double> tps;
  for (size_t k = 0; k < stage_count(c); ++k) {
    const fs::path sdir = stage_run_dir(c, out, arch, k);
    int64_t tokens = 0;
    if (fs::exists(sdir / "niah_train.json")) {
      const json m = json_file_read(sdir / "niah_train.json");
      r.train_seconds += m.value("seconds", 0.0);
      tokens = m.value("tokens", int64_t{0});
    }
    if (fs::exists(sdir / "metrics.jsonl"))
      jsonl_file_for_each(sdir / "metrics.jsonl", [&](const json& v, int64_t) {
        if (v.value("type", "") == "step" && v.contains("tokens_per_second") && v["tokens_per_second"].is_number())
          tps.push_back(v["tokens_per_second"].get<double>());
        if (v.value("type", "") == "step" && v.contains("tokens") && v["tokens"].is_number())
          tokens = std::max(tokens, v["tokens"].get<int64_t>());
      });
    r.train_tokens += tokens;
  }
  r.tokens_per_second = median(tps);
  const json test = json_file_read(dir / "test.json");
  r.test_ce = test.at("mean").at("ce").get<double>();
  const ModelConfig parsed = parse_model_config(mc, (out / "models" / (arch + ".json")).string());
  DecoderWeights grads = zero_grads_like(parsed);
  Model probe = Model::load(dir / "model");
  for (const NamedParameter& p : named_parameters(parsed, probe.mutable_weights(), grads)) r.parameters += p.value.numel();
}

NiahEvalBackend cpu_backend(Model& model) {
  NiahEvalBackend b;
  b.make_engine = [&model](const MemoryPlan& plan) { return make_cpu_engine(model, plan); };
  b.default_budget_bytes = niah_default_cpu_budget();
  return b;
}

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

json language_stats_json(const std::vector<NiahLanguageStats>& stats) {
  json languages = json::array();
  for (const NiahLanguageStats& s : stats)
    languages.push_back({{"code", s.code},
                         {"haystack_code_points", s.haystack_code_points},
                         {"haystack_tokens", s.haystack_tokens}});
  return languages;
}

std::vector<NiahLanguageStats> language_stats_from_json(const json& j) {
  std::vector<NiahLanguageStats> out;
  for (const json& l : j)
    out.push_back({l.at("code").get<std::string>(), l.at("haystack_code_points").get<int64_t>(),
                   l.at("haystack_tokens").get<int64_t>()});
  return out;
}

// The record of an evaluation: cells.json when finished, cells_partial.json while running (or cut short).
json eval_record(const std::string& arch, double seconds, const std::vector<NiahCell>& cells,
                 const std::vector<NiahLanguageStats>& stats) {
  json j = json::array();
  for (const NiahCell& cell : cells) j.push_back(niah_cell_to_json(cell));
  return {{"arch", arch}, {"seconds", seconds}, {"cells", j}, {"languages", language_stats_json(stats)}};
}

std::string cell_key(const std::string& lang, const std::string& task, int64_t length) {
  return lang + "/" + task + "/" + std::to_string(length);
}

// Stage 3 for one architecture: every (length, language, task) cell in that order; a cell already in
// cells_partial.json (an earlier run of this folder cut short) is kept, not run again.
void evaluate_arch(const NiahExperimentConfig& c, const std::string& arch, const fs::path& out,
                   const std::map<std::string, std::vector<std::string>>& sentences, const Tokenizer& tokenizer,
                   const NiahExperimentDevice& device, const NiahLog& log) {
  const fs::path dir = out / "eval" / arch;
  const fs::path marker = dir / "cells.json", partial = dir / "cells_partial.json";
  if (fs::exists(marker)) return;
  fs::create_directories(dir);
  std::map<std::string, NiahCell> done;  // by cell_key
  double seconds_before = 0;
  std::string items_jsonl;
  if (fs::exists(partial)) {
    const json p = json_file_read(partial);
    for (const json& j : p.at("cells")) {
      NiahCell cell = niah_cell_from_json(j, partial.string());
      done[cell_key(cell.lang, cell.task, cell.length)] = std::move(cell);
    }
    seconds_before = p.value("seconds", 0.0);
    // The items of the kept cells (the file may hold a cell that finished after the last cells_partial.json).
    if (fs::exists(dir / "niah_items.jsonl"))
      jsonl_file_for_each(dir / "niah_items.jsonl", [&](const json& v, int64_t) {
        if (done.count(cell_key(v.at("lang").get<std::string>(), v.at("task").get<std::string>(),
                                v.at("length").get<int64_t>())))
          items_jsonl += v.dump() + "\n";
      });
    log("niah experiment: eval " + arch + ": continuing after " + std::to_string(done.size()) + " finished cells (" +
        partial.string() + ")");
  }
  const fs::path model_dir = final_run_dir(c, out, arch) / "model";
  Model model = Model::load(model_dir);
  const std::vector<int32_t> eos = eos_token_ids(model.config(), model_dir);
  const NiahEvalBackend backend = device.make_eval ? device.make_eval(model, c.eval_precision) : cpu_backend(model);
  HLM_CHECK_INPUT(backend.kv_element_bytes == niah_kv_element_bytes(c.eval_precision, "eval.precision"),
                  "niah experiment: eval.precision ", c.eval_precision, " is not what the ", c.device,
                  " evaluation backend runs (KV element of ", backend.kv_element_bytes, " bytes)");
  NiahRunSettings settings;
  settings.max_new_tokens = c.max_new_tokens;
  settings.max_batch = c.max_batch;
  settings.prefill_chunk = c.prefill_chunk;
  settings.kv_element_bytes = backend.kv_element_bytes;
  settings.stop = c.stop;
  settings.budget_bytes = c.max_memory.empty() ? backend.default_budget_bytes
                                               : std::optional<int64_t>(niah_parse_size(c.max_memory, "eval.max_memory"));
  const int64_t total = static_cast<int64_t>(c.langs.size() * c.eval_tasks.size() * c.eval_lengths.size());
  const int64_t to_run = total - static_cast<int64_t>(done.size());
  int64_t ran = 0;
  std::vector<NiahCell> cells;
  std::map<std::string, NiahLanguageStats> stats_by_lang;
  std::map<std::string, std::unique_ptr<NiahGenerator>> gens;
  for (const std::string& code : c.langs) {
    stats_by_lang[code] = NiahLanguageStats{code};
    gens[code] = std::make_unique<NiahGenerator>(niah_language(code), sentences.at(code), tokenizer);
  }
  auto stats_list = [&] {
    std::vector<NiahLanguageStats> v;
    for (const std::string& code : c.langs) v.push_back(stats_by_lang[code]);
    return v;
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (const int64_t length : c.eval_lengths)
    for (const std::string& code : c.langs) {
      const NiahLanguage& lang = niah_language(code);
      for (const std::string& t : c.eval_tasks) {
        const NiahTaskSpec& task = niah_task_from_name(t);
        std::vector<NiahSample> samples;
        NiahLanguageStats& st = stats_by_lang[code];
        for (int64_t i = 0; i < c.eval_n; ++i) {
          samples.push_back(gens[code]->generate(task, length, c.eval_seed, i));
          st.haystack_code_points += code_points(samples.back().haystack);
          st.haystack_tokens += samples.back().haystack_tokens;
        }
        const auto kept = done.find(cell_key(code, std::string(task.name), length));
        if (kept != done.end()) {
          cells.push_back(kept->second);
          continue;
        }
        std::vector<NiahItem> items;
        NiahCell cell = niah_evaluate_cell(backend.make_engine, model.config(), eos, tokenizer, lang, task, samples,
                                           settings, &items);
        cell.model = arch;
        ++ran;
        const double elapsed = seconds_since(t0);
        char line[512];
        std::snprintf(line, sizeof line,
                      "niah experiment: eval %s %lld/%lld %s %s %lld: %s, %lld/%lld correct, %.2f s, peak state %.2f "
                      "MiB%s%s  eta %.0f s",
                      arch.c_str(), static_cast<long long>(cells.size() + 1), static_cast<long long>(total),
                      code.c_str(), cell.task.c_str(), static_cast<long long>(length), cell.status.c_str(),
                      static_cast<long long>(cell.correct), static_cast<long long>(cell.n), cell.seconds,
                      static_cast<double>(cell.peak_state_bytes) / 1048576.0, cell.note.empty() ? "" : ": ",
                      cell.note.substr(0, 120).c_str(),
                      elapsed / static_cast<double>(ran) * static_cast<double>(to_run - ran));
        log(line);
        for (const NiahItem& it : items)
          items_jsonl += json({{"model", arch}, {"lang", cell.lang}, {"task", cell.task}, {"length", length},
                               {"index", it.index}, {"expected", it.expected}, {"response", it.response},
                               {"correct", it.correct}, {"prompt_tokens", it.prompt_tokens}, {"finish", it.finish}})
                             .dump() +
                         "\n";
        cells.push_back(std::move(cell));
        // After every cell: the CSV, the items, then the record a rerun continues from.
        file_write_atomic(dir / "niah.csv", niah_cells_csv(cells));
        file_write_atomic(dir / "niah_items.jsonl", items_jsonl);
        file_write_atomic(partial,
                          eval_record(arch, seconds_before + seconds_since(t0), cells, stats_list()).dump(1) + "\n");
      }
    }
  file_write_atomic(dir / "niah.csv", niah_cells_csv(cells));
  file_write_atomic(dir / "niah_items.jsonl", items_jsonl);
  file_write_atomic(marker, eval_record(arch, seconds_before + seconds_since(t0), cells, stats_list()).dump(1) + "\n");
  fs::remove(partial);
}

// An architecture's figures from disk for the reports: its training (finished) and its evaluation record (cells.json,
// else cells_partial.json). False when either is missing. `langs` is filled from the first record read.
bool read_arch_result(const NiahExperimentConfig& c, const std::string& arch, const fs::path& out, int64_t vocab,
                      NiahArchResult& r, std::vector<NiahLanguageStats>& langs) {
  if (!training_finished(c, out, arch)) return false;
  const fs::path dir = out / "eval" / arch;
  // Another process may finish this evaluation between the choice and the read (it writes cells.json, then removes
  // cells_partial.json; seen on the H200 in session 12): when the chosen record is gone, choose again.
  fs::path record;
  json m;
  for (int attempt = 0;; ++attempt) {
    record = fs::exists(dir / "cells.json") ? dir / "cells.json" : dir / "cells_partial.json";
    if (!fs::exists(record)) return false;
    try {
      m = json_file_read(record);
      break;
    } catch (const Error&) {
      if (fs::exists(record) || attempt >= 2) throw;
    }
  }
  read_training(c, arch, out, vocab, r);
  for (const json& cell : m.at("cells")) r.cells.push_back(niah_cell_from_json(cell, record.string()));
  r.eval_seconds = m.value("seconds", 0.0);
  r.eval_cells_planned = static_cast<int64_t>(c.langs.size() * c.eval_tasks.size() * c.eval_lengths.size());
  if (langs.empty() && m.contains("languages")) langs = language_stats_from_json(m.at("languages"));
  return true;
}

// Stage 4: the reports over every architecture with results on disk (also those other processes ran).
NiahExperimentResult collect_and_report(const NiahExperimentConfig& c, const fs::path& out, int64_t vocab) {
  NiahExperimentResult result;
  result.config = c;
  for (const std::string& arch : c.architectures) {
    NiahArchResult r;
    if (read_arch_result(c, arch, out, vocab, r, result.languages)) result.archs.push_back(std::move(r));
  }
  niah_experiment_report_write(result, out);
  return result;
}

}  // namespace

json niah_cell_to_json(const NiahCell& c) {
  return {{"model", c.model},
          {"lang", c.lang},
          {"task", c.task},
          {"length", c.length},
          {"n", c.n},
          {"correct", c.correct},
          {"status", c.status},
          {"note", c.note},
          {"seconds", c.seconds},
          {"prefill_seconds", c.prefill_seconds},
          {"decode_seconds", c.decode_seconds},
          {"mean_prompt_tokens", c.mean_prompt_tokens},
          {"max_prompt_tokens", c.max_prompt_tokens},
          {"peak_state_bytes", c.peak_state_bytes},
          {"plan_bytes", c.plan_bytes}};
}

NiahCell niah_cell_from_json(const json& j, const std::string& source) {
  try {
    NiahCell c;
    c.model = j.at("model").get<std::string>();
    c.lang = j.at("lang").get<std::string>();
    c.task = j.at("task").get<std::string>();
    c.length = j.at("length").get<int64_t>();
    c.n = j.at("n").get<int64_t>();
    c.correct = j.at("correct").get<int64_t>();
    c.status = j.at("status").get<std::string>();
    c.note = j.at("note").get<std::string>();
    c.seconds = j.at("seconds").get<double>();
    c.prefill_seconds = j.at("prefill_seconds").get<double>();
    c.decode_seconds = j.at("decode_seconds").get<double>();
    c.mean_prompt_tokens = j.at("mean_prompt_tokens").get<int64_t>();
    c.max_prompt_tokens = j.at("max_prompt_tokens").get<int64_t>();
    c.peak_state_bytes = j.at("peak_state_bytes").get<int64_t>();
    c.plan_bytes = j.at("plan_bytes").get<int64_t>();
    return c;
  } catch (const json::exception& e) {
    throw_input_error(source, ": not a NIAH cell record (", e.what(), ")");
  }
}

TrainHooks niah_train_hooks(const NiahExperimentConfig& c, const Tokenizer& tokenizer) {
  TrainHooks hooks;
  HLM_CHECK(c.train_loss == "answer" || c.train_loss == "all", "train.loss '", c.train_loss, "'");
  const bool answer = c.train_loss == "answer", packed = c.train_packed;
  if (answer || packed)
    hooks.batch_targets = [&tokenizer, answer, packed](PackedBatch& batch) {
      if (packed) niah_split_packed_examples(batch, tokenizer);
      if (answer) niah_answer_targets(batch, tokenizer);
    };
  return hooks;
}

int64_t niah_experiment_docs_per_language(const NiahExperimentConfig& c, size_t stage) {
  const std::vector<NiahTrainStage> stages = niah_experiment_stages(c);
  HLM_CHECK(stage < stages.size(), "curriculum stage ", stage, " of ", stages.size());
  const double per_language = static_cast<double>(stages[stage].tokens) / static_cast<double>(c.langs.size());
  return static_cast<int64_t>(std::ceil(c.docs_margin * per_language / static_cast<double>(c.train.seq_len))) +
         2 * c.train.held_out_docs + 1;
}

NiahTrainDataSpec niah_experiment_train_data_spec(const NiahExperimentConfig& c, size_t stage) {
  const std::vector<NiahTrainStage> stages = niah_experiment_stages(c);
  HLM_CHECK(stage < stages.size(), "curriculum stage ", stage, " of ", stages.size());
  NiahTrainDataSpec spec;
  spec.corpus = c.corpus;
  spec.tokenizer = c.tokenizer;
  spec.langs = c.langs;
  spec.tasks = stages[stage].tasks.empty() ? c.train_tasks : stages[stage].tasks;
  spec.keys = stages[stage].keys;
  spec.lengths = stages[stage].lengths;
  spec.held_out_docs = c.held_out_docs;
  spec.seq_len = c.train.seq_len;
  spec.docs_per_language = niah_experiment_docs_per_language(c, stage);
  spec.seed = c.train_seed;
  spec.packed = c.train_packed;
  spec.value_digits_min = c.train_value_digits_min;
  spec.first_index = static_cast<int64_t>(stage) << 40;  // disjoint samples per stage (counter = index × 256 + draw)
  return spec;
}

NiahExperimentResult niah_experiment_run(const NiahExperimentConfig& given, const fs::path& out,
                                         const NiahExperimentDevice& device, const NiahLog& log,
                                         const NiahExperimentRunOptions& options) {
  const NiahExperimentConfig c = niah_experiment_resolve(given);
  std::set<std::string> selected;
  for (const std::string& a : options.architectures) {
    HLM_CHECK_INPUT(std::find(c.architectures.begin(), c.architectures.end(), a) != c.architectures.end(),
                    "--architectures: '", a, "' is not one of the config's architectures (",
                    [&] {
                      std::string all;
                      for (const std::string& x : c.architectures) all += (all.empty() ? "" : ", ") + x;
                      return all;
                    }(),
                    ")");
    HLM_CHECK_INPUT(selected.insert(a).second, "--architectures: ", a, " twice");
  }
  HLM_CHECK_INPUT(!options.report_only || options.architectures.empty(),
                  "--report-only writes the reports over every architecture: give no --architectures");
  if (selected.empty()) selected.insert(c.architectures.begin(), c.architectures.end());
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(c.tokenizer);
  check_answer_budget(c, *tokenizer);
  // The held-out sentences of every language, before any work (a language without held-out text fails here).
  const Corpus corpus = Corpus::open(c.corpus);
  std::map<std::string, std::vector<std::string>> sentences;
  for (const std::string& code : c.langs)
    sentences[code] = niah_held_out_sentences(corpus, code, c.held_out_docs, niah_split_from_name(c.split));

  if (options.report_only)
    HLM_CHECK_INPUT(fs::exists(out / "config.json"), out.string(), ": no experiment here (no config.json)");
  fs::create_directories(out);
  {
    // Processes sharing `out` (one per architecture) take turns for the config check and the data stage.
    const FileLock lock(out / ".niah_experiment.lock");
    const json resolved = niah_experiment_config_to_json(c);
    check_same_config(out, resolved);
    file_write_atomic(out / "config.json", resolved.dump(2) + "\n");

    // 1. Training data, per curriculum stage.
    for (size_t k = 0; k < stage_count(c); ++k) {
      const fs::path data = stage_data_dir(c, out, k);
      if (options.report_only || fs::exists(data / "niah_train_data.json")) continue;
      fs::remove_all(data);
      const NiahTrainDataSpec spec = niah_experiment_train_data_spec(c, k);
      const auto t0 = std::chrono::steady_clock::now();
      json summary = niah_train_data_write(data.string(), spec, log);
      summary["seconds"] = seconds_since(t0);
      file_write_atomic(data / "niah_train_data.json", summary.dump(2) + "\n");
      log(fmt("niah experiment: training data written (%.0f rows, %.0f examples", summary["documents"].get<double>(),
              summary["examples"].get<double>()) +
          fmt(", %.0f tokens) in %.1f s", summary["tokens"].get<double>(), summary["seconds"].get<double>()) +
          (stage_count(c) > 1 ? " for stage " + std::to_string(k + 1) : ""));
    }
  }

  // 2. Training, 3. evaluation, per selected architecture; 4. the reports after each (partial reports while the
  // later architectures run) and at the end.
  const int64_t vocab = tokenizer->vocab_size();
  if (!options.report_only)
    for (const std::string& arch : c.architectures) {
      if (!selected.count(arch)) continue;
      train_arch(c, arch, out, *tokenizer, device, log);
      evaluate_arch(c, arch, out, sentences, *tokenizer, device, log);
      collect_and_report(c, out, vocab);
    }
  return collect_and_report(c, out, vocab);
}

}  // namespace hlm
