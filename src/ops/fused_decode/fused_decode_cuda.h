// The whole decoder of one batch-1 decode step in ONE persistent kernel (CUDA, sm_90): every layer's RMSNorm, q/k/v
// products, q/k norm + RoPE + paged KV-cache write, attention over the cache, o_proj + residual, RMSNorm, gate/up
// products + SwiGLU, down product + residual, for a pre-norm decoder whose layers are all full attention with a dense
// SwiGLU MLP and bf16 weights (qwen3, granite). It replaces ~10 launches per layer of the engine's eager decode
// (infer/cuda/cuda_engine.cpp), whose short GEMVs each pay a ramp-up and a tail (docs/benchmarks.md, sessions 11-20:
// 10-30 µs launches at 2.2-3.3 TB/s where a long weight stream reaches 4.2 TB/s).
//
// Design. One block per multiprocessor (cooperative launch: all resident), 1 producer warp + 8 consumer warps.
//   - The weights are one static stream per block: for each layer, the block's share of the rows of [q; k; v], of
//     o_proj, of the (gate row j, up row j) pairs and of down_proj, a contiguous row range of each matrix. The
//     producer's one thread copies it in slices of whole rows (≤ 40 KB) into a 4-slot shared-memory ring with bulk
//     asynchronous copies (cp.async.bulk + mbarrier transaction counts), running ahead of the consumers across phase
//     and layer boundaries: the weights never depend on the activations, so the memory system stays busy while the
//     consumers wait at a grid barrier or run attention.
//   - The consumers form the phase's input vector x in shared memory as bf16 (RMSNorm of the residual stream h, the
//     attention output, or the SwiGLU activations: every block computes it itself from L2), then each warp takes whole
//     rows of a slice: an fp32 dot product of the bf16 row and x, an xor-shuffle sum. Results: q/k/v and the SwiGLU
//     activations into global scratch; o_proj and down_proj rows added to h (h[r] += residual_multiplier · y[r], each
//     row owned by one warp of one block).
//   - Attention: (kv head, key split) units over the blocks (16 splits of the context per kv head with 132 blocks and
//     8 kv heads). A unit normalizes and rotates its q heads (and, for the split holding the new token, its k and v,
//     which it also writes into the cache, rounded to bf16, and uses from shared memory), runs an online softmax over
//     its keys (a warp per key, fp32 dots), merges its 8 warps and writes (max, sum, unnormalised output); the last
//     unit of a kv head to finish (an atomic counter) merges the splits into the attention output.
//   - Between phases a grid barrier (one atomic counter; release fence before the arrival, acquire load while
//     waiting); data crossing blocks is read with ld.global.cg (L2), never a possibly stale L1 line.
// Numerics: as the eager bf16 decode, not its bits (the sums run in another order): RMSNorm Σx² in fp32,
// r = 1/sqrt(Σ/n + eps), y = w·(x·r); products on bf16 x with fp32 accumulation; q/k norm and RoPE in fp32 (RoPE with
// rope.cu's separately rounded products); k/v rounded to bf16 as the cache holds them; scores fp32 × scale, expf,
// online softmax, splits merged with exp(m_s − m) weights; SwiGLU silu(g)·u in fp32; the residual stream fp32.
// Expect ~1e-3 relative differences in logits against the eager decode (tests/cuda_models, stated there).
// Bad input cannot throw from the kernel: a position outside the rope table sets *error_flag and gives NaN rotary
// dims (as rope.cu); a cache slot or block-table entry outside the pool sets *error_flag and is skipped.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hlm {

// One decoder layer's device pointers (an array of these lives on the device for the kernel).
struct FusedDecodeLayer {
  const float* input_norm = nullptr;           // [hidden]
  const float* post_attention_norm = nullptr;  // [hidden]
  const __nv_bfloat16* q = nullptr;            // [Hq·D, hidden]
  const __nv_bfloat16* k = nullptr;            // [Hkv·D, hidden]
  const __nv_bfloat16* v = nullptr;            // [Hkv·D, hidden]
  const __nv_bfloat16* o = nullptr;            // [hidden, Hq·D]
  const __nv_bfloat16* gate = nullptr;         // [F, hidden]
  const __nv_bfloat16* up = nullptr;           // [F, hidden]
  const __nv_bfloat16* down = nullptr;         // [hidden, F]
  const float* q_norm = nullptr;               // [D] or nullptr (no q norm)
  const float* k_norm = nullptr;               // [D] or nullptr
  __nv_bfloat16* k_cache = nullptr;            // [num_blocks, block_size, Hkv, D]
  __nv_bfloat16* v_cache = nullptr;
  int64_t window = 0;                          // sliding window (0: full attention)
};

