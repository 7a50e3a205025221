// Running a model on NIAH prompts (issue #21 item 3): greedy generation of up to 30 tokens per prompt through the
// inference engine (infer/generate.h), responses decoded with the evaluated tokenizer and scored (niah_score.h).
// One call evaluates one (model, language, task, length) cell on its samples; a cell that cannot run is recorded,
// not raised:
//   "oom":      the memory plan cannot hold even the cell's largest request (prompt + 30 tokens) within the budget,
//               or an allocation failed (std::bad_alloc) while building the engine or generating;
//   "too_long": a prompt is longer than the model's max_position_embeddings;
//   "ok":       every sample ran; accuracy = correct / n.
// Time is wall-clock over the generate call (prefill + decode of all n samples, batched); memory is the engine's
// inference state (KV blocks in use + GDN states), its peak over steps, and the plan's reserved bytes (weights and
// activations are not counted).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "evals/niah/niah_generate.h"
#include "infer/inference_engine.h"

namespace hlm {

struct NiahRunSettings {
  int64_t max_new_tokens = 30;  // OneRULER's NIAH budget
  int64_t max_batch = 4;        // sequences decoded together
  int64_t block_size = 16;      // KV block tokens
  int64_t prefill_chunk = 512;
  std::optional<int64_t> budget_bytes;  // cap on the plan's state bytes (nullopt: what the requests need)
  // Bytes of one cached K or V element in the cell's memory plan: 4 (fp32 cache: the CPU engine, CUDA fp32) or 2 (bf16
  // cache: the CUDA engine's bf16 precision, niah_kv_element_bytes("bf16")). It sizes the plan and the budget check,
  // and must match the engine's precision (the CPU engine refuses a bf16 plan).
  int64_t kv_element_bytes = 4;
  // Stop string: a response ends with the first generated token after which its decoded text (EOS and ids past the
  // tokenizer's vocabulary left out) contains it; "" = none (OneRULER: the 30-token budget only). The trained
  // retrieval experiment (niah_experiment.h) stops at "</Answer>", the end of its answer format.
  std::string stop;
};

struct NiahItem {
  int64_t index = 0;
  int64_t prompt_tokens = 0;
  std::vector<std::string> expected;
  std::string response;
  bool correct = false;
  std::string finish;  // infer's finish reason name
};

struct NiahCell {
  std::string model, lang, task;
  int64_t length = 0;
  int64_t n = 0, correct = 0;
  std::string status = "ok";  // ok, oom, too_long
  std::string note;           // why a cell did not run
  double seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  int64_t mean_prompt_tokens = 0, max_prompt_tokens = 0;
  int64_t peak_state_bytes = 0, plan_bytes = 0;
  double accuracy() const { return n > 0 && status == "ok" ? static_cast<double>(correct) / static_cast<double>(n) : 0; }
};

// "8G", "512M", "64K", "1000": bytes (K/M/G are powers of 1024); input error naming `option` otherwise.
int64_t niah_parse_size(const std::string& text, const std::string& option);
// The CPU run's default state budget: half the machine's physical memory.
int64_t niah_default_cpu_budget();

// Builds the engine for a plan (CPU: make_cpu_engine over a loaded Model; a device engine the same way).
using NiahEngineFactory = std::function<std::unique_ptr<InferenceEngine>(const MemoryPlan&)>;

// Evaluation precision: "fp32" (the CPU engine's only one; CUDA fp32) or "bf16" (CUDA only: weights held once in
// bf16 after CudaModel::drop_fp32_weights, bf16 tensor-core GEMMs, bf16 KV cache, fp32 GDN state; the precision of
// `hybridlm generate --device cuda`, infer/cuda/cuda_engine.h). Returns the KV element bytes (4 or 2); anything else
// is an input error naming `option`.
int64_t niah_kv_element_bytes(const std::string& precision, const std::string& option = "precision");

// How a loaded model is evaluated on a device: the engine factory, the KV element bytes its engines expect in a plan
// (NiahRunSettings::kv_element_bytes), the state budget when the caller gives none, and whatever must stay alive while
// engines exist (the device copy of the weights).
struct NiahEvalBackend {
  NiahEngineFactory make_engine;
  int64_t kv_element_bytes = 4;
  std::optional<int64_t> default_budget_bytes;
  std::shared_ptr<void> keep_alive;
};

// Evaluates one cell. `config`: the model's config (positions, shapes for the plan); `eos_ids`: infer/eos.h.
NiahCell niah_evaluate_cell(const NiahEngineFactory& make_engine, const ModelConfig& config,
                            const std::vector<int32_t>& eos_ids, const Tokenizer& tokenizer, const NiahLanguage& lang,
                            const NiahTaskSpec& task, const std::vector<NiahSample>& samples,
                            const NiahRunSettings& settings, std::vector<NiahItem>* items = nullptr);

// niah.csv: one row per cell (header included).
std::string niah_cells_csv(const std::vector<NiahCell>& cells);
// The seed's Table 2 layout: one row per model; English accuracy (%) per length, then the mean over the other
// languages per length; each cell is the mean over tasks (and languages) of the cells that ran, "(k not run)"
// appended when k did not, "OOM" / "too long" / "not run" when none did. A second table gives every language.
std::string niah_cells_markdown(const std::vector<NiahCell>& cells);

}  // namespace hlm
