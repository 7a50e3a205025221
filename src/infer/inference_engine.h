// The inference engine interface: a model plus its inference state (paged KV cache for full-attention layers, conv +
// recurrent state for GDN layers) laid out by a MemoryPlan, driven one step at a time. A step appends tokens to any
// set of running sequences — a prefill chunk (many tokens of one or more sequences) or a decode step (one token each,
// sequences of different lengths) — and returns the logits of each sequence's last new token. The CPU engine
// (cpu_engine.h) is the reference; a CUDA engine implements the same interface (its code in infer/cuda/), so the
// generation loop (generate.h) and the CLI do not know which one runs.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "infer/memory_plan.h"
#include "infer/skipped_rows.h"
#include "layers/token_batch.h"
#include "models/hf_config.h"

namespace hlm {

// State bytes of one layer as allocated now (measured from the engine's buffers, not from the plan's arithmetic).
struct LayerStateBytes {
  LayerKind kind;
  int64_t bytes_in_use = 0;    // attention: blocks held × K+V bytes per block; GDN: running sequences × state bytes
  int64_t bytes_reserved = 0;  // the pool this layer allocated for the whole plan
};

struct StateUsage {
  std::vector<LayerStateBytes> layers;
  int64_t kv_blocks_in_use = 0;
  int64_t running_sequences = 0;
  int64_t tokens_held = 0;  // sum of the running sequences' lengths
  int64_t bytes_in_use() const;
  int64_t bytes_reserved() const;
};

class InferenceEngine {
 public:
  virtual ~InferenceEngine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const MemoryPlan& plan() const = 0;
  virtual std::string device() const = 0;  // "cpu", "cuda:0", ...

  // Starts a sequence that will hold at most `max_tokens` tokens (prompt + fed-back generated tokens) and returns its
  // slot, or -1 when no slot or not enough unpromised KV blocks are free now. Its state starts at zero.
  virtual int open_sequence(int64_t max_tokens) = 0;
  // Ends a sequence, returning its blocks and slot.
  virtual void close_sequence(int slot) = 0;
  // Tokens the sequence holds so far (its next token's position).
  virtual int64_t sequence_length(int slot) const = 0;
  // Appends tokens.sequence(i) to sequence slots[i] (each non-empty, within its reservation; ids < vocab) and
  // returns the logits [N, V] (host f32) of each sequence's last new token. Positions continue each sequence.
  virtual Tensor step(std::span<const int> slots, const TokenBatch& tokens) = 0;
  // For measurements only (bench_generate --search-context): advances the running sequence in `slot` by n positions
  // without computing them — its KV blocks for those positions are taken, its recurrent state is left as it is. A
  // later step then runs at the positions and context lengths it would have after n real tokens, with the same
  // buffers and the same memory, so the last chunk of a long prefill can be measured without prefilling the chunks
  // before it; later logits are those of a context whose skipped rows hold what `rows` says (skipped_rows.h: as they were, or values of a real cache's order for
  // timing). Input error when n < 1 or past the sequence's reservation.
  virtual void advance_uncomputed(int slot, int64_t n, SkippedRows rows) = 0;

  virtual StateUsage state_usage() const = 0;
};

}  // namespace hlm
