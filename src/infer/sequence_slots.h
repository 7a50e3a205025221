// The host-side bookkeeping every InferenceEngine shares (cpu_engine.cpp, cuda/cuda_engine.cpp): which sequence slots
// run, their paged KV blocks (KvBlockAllocator), and the plan of one step derived from them — the step's input checks,
// the new tokens' absolute positions and cache slots, the block tables and the contexts after the step. Where the
// state itself lives (host tensors, device buffers) is the engine's business.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "infer/inference_engine.h"
#include "infer/kv_block_allocator.h"
#include "infer/memory_plan.h"
#include "layers/token_batch.h"

namespace hlm {

// One step over N running sequences with T new tokens in all (TokenBatch order).
struct StepPlan {
  int64_t tokens = 0;       // T
  int64_t sequences = 0;    // N
  int64_t max_len = 0;      // most new tokens of one sequence
  int64_t max_context = 0;  // longest context after the step
  int64_t max_blocks = 1;   // row length of `tables`
  std::vector<int32_t> positions;    // [T] absolute position of each new token in its sequence
  std::vector<int64_t> cache_slots;  // [T] KV pool slot of each new token (block · block_size + offset)
  std::vector<int64_t> context;      // [N] tokens each sequence holds after the step
  std::vector<int32_t> last_rows;    // [N] row (in [0, T)) of each sequence's last new token
  std::vector<int32_t> tables;       // [N, max_blocks] block ids in token order, -1 past a sequence's last block
  bool decode() const { return tokens == sequences; }  // one new token per sequence
};

class SequenceSlots {
 public:
  explicit SequenceSlots(const MemoryPlan& plan);

  // A free slot with `max_tokens` tokens reserved, or -1 when no slot or too few unpromised blocks are free. The
  // caller zeroes the slot's recurrent state.
  int open(int64_t max_tokens);
  void close(int slot);
  int64_t length(int slot) const;
  // Tokens the running sequence in `slot` reserved (the most it can hold).
  int64_t reserved_tokens(int slot) const { return blocks_.reserved_tokens(slot); }
  // Internal error unless `slot` is running.
  void check(int slot) const;
  // Advances the running sequence in `slot` by n ≥ 1 positions without tokens (InferenceEngine::advance_uncomputed):
  // its blocks are taken as a step of n tokens would take them; an input error when n < 1 or the sequence would grow
  // past its reservation. Returns the KV pool slot of each skipped position (where a step would have written it).
  std::vector<int64_t> advance(int slot, int64_t n);

  // Checks a step (N = slots.size() sequences in tokens, each non-empty, running, given once, within its reservation;
  // ids in [0, vocab_size): an input error otherwise), appends the tokens to the slots' blocks and returns the plan.
  StepPlan plan_step(std::span<const int> slots, const TokenBatch& tokens, int64_t vocab_size);

  // The engine's state now: counts (blocks, running sequences, tokens held) and, per layer, its pools' bytes
  // (`reserved_bytes[i]`: layer i's K+V pool or GDN state pools, fixed at the engine's construction), in use in
  // proportion to the blocks held (attention) or to the running sequences (GDN).
  StateUsage usage(std::span<const LayerKind> kinds, std::span<const int64_t> reserved_bytes) const;

 private:
  MemoryPlan plan_;
  KvBlockAllocator blocks_;
  std::vector<bool> used_;
};

}  // namespace hlm
