// The start-up memory plan of training (`--memory-plan`, issue #28): which memory-saving options a run uses, and the
// device-memory estimate each choice is checked against. Pure arithmetic over the model configs (no device needed),
// so it is testable on the CPU and printable for any shape (`hybridlm memory-plan`-style tables, docs/training.md).
//
// Plans, in order of the memory they save (auto takes the first that fits; the first is today's behaviour):
//   fp32          fp32 master weights (+ bf16 copies of the linears and the head in --precision bf16), fp32 gradients,
//                 fp32 AdamW m and v; the teacher fp32 (+ its bf16 copies)
//   teacher-bf16  as fp32, but the frozen teacher's linears are held ONCE, in bf16 (their fp32 weights are freed
//                 once the bf16 copies exist; the embedding and norms stay fp32, the head keeps its bf16 copy):
//                 needs --precision bf16
//   adam8         teacher-bf16 + 8-bit block-wise AdamW moments (ops/adamw/adamw_lowmem.h: 2 bytes per parameter
//                 plus one fp32 scale per 256, instead of 8 bytes)
//   lean          adam8 + bf16 master weights with stochastic rounding: every weight takes bf16 values only; on the
//                 GPU (needs --precision bf16) the linears are held in bf16 only (their bf16 copies ARE the
//                 masters: 2 bytes per parameter instead of 4 + 2) and so are their gradients (2 bytes instead of
//                 4; bound in docs/memory.md); the embedding/head and the small tensors keep fp32 storage
// Gradients stay whole in every plan: the update needs the global gradient norm (clipping) before any parameter
// moves, and micro-batches add into the same gradients, so a layer's gradients cannot be released as the optimizer
// reaches them without changing the math (docs/memory.md).
//
// The estimate: exact bytes of weights, copies, gradients and optimizer state from the tensor shapes; activations as
// the kept layer inputs of one micro-batch (exact; under --recompute none also every layer's intermediates) plus an
// allowance for one layer's working set and the LM-head loss (a stated approximation; the run prints its measured
// peak after the first step).
// Data parallel (W ranks, docs/distributed.md): the estimate is per rank. With --zero-stage 1 and W > 1 the moments
// (fp32 or 8-bit) are divided by W; the reduce-scatter's fp32 gradient shard (4 bytes per parameter / W) comes on top,
// except under lean (its reduced chunks go back into the gradients); on the GPU in the bf16 mode with fp32 masters
// (HYBRIDLM_ZERO1_MASTERS=sharded, the default) the fp32 masters of the linears and an untied head are divided by W
// too. Weights held for the forward (the fp32 mode's, the bf16 copies, lean's bf16 masters), the gradients, the
// teacher and the activations are whole on every rank. Divisions round up; the run's shards differ from P/W by the
// chunk rounding (< 1 element per bucket) and, with 8-bit moments, the gaps that start every parameter at a block of
// 256 elements. Not counted: the collectives' bucket and staging (128 MiB each at the GPU's default bucket).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/hf_config.h"
#include "models/model_train.h"
#include "ops/adamw/adamw_lowmem.h"

