// The training loop of `hybridlm pretrain` and `hybridlm distill` (seed Algorithm 1, lines 18-27; App. C.2-C.5).
//
//   pretrain  CE on next tokens; the model comes from scratch (Model::create from an HF-style config JSON).
//   distill   forward KL only (line 24): the frozen teacher runs forward to its final hidden states (no backward);
//             lm_head_forward_kl gives the student's loss and LM-head gradient; model_backward does the rest.
//
// One optimisation step s = 1..S, S = ⌊N / (B·n)⌋ (line 19): B packed rows of n tokens from the data stream, split
// into B/b micro-batches of b rows whose gradients add up. Per-token loss weights make the accumulated gradient the
// full-batch mean: CE weighs each counted target 1/(targets in the B rows), KL weighs every token 1/(B·n). Then
// g ← g·min(1, c/‖g‖) (line 25), lr of every group from Eq. 3 at step s, one AdamW update (line 26).
// Parameter groups (Table C.3): "rec" = parameters of converted GDN layers (HF name contains ".linear_attn."), peak
// η̂_rec; "rest" = everything else, peak η̂_rest; each split by default_weight_decay() into a decayed and a
// "_no_decay" group (norms, biases, A_log). Pretrain uses one peak rate for both (--lr).
//
// Non-finite loss or gradient norm: the update is skipped (weights and AdamW state untouched, the step and its
// tokens still count, the schedule moves on) and the step is reported; max_bad_steps in a row stop the run with a
// clear message; no checkpoint is written while the streak lasts, so the last checkpoint is the last good state.
//
// Files under `out` (docs/training.md): config.json (the resolved TrainConfig), metrics.jsonl, checkpoint-<step>/
// (only the newest is kept; see checkpoint_io.h), model/ (final weights, Model::save), test.json (final test eval),
// .hybridlm.lock (flock held while a process trains into `out`: a second process given the same --out refuses).
// Before anything is written (docs/reliability.md): the settings, the corpus and tokenizer (vocabulary within the
// model's), the teacher (same vocabulary as the student), the validation AND test sets (a full row with a target in
// every language), --out (usable, writable, not locked, free space for two checkpoints and the final model) and, on a
// device, its free memory against the plan's lower bound. Any failure is one input error; nothing is written.
// After the last step: the final checkpoint, then model/, then the final validation and the test evaluation; an
// evaluation that fails leaves the model in place (TrainStatus::EvaluationFailed; `--resume` redoes only it).
// Determinism: given the same config and thread count, a run is bit-reproducible, and resuming from a checkpoint
// continues bit-identically (the data stream cursor, AdamW moments and step count, schedule position and streak are
// all saved; nothing else draws random numbers).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor.h"
#include "train/eval.h"