struct FusedDecodeShape {
  int64_t layers = 0, hidden = 0, q_heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  float norm_eps = 1e-6f;              // the decoder norms
  float qk_norm_eps = 1e-6f;           // the q/k norms
  float residual_multiplier = 1.0f;    // h += multiplier · branch
  float attention_scale = 1.0f;        // scores = q·k · scale
  int64_t num_blocks = 0, block_size = 0;  // the KV pool
  int64_t max_blocks = 0;              // the block table's row length
  // Diagnosis: consumers that release each slot without computing (the results are then meaningless; it times the
  // weight stream alone).
  bool skip_products = false;
  // fp32-FMA row dots instead of the tensor-core ones; and how far beyond the slot it waits for the producer asks L2
  // for the block's next weights (cp.async.bulk.prefetch.L2; 0: none). Session 22 (qwen3_4b): FMA dots faster than
  // tensor-core ones (4.48 vs 4.84 ms), the prefetch slower at every distance (128-512 KB: 5.13-5.88 ms).
  bool fma_dots = false;
  int64_t l2_prefetch_bytes = 0;
};

// The step's metadata, all on the device (the engine's upload): the token's position, its cache slot, its
// sequence's block table row and context length (the new token included), the rope table (cos/sin
// [rope_positions, rotary_dim/2]; nullptr: no RoPE) and the error flag (nullable, never cleared).
struct FusedDecodeStep {
  const int32_t* position = nullptr;
  const int64_t* cache_slot = nullptr;
  const int32_t* block_table = nullptr;
  const int64_t* context = nullptr;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  int64_t rope_positions = 0, rotary_dim = 0;
  int* error_flag = nullptr;
  // Profiling (nullable): [layers, grid, kFusedDecodeMarks] globaltimer stamps (ns) by each block's first consumer
  // thread at the marks below; grid = fused_decode_cuda_grid().
  unsigned long long* timeline = nullptr;
};

// The timeline's marks per layer: 0 start, 1 q/k/v rows done, 2 after the barrier, 3 attention done, 4 after the
// barrier, 5 o_proj rows done, 6 after the barrier, 7 gate/up activations done, 8 after the barrier, 9 down_proj rows
// done; then, in blocks that ran an attention unit (the others keep the buffer's earlier values), its steps: 10 heads
// prepared and block ids loaded, 11 keys done, 12 partial written and counted, 13 splits merged (by the last split of
// the kv head; the others pass through at once).
inline constexpr int kMarkHeadsReady = 10, kMarkKeysDone = 11, kMarkPartialWritten = 12, kMarkSplitsMerged = 13;
inline constexpr int kFusedDecodeMarks = 14;
// The kernel's grid on the current device (one block per multiprocessor).
int fused_decode_cuda_grid(int64_t head_dim);

// "" when the kernel runs this shape on the current device, else why not (head dim 64/128/256, products' inner
// dims multiples of 8 and ≤ 20,480, ≤ 8 q heads per kv head, a device of compute capability 9.0 with the shared memory).
std::string fused_decode_cuda_refusal(const FusedDecodeShape& shape);

// Device scratch the kernel needs (q/k/v, attention output, activations, split partials, counters).
size_t fused_decode_cuda_workspace_bytes(const FusedDecodeShape& shape);

// hidden [hidden] fp32 (device): the embedding's output in, the residual stream after the last layer out (before
// the final norm). layers: device array of shape.layers entries. workspace: fused_decode_cuda_workspace_bytes,
// 256-byte aligned. Queued on `stream` (a cooperative launch, capturable in a CUDA graph), no synchronization.
void fused_decode_cuda(float* hidden, const FusedDecodeLayer* layers, const FusedDecodeShape& shape,
                       const FusedDecodeStep& step, void* workspace, cudaStream_t stream);

}  // namespace hlm