namespace hlm {

struct MemoryPlanOption {
  const char* name;
  AdamWStateFormat state;
  MasterFormat master;
  bool teacher_bf16_only;
  const char* what;  // one line for --help and the start-up print
};
// The plans above, in order (auto's order).
const std::vector<MemoryPlanOption>& memory_plan_options();
// The plan named `name` (input error naming --memory-plan and listing the names otherwise; "auto" is not a plan).
const MemoryPlanOption& memory_plan_named(const std::string& name);

struct MemoryPlanInputs {
  ModelConfig student;
  const ModelConfig* teacher = nullptr;  // distill; nullptr for pretrain
  bool bf16 = false;                     // --precision bf16 (the linears' bf16 copies exist)
  int64_t micro_batch_tokens = 0;        // b · n
  int64_t ranks = 1;                     // data-parallel ranks W (the estimate is per rank)
  int zero_stage = 1;                    // --zero-stage (0: nothing is sharded)
  bool gpu = false;                      // the GPU trainer (it shards the fp32 masters of the bf16 copies)
  bool shard_masters = true;             // HYBRIDLM_ZERO1_MASTERS=sharded (GPU, bf16 mode, fp32 masters)
  // --recompute: Layer (default) keeps the layer inputs only; None also keeps every layer's intermediates
  // (kept_intermediate_bytes below) for the whole micro-batch.
  Recompute recompute = Recompute::Layer;
  int64_t micro_batch_sequences = 1;     // sequences (documents) per micro-batch: the chunked rule's chunk count
};

// Under --recompute none, the bytes one micro-batch keeps beyond the layer inputs: every layer's intermediates as the
// GPU trainer holds them (models/cuda/cuda_model_train.h's CudaKeptLayer), in the bf16 compute mode (bf16 operand
// roundings, and the chunked gated delta rule's kept forward, gated_delta_rule_chunked_kept_bytes) or in fp32. Exact
// for the GPU at `sequences` sequences of `tokens` in all (CudaKeptActivations checks it against the trace); the CPU
// trainer's stash holds its own fp32 set in an arena, for which this is an approximation.
uint64_t kept_intermediate_bytes(const ModelConfig& config, int64_t tokens, int64_t sequences, bool bf16);

// HYBRIDLM_ZERO1_MASTERS: sharded (default) | whole; input error otherwise. Whether ZeRO-1 on the GPU in the bf16
// compute mode frees the fp32 masters of the weights that have bf16 copies and keeps this rank's shard of them
// (train/cuda/cuda_data_parallel.h); the estimate follows it.
inline constexpr const char* kZero1MastersEnv = "HYBRIDLM_ZERO1_MASTERS";
bool zero1_masters_sharded_from_env();

struct MemoryEstimate {
  uint64_t student_weights = 0;  // masters held whole: fp32, or bf16 (lean)
  uint64_t master_shard = 0;     // ZeRO-1 on the GPU, bf16 mode: this rank's fp32 masters of the linears and head
  uint64_t student_copies = 0;   // bf16 copies of the linears and the head (fp32 masters in --precision bf16)
  uint64_t gradients = 0;        // fp32 (lean: the linears' bf16), every parameter
  uint64_t gradient_shard = 0;   // ZeRO-1: this rank's summed gradients (fp32; 0 under lean)
  uint64_t optimizer = 0;        // m and v (ZeRO-1: this rank's shard)
  uint64_t teacher = 0;
  uint64_t activations = 0;      // kept layer inputs + working-set allowance (approximate) + kept_intermediates
  uint64_t kept_intermediates = 0;  // --recompute none: every layer's intermediates (part of activations)
  uint64_t before_activations() const {
    return student_weights + master_shard + student_copies + gradients + gradient_shard + optimizer + teacher;
  }
  uint64_t total() const { return before_activations() + activations; }
};
MemoryEstimate memory_plan_estimate(const MemoryPlanOption& plan, const MemoryPlanInputs& in);

// Whether a plan can run with these inputs (teacher-bf16 and beyond need --precision bf16 on a device, and a
// teacher for the teacher part to matter); "" when it can, else why not.
std::string memory_plan_unusable(const MemoryPlanOption& plan, const MemoryPlanInputs& in, bool on_device);

struct MemoryPlanChoice {
  const MemoryPlanOption* plan = nullptr;
  MemoryEstimate estimate;
  std::string reason;       // why this plan (named, or the first that fits); without a plan: every estimate
  uint64_t least_bytes = 0;  // auto: the smallest estimate among the usable plans
  int64_t ranks = 1;         // the inputs' ranks and zero stage (the print says the estimate is per rank)
  int zero_stage = 1;
};
// `requested`: a plan name, or "auto". free_bytes: the device's free memory (0: unknown → auto takes the first usable
// plan). Auto keeps 5% of the free memory (and at least 512 MiB) as headroom for fragmentation and the CUDA context.
// Input error (naming --memory-plan) when a named plan is unusable. When auto finds none that fits, the choice has
// no plan (plan == nullptr) and `reason` lists every plan's estimate against the free memory: the caller refuses.
MemoryPlanChoice memory_plan_choose(const std::string& requested, const MemoryPlanInputs& in, bool on_device,
                                    uint64_t free_bytes);

// The start-up lines: the chosen plan, why, and its estimate broken down (GiB).
std::string memory_plan_describe(const MemoryPlanChoice& choice);

}  // namespace hlm