namespace hlm {

class Model;

enum class TrainJob { Pretrain, Distill };
const char* train_job_name(TrainJob job);  // "pretrain" / "distill"

struct TrainConfig {
  TrainJob job = TrainJob::Distill;
  // Inputs and outputs.
  std::string model_config;        // pretrain: HF-style config JSON for Model::create
  std::string teacher;             // distill: frozen teacher model directory
  std::string student;             // distill: converted student directory (`hybridlm convert`)
  std::string data;                // corpus directory (data/corpus.h)
  std::string tokenizer = "bytes";
  std::string out;                 // run directory
  std::string resume;              // checkpoint directory, or a run directory (its newest checkpoint); "" = fresh
  // Budget and batch (Algorithm 1: N, B × n; Table C.3: 1B tokens, 96 × 1024, micro-batch 2).
  int64_t tokens = 0;              // N
  int64_t seq_len = 1024;          // n
  int64_t batch_rows = 96;         // B
  int64_t micro_batch_rows = 2;    // b, B % b == 0
  // Optimiser and schedule (Table C.3, Eq. 3).
  double lr_rec = 7e-5;            // η̂_rec (pretrain: --lr sets both)
  double lr_rest = 2e-5;           // η̂_rest
  double min_lr = 1e-5;            // η_min
  double warmup_fraction = 0.03;   // s_w = ⌊fraction · S⌋ ...
  int64_t warmup_steps = -1;       // ... unless ≥ 0
  double start_factor = 1e-3;      // ε
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8;
  double clip = 1.0;               // c
  double tau = 1.0;                // τ (distill)
  // Data (data/data_stream.h, App. C.1).
  uint64_t data_seed = 0;
  uint64_t init_seed = 0;          // pretrain: Model::create seed
  int64_t held_out_docs = 1000;    // validation and test documents per language
  int64_t eval_tokens = 16 * 1024; // validation tokens per language (test: twice)
  double anchor_share = 0.30;
  std::string packing = "reset";   // "reset": sequences end at document boundaries; "continuous": one sequence per
                                   // row across documents, as HF-style packing (data/data_stream.h)
  int64_t passes = 1;              // times the stream may go through the training documents; each pass after the
                                   // first reshuffles them (data/data_stream.h); S and the schedule do not change
  // Cadence and reporting.
  int64_t eval_every_tokens = 10'000'000;  // validation every this many training tokens (0: only at start and end)
  int64_t checkpoint_every_steps = 500;    // 0: no periodic checkpoints
  int64_t log_every_steps = 1;             // progress line to stderr
  int64_t stop_after_steps = 0;            // > 0: stop after this step with a checkpoint (the schedule still spans S)
  int64_t max_bad_steps = 3;               // consecutive non-finite steps that stop the run
  std::string recompute = "layer";         // "layer": recompute inside each layer in the backward; "none": keep
                                           // every layer's activations (more memory, less compute; same results)
  std::string device = "cpu";              // "cpu", or "cuda": steps run on a TrainDevice (train/train_device.h)
  // Data parallel (train/data_parallel.h, docs/distributed.md).
  int64_t zero_stage = 1;                  // with several ranks: 1 shards AdamW's moments (ZeRO-1), 0 replicates
  int64_t world_size = 1;                  // ranks of the run: set by train_run from its communicator, saved so
                                           // that a resume with another number of ranks is refused
  std::string precision = "fp32";          // "fp32", or "bf16" (cuda only): bf16 tensor-core products with fp32
                                           // results, fp32 master weights, optimizer state and activations
  std::string memory_plan = "auto";        // train/memory_plan.h: auto, fp32, teacher-bf16, adam8, lean (may change
                                           // on resume: the optimizer state is converted, see checkpoint_io.h)
  std::string loss_chunking = "default";   // cuda only: the LM-head loss's tiles, "ROWSxCOLS" or "ROWSxfull"
                                           // (train/lm_head_chunking_text.h); "default": the loss's own (4096x4096)
};

// Defaults of each job (distill: Table C.3; pretrain: lr 1e-3 for both groups, the rest as distill).
TrainConfig train_config_defaults(TrainJob job);
nlohmann::json train_config_to_json(const TrainConfig& config);
// Reads a config written by train_config_to_json (missing keys keep the job's defaults; unknown keys are an error).
TrainConfig train_config_from_json(const nlohmann::json& json, const std::string& source);
// Range and consistency checks of the numbers (input errors naming the option); paths are checked by train_run.
void train_config_validate(const TrainConfig& config);

// Derived quantities.
struct TrainPlan {
  int64_t tokens_per_step = 0;  // B·n
  int64_t total_steps = 0;      // S
  int64_t warmup_steps = 0;     // s_w
  int64_t accumulation = 0;     // B / b
};
TrainPlan train_plan(const TrainConfig& config);
// The resolved settings as aligned text lines (printed at start).
std::string train_config_describe(const TrainConfig& config);

// Test hooks (fault injection): called before each step's forward, and after its backward (before clipping).
struct TrainHooks {
  std::function<void(int64_t step, Model& student)> on_step_begin;
  std::function<void(int64_t step, std::span<const Tensor> grads)> on_gradients;
  // Replaces the free-space query of --out's file system (statvfs) in the disk check.
  std::function<uint64_t(const std::filesystem::path& dir)> free_bytes;
  // Replaces the final test evaluation (a test of the EvaluationFailed path).
  std::function<void()> on_final_evaluation;
  // Rewrites the targets of every batch the run computes a loss on: each training batch as the stream yields it,
  // and the validation and test rows once when they are built (before their checks). Only targets may change (e.g.
  // −100 outside an answer span: the CE is then the mean over the kept targets, on the CPU and on a TrainDevice
  // alike), and a sequence may be split into several inside its row (batch.cu_seqlens refined: ids, rows and row
  // boundaries stay; the hook sets the target of each new sequence's last token to −100). Must be a pure function of
  // the batch, so that a resumed run sees the same targets.
  std::function<void(PackedBatch& batch)> batch_targets;
  // A fresh pretrain run (not a resume): called once with the student just created from model_config, before the
  // optimizer, the device and the first validation see it; may replace its weights by a model of the same config (the
  // NIAH experiment's curriculum starts each stage from the previous stage's model, evals/niah/niah_experiment.h).
  std::function<void(Model& student)> init_student;
};

// What --out must hold at the peak of a run: while a checkpoint is written the previous one still exists (two), and
// the final model follows the final checkpoint. Checkpoints hold the fp32 model (4 bytes per parameter) and AdamW's
// two fp32 moments (8 bytes per parameter).
struct TrainDiskPlan {
  uint64_t checkpoint_bytes = 0;  // one checkpoint
  uint64_t model_bytes = 0;       // model/
  uint64_t peak_bytes = 0;        // most bytes the run's files occupy at once
};
TrainDiskPlan train_disk_plan(int64_t parameters, bool periodic_checkpoints);

// The device memory a step needs at least (fp32 student weights, gradients and AdamW moments, the teacher's fp32
// weights, and the layer inputs kept over one micro-batch); bf16 copies and the working set of a layer come on top.
uint64_t train_device_memory_floor(int64_t student_parameters, int64_t teacher_parameters, int64_t layers,
                                   int64_t hidden, int64_t micro_batch_tokens);

// Checks that need only the config: the settings, the corpus, the tokenizer, and the validation and test sets of
// every language (held_out_check). Input errors. For callers that plan several runs (the study) before the first.
void train_check_data(const TrainConfig& config);

enum class TrainStatus {
  Completed,      // S steps, final validation, test.json and model/ written
  Stopped,        // stop_after_steps reached; a checkpoint holds the state
  DataExhausted,  // the stream ran out before S steps; finished as Completed otherwise (with a warning)
  Diverged,       // max_bad_steps non-finite steps in a row; nothing written after the last good checkpoint
  EvaluationFailed,  // trained to the end; the final checkpoint and model/ are written, the final evaluation failed
};

struct TrainResult {
  TrainStatus status = TrainStatus::Completed;
  int64_t step = 0;                          // steps taken (including skipped ones)
  int64_t tokens_seen = 0;
  int64_t passes_used = 0;                   // passes of the data stream begun (1 = within the first)
  std::vector<double> losses;                // the objective of each step run by this call (may be NaN/inf)
  std::vector<int64_t> skipped_steps;        // by this call
  std::filesystem::path last_checkpoint;     // empty when none exists
  std::optional<EvalResult> test;            // Completed / DataExhausted
  std::string message;                       // why it stopped (Diverged, DataExhausted, Stopped, EvaluationFailed)
};

class TrainDevice;   // train/train_device.h
class Communicator;  // dist/communicator.h

// Runs (or resumes) a job. Every input is checked before anything is written under config.out.
// config.device "cuda" needs `device` (the command line makes one in builds with the CUDA backend; an input error
// otherwise); the steps, validation and the final test then run there (TrainDevice::evaluate_pass), and checkpoints
// and model/ read the weights synced back to the host. The hooks see host state, so they are for CPU runs only (an internal error with a device).
// comm: the ranks of a data-parallel run (CPU only; nullptr = one process). Every rank calls train_run with the same
// config; rank 0 checks --out and writes every file, all ranks read the inputs (a shared file system across nodes).
TrainResult train_run(const TrainConfig& config, const TrainHooks& hooks = {}, TrainDevice* device = nullptr,
                      Communicator* comm = nullptr);

}  // namespace hlm
