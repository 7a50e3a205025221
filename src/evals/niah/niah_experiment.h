// The trained retrieval experiment (`hybridlm niah experiment`, issue #21 item 4; docs/niah.md): the models we can
// train are not instruction-tuned, so the seed's Table 2 question (how much NIAH accuracy does a hybrid lose against
// full attention, by language and context length) is asked of small models trained on NIAH-format examples.
// Stages, each skipped when its done marker exists (an interrupted run resumes; a training run resumes from its
// newest checkpoint):
//   1. data      <out>/data/: a derived corpus of NIAH-format examples from the TRAINING documents of every language
//                (niah_train_data.h), each exactly train.seq_len tokens; marker data/niah_train_data.json
//   2. train     per architecture: <out>/models/<arch>.json (qwen3_hybrid config with its layer_types) and
//                <out>/runs/<arch>/ (`hybridlm pretrain`'s files: config.json, metrics.jsonl with tokens/s and ETA
//                lines on stderr, checkpoint-*, model/, test.json); marker runs/<arch>/niah_train.json.
//                A curriculum (train_data.stages) has data/stage-<k>/ and runs/<arch>/stage-<k>/ per stage k, trained
//                in order, stage k from stage k − 1's model with its own LR schedule; the last stage's model is the
//                one evaluated
//   3. evaluate  per architecture: the harness of `hybridlm niah` (niah_run.h) over lengths × languages × tasks
//                (shortest length first, so a run cut short has every language at the shorter lengths) on the
//                held-out prose of the source corpus, in eval.precision; <out>/eval/<arch>/{niah.csv,
//                niah_items.jsonl, cells_partial.json} written after every cell (a rerun continues after the last
//                finished cell), marker eval/<arch>/cells.json
//   4. report    niah_experiment_report.h: CSV, Markdown and SVG over every architecture whose training finished
//                and whose evaluation has at least one cell (a partial evaluation is marked as such)
// <out>/config.json holds the resolved config; a rerun whose resolved config differs in anything but `device` is an
// input error (use another --out).
// Parallel runs: several processes may share one <out>, each running a subset of the architectures
// (NiahExperimentRunOptions::architectures, `--architectures`): the config check and the data stage run under a lock
// (<out>/.niah_experiment.lock, flock), the other stages touch only their architecture's folders, and every process
// writes the reports over what has finished so far; `report_only` (`--report-only`) rewrites them at the end.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "evals/niah/niah_experiment_config.h"
#include "evals/niah/niah_run.h"
#include "evals/niah/niah_train_data.h"
#include "train/train_device.h"

namespace hlm {

// Where the experiment trains and evaluates. Empty functions: the CPU (trainer loop, CPU engine with half the host
// memory as state budget). The CLI fills them for --device cuda.
struct NiahExperimentDevice {
  std::function<std::unique_ptr<TrainDevice>(const TrainConfig& config)> make_trainer;
  // precision: the config's eval.precision (fp32 or bf16); the backend's kv_element_bytes must match it.
  std::function<NiahEvalBackend(Model& model, const std::string& precision)> make_eval;
};

// Which stages this invocation runs.
struct NiahExperimentRunOptions {
  std::vector<std::string> architectures;  // train and evaluate only these (names of the config's architectures);
                                           // empty: all of them
  bool report_only = false;                // no data, training or evaluation: the reports over what has finished
};

struct NiahArchResult {
  std::string arch, layout;            // layout: "ARRR" (A full attention, R Gated DeltaNet)
  int64_t parameters = 0;
  double train_seconds = 0;            // wall time of the training call(s) that ran in this output folder
  int64_t train_tokens = 0;
  double tokens_per_second = 0;        // median of metrics.jsonl's step records
  double test_ce = 0;                  // pretrain's test.json mean CE on the derived corpus (NIAH-format rows)
  double eval_seconds = 0;
  std::vector<NiahCell> cells;         // in evaluation order (length, lang, task)
  int64_t eval_cells_planned = 0;      // languages × tasks × lengths of the config
  bool eval_complete() const { return static_cast<int64_t>(cells.size()) == eval_cells_planned; }
};

struct NiahLanguageStats {
  std::string code;
  int64_t haystack_code_points = 0, haystack_tokens = 0;  // over the evaluated samples of the first architecture
  double tokens_per_code_point() const {
    return haystack_code_points > 0 ? static_cast<double>(haystack_tokens) / static_cast<double>(haystack_code_points)
                                    : 0.0;
  }
};

struct NiahExperimentResult {
  NiahExperimentConfig config;
  std::vector<NiahArchResult> archs;
  std::vector<NiahLanguageStats> languages;
};

using NiahLog = std::function<void(const std::string& line)>;

// Runs (or resumes) the experiment into `out` and writes the reports. `config` is resolved here
// (niah_experiment_resolve). The result holds every architecture the reports hold (see stage 4).
NiahExperimentResult niah_experiment_run(const NiahExperimentConfig& config, const std::filesystem::path& out,
                                         const NiahExperimentDevice& device, const NiahLog& log,
                                         const NiahExperimentRunOptions& options = {});

// The trainer hooks of the experiment's training runs: for train.loss "answer", batch_targets = niah_answer_targets
// under `tokenizer` (which must outlive the hooks); for "all", no hook (pretrain's CE on every token).
TrainHooks niah_train_hooks(const NiahExperimentConfig& config, const Tokenizer& tokenizer);

// Documents (rows) per language of curriculum stage `stage`'s derived corpus: ceil(docs_margin × the stage's tokens /
// (languages × seq_len)) + 2 × the trainer's held_out_docs + 1 (validation, test, and one to spare).
int64_t niah_experiment_docs_per_language(const NiahExperimentConfig& config, size_t stage = 0);

// The training-data spec of curriculum stage `stage` for a resolved config (corpus, tokenizer, languages, tasks, the
// stage's lengths, held-out documents, seq_len, documents per language, seed, packed; first_index = stage × 2⁴⁰, so
// that stages draw disjoint samples: sample i has the same keys and values at every length).
NiahTrainDataSpec niah_experiment_train_data_spec(const NiahExperimentConfig& config, size_t stage = 0);

nlohmann::json niah_cell_to_json(const NiahCell& cell);
NiahCell niah_cell_from_json(const nlohmann::json& json, const std::string& source);

}  // namespace hlm
