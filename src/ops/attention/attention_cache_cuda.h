// Attention over a PAGED KV cache on CUDA: launchers for the contract in attention_cache.h (cache layout
// [num_blocks, block_size, Hkv, D], block tables, context_lens, packed queries with cu_seqlens, query head h reads kv
// head h / (Hq / Hkv)), raw device pointers (every array ON THE DEVICE), queued on `stream`, no synchronization, no
// allocation. Queries, outputs and all compute are fp32; the cache is fp32 or bf16 (the bf16 overloads: the write
// rounds k/v to nearest bf16, the readers widen each cached value to fp32 as it is loaded, so the bf16 path equals the
// fp32 path run on a cache holding the rounded values).
//
// attention_cache_write_cuda: k_cache/v_cache rows at slot_mapping[t] ← k/v row t (exact copies).
// attention_cache_forward_cuda picks one of two kernels (attention_cache.cu says more):
//   chunk path (some sequence has more than one new query): one block per (sequence, tile of 64 queries, query head)
//     walks the sequence's cached keys through its block table in tiles of 64 with an online softmax (the kernel of
//     attention.cu with paged key loads and the causal offset context − n_q);
//   decode path (every sequence has exactly one new query, params.max_query_len == 1): flash decoding. One block per
//     (sequence, group of up to 4 query heads of one kv head, key split) reads each cached K/V row of its split ONCE
//     for all its query heads (in 32-key tiles through shared memory when rows are 16-byte multiples; otherwise 8
//     lanes per key row, 16 rows in flight, an online softmax per 8-lane stream merged in shared memory); the splits'
//     (max, sum, unnormalised output) are merged inside a thread-block cluster, by a second kernel or by the last
//     split block (attention_cache_cuda_decode_merge). The split count fills the GPU at small batch and drops to 1
//     at large batch (attention_cache_cuda_decode_splits).
//
// Numerics against the CPU reference (which takes the row max first and sums in double): scores are fp32 FMA dots
// (chunk path: in order d = 0..D−1; decode path: 1, 2 or 4 lanes each over 16-byte chunks, or 8 lanes each over every
// 8th dim, then an xor-shuffle tree)
// times scale; exp is expf; the softmax is online (running max, sum, rescaled output) and, in the decode path, merged
// over streams and splits with exp(m_part − m) weights; out = O / l. Results agree with the CPU to rounding (the
// tests state the bound). Deterministic: fixed reduction orders, no atomics on data.
// Non-finite semantics as attention_cuda.h: keys outside a query's causal range are skipped (never multiplied by 0);
// a row whose visible scores are all −Inf or contain NaN or +Inf gets NaN, as the CPU's exp(−Inf − −Inf) and NaN
// propagation give.
//
// Sliding window (params.window > 0): keys before a query's window are skipped on both paths, and block table entries
// wholly before a chunk's first window (a decode split's ctx − W) are not read, as on the CPU; the tensor-core chunk
// path takes window 0 only (attention_cache_tc_supported).
//
// Bad metadata cannot throw from a kernel: a sequence whose cu_seqlens are inconsistent (cu[0] ≠ 0, decreasing,
// past T, cu[N] ≠ T, more than max_query_len queries), whose context is shorter than its queries, longer than
// max_context or than its block table, sets `*error_flag` (nullable) to 1 and its rows are left unwritten; a block
// table entry outside [0, num_blocks) sets the flag (the outputs that would read it are then meaningless: the decode
// path skips the key, the chunk path reads zeros); a write slot outside the pool sets the flag and is not written.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/rope/rope_cuda.h"

namespace hlm {

struct AttentionCacheCudaParams {
  int64_t total_tokens = 0;   // T: packed query rows
  int64_t n_seqs = 0;         // N
  int64_t q_heads = 0;        // Hq, a multiple of kv_heads
  int64_t kv_heads = 0;       // Hkv
  int64_t head_dim = 0;       // D, 1..attention_cache_cuda_max_head_dim()
  int64_t num_blocks = 0;     // KV blocks in the pool
  int64_t block_size = 0;     // tokens per block
  int64_t max_blocks = 0;     // row length of block_tables
  int64_t max_query_len = 0;  // ≥ the longest cu_seqlens span (1 selects the decode path)
  int64_t max_context = 0;    // ≥ the longest context_lens entry (sizes the decode splits)
  float scale = 1.0f;
  int64_t window = 0;         // sliding window (attention_cache.h): a query at p sees keys p−W+1 .. p; 0 = all
};

constexpr int64_t attention_cache_cuda_max_head_dim() { return 128; }
// Query heads one decode block serves (all of one kv head's group when it has at most this many).
constexpr int64_t attention_cache_cuda_decode_heads_per_block() { return 4; }

// k_cache/v_cache [num_blocks · block_size, Hkv·D] rows slot_mapping[t] ← k/v [t] for t < tokens (int64 slots).
void attention_cache_write_cuda(float* k_cache, float* v_cache, const float* k, const float* v,
                                const int64_t* slot_mapping, int64_t tokens, const AttentionCacheCudaParams& p,
                                int* error_flag, cudaStream_t stream);
void attention_cache_write_cuda(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const float* k, const float* v,
                                const int64_t* slot_mapping, int64_t tokens, const AttentionCacheCudaParams& p,
                                int* error_flag, cudaStream_t stream);

// k_cache/v_cache [pool_rows, row_elements] rows slots[t] ← k_rows/v_rows [t] for t < count, rows already in the
// cache's type (measurements: InferenceEngine::advance_uncomputed with SkippedRows::kRandom). One block per row,
// copied in 16-byte words where the row's bytes allow (4- or 2-byte words otherwise); slots outside [0, pool_rows) are
// skipped. A copy at the memory's speed where attention_cache_write_cuda's per-element kernel would take minutes for
// the millions of rows of a long prefill's skipped positions.
void attention_cache_fill_rows_cuda(float* k_cache, float* v_cache, const float* k_rows, const float* v_rows,
                                    const int64_t* slots, int64_t count, int64_t row_elements, int64_t pool_rows,
                                    cudaStream_t stream);
void attention_cache_fill_rows_cuda(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* k_rows,
                                    const __nv_bfloat16* v_rows, const int64_t* slots, int64_t count,
                                    int64_t row_elements, int64_t pool_rows, cudaStream_t stream);

// How the decode path merges its key splits (all three give the same bits: one merge order and arithmetic):
//   kernel (the default): the splits write partial results to the workspace and a second kernel merges them (each
//     block stages the splits' maxima and sums in shared memory and issues its partial-O loads together);
//   cluster: the splits of each (sequence, head group) run as ONE thread-block cluster (Hopper, ≤ 16 splits) and
//     merge through distributed shared memory: no partial results in the workspace, no second launch. Falls back to
//     `kernel` where a cluster cannot run (compute capability < 9.0, more than 16 splits, the stream kernel for rows
//     that are not 16-byte multiples). Measured slower than `kernel` (H200, session 15: 3.56-3.57 against 3.47-3.48
//     ms per Qwen3-4B batch-1 step at 16 splits): opt-in;
//   fused: each split block counts itself on a per-(sequence, head group) counter after writing its partial result,
//     and the last one merges the group's rows into `out` (one launch fewer). The counters are a per-device array
//     kept for the process, zero between launches (each launch resets what it counted); so two decode launches must
//     not run concurrently on one device (different streams) with the fused merge on, and a launch aborted mid-way
//     leaves them unusable. Not taken (the separate merge runs) for more than 65,536 (sequence, head group) pairs, or
//     when the counters do not exist yet and the stream is capturing a CUDA graph. Measured slower than `kernel`
//     (H200, sessions 13 and 15): opt-in.
// HLM_DECODE_MERGE=kernel|cluster|fused in the environment picks one (read once; another word is an input error); the
// setter overrides (tests, A/B).
enum class DecodeMerge { kernel = 0, fused = 1, cluster = 2 };
DecodeMerge attention_cache_cuda_decode_merge();
void attention_cache_cuda_set_decode_merge(DecodeMerge merge);

// Which kernel reads the cache on the decode path (the split merge above applies to each; different kernels sum in
// different orders, so their outputs agree to rounding, not bit for bit):
//   tiled (the default): 32-key K/V tiles double-buffered in shared memory by cp.async, a block barrier per phase;
//   streams: 16 key rows in flight per block, 8 lanes per row holding every 8th dim (the only kernel for rows that
//     are not 16-byte multiples, which every choice falls back to);
//   warps: each lane group of a warp holds one key's row as 16-byte chunks in registers, 8 steps of K/V loads in
//     flight per lane for 8·(128 / 32)·(keys per warp step) keys per block, no block barrier until the split's end;
//     with one split (large batches) it writes `out` itself and no merge runs. Opt-in until measured (session 29).
// HLM_DECODE_KERNEL=tiled|streams|warps in the environment picks one (read once; another word is an input error);
// the setter overrides (tests, A/B).
enum class DecodeKernel { tiled = 0, streams = 1, warps = 2 };
DecodeKernel attention_cache_cuda_decode_kernel();
void attention_cache_cuda_set_decode_kernel(DecodeKernel kernel);

// Whether attention_cache_decode_prep_cuda may run the tiled kernel (the default decode kernel) with the q/k
// preparation folded in: HLM_DECODE_TILED_QK_FOLD=on|off in the environment (default on: measured faster than the q/k
// launch + the kernel in session 45, bit-identical to them), or the setter (1, 0; −1 back to the environment) for tests
// and A/B runs.
bool attention_cache_cuda_tiled_qk_fold();
void attention_cache_cuda_set_tiled_qk_fold(int on);

// Key splits the decode path uses for these params on the current device (1 when the batch fills the GPU).
int64_t attention_cache_cuda_decode_splits(const AttentionCacheCudaParams& p);
// Bytes of device scratch attention_cache_forward_cuda needs: 0 on the chunk path; on the decode path the splits'
// partial results, N · Hq · splits · (D + 2) floats.
size_t attention_cache_forward_cuda_workspace_bytes(const AttentionCacheCudaParams& p);

// out [T, Hq, D] OVERWRITTEN from q [T, Hq, D] and the cache; block_tables int32 [N, max_blocks], context_lens
// int64 [N], cu_seqlens int64 [N + 1]. `workspace` holds attention_cache_forward_cuda_workspace_bytes(p) bytes, used
// only by work on `stream`. out may not alias q or the cache.
void attention_cache_forward_cuda(float* out, const float* q, const float* k_cache, const float* v_cache,
                                  const int32_t* block_tables, const int64_t* context_lens, const int64_t* cu_seqlens,
                                  const AttentionCacheCudaParams& p, void* workspace, size_t workspace_bytes,
                                  int* error_flag, cudaStream_t stream);
void attention_cache_forward_cuda(float* out, const float* q, const __nv_bfloat16* k_cache,
                                  const __nv_bfloat16* v_cache, const int32_t* block_tables,
                                  const int64_t* context_lens, const int64_t* cu_seqlens,
                                  const AttentionCacheCudaParams& p, void* workspace, size_t workspace_bytes,
                                  int* error_flag, cudaStream_t stream);

// The decode path with an attention layer's q/k preparation folded into the decode kernel: the warp kernel
// (DecodeKernel::warps) for per-head q/k norms or none, or the tiled kernel (DecodeKernel::tiled, when
// attention_cache_cuda_tiled_qk_fold() is on) for per-head norms, norms over the whole q or k row (OLMo's; each block
// sums the row in the q/k kernel's order, attention_decode_prep.cuh) or none: ONE launch (plus the split merge) does
// what qk_norm_rope_cache_write_cuda (ops/qk_norm_rope/qk_norm_rope_cuda.h) followed by attention_cache_forward_cuda
// with that kernel does at a decode step, with the same bits in `out` and in the new k, v rows of the caches. Unlike the q/k launch it leaves q and k
// as they were (the raw projections: every key split's block reads them; nothing after the attention reads the
// normalized ones). Each block prepares its own q heads and its KV head's new k row from the raw projections in
// shared memory (the q/k kernel's per-row operations, qk_row_math.cuh); the block whose key split holds the new token
// writes the cache slot. The new key's k, v enter its scores as the cache would hold them (narrowed, widened back).
// Differences from the two launches, for bad metadata only: a slot outside the pool raises the flag and is not
// written, and the new key still enters the attention (the separate launches would read whatever the block table's
// slot holds). Launched as a programmatic dependent of the projections (HLM_PDL_ATTN's split part).
struct AttentionDecodePrepCuda {
  const float* q = nullptr;              // [T, Hq·D] the raw q projection (not written)
  const float* k = nullptr;              // [T, Hkv·D] the raw k projection (not written)
  const float* v = nullptr;              // [T, Hkv·D]
  const float* q_norm = nullptr;         // [D] per-head RMSNorm weight, [Hq·D] when q_norm_whole, or nullptr
  const float* k_norm = nullptr;         // [D], [Hkv·D] when k_norm_whole, or nullptr
  bool q_norm_whole = false;             // the q norm spans the token's whole q row (the tiled kernel only)
  bool k_norm_whole = false;
  float eps = 1e-6f;
  const int32_t* positions = nullptr;    // [T] RoPE positions (device)
  const RopeCudaTable* rope = nullptr;   // nullptr: no RoPE; else head_dim = D
  const int64_t* slot_mapping = nullptr;  // [T] cache slots of the new rows (device)
  int64_t cache_slots = 0;               // num_blocks · block_size
};
// Whether the folded path takes these params (decode: max_query_len 1; rows of 16-byte multiples, 16-byte aligned
// caches; a valid RoPE table; the chosen decode kernel the warp kernel with per-head norms, or the tiled kernel with
// its fold on); otherwise run the two launches.
bool attention_cache_decode_prep_supported(const AttentionCacheCudaParams& p, const AttentionDecodePrepCuda& prep,
                                           const void* k_cache, const void* v_cache, size_t cache_element_bytes);
template <typename C>
bool attention_cache_decode_prep_supported(const AttentionCacheCudaParams& p, const AttentionDecodePrepCuda& prep,
                                           const C* k_cache, const C* v_cache) {
  return attention_cache_decode_prep_supported(p, prep, k_cache, v_cache, sizeof(C));
}
void attention_cache_decode_prep_cuda(float* out, const AttentionDecodePrepCuda& prep, float* k_cache, float* v_cache,
                                      const int32_t* block_tables, const int64_t* context_lens,
                                      const int64_t* cu_seqlens, const AttentionCacheCudaParams& p, void* workspace,
                                      size_t workspace_bytes, int* error_flag, cudaStream_t stream);
void attention_cache_decode_prep_cuda(float* out, const AttentionDecodePrepCuda& prep, __nv_bfloat16* k_cache,
                                      __nv_bfloat16* v_cache, const int32_t* block_tables,
                                      const int64_t* context_lens, const int64_t* cu_seqlens,
                                      const AttentionCacheCudaParams& p, void* workspace, size_t workspace_bytes,
                                      int* error_flag, cudaStream_t stream);

// Tensor-core chunk path (prefill chunks over a bf16 cache, head dims 64 and 128): bf16 q and out [T, Hq, D], one
// block of 4 warps per (sequence, 64-query tile, query head) stages the sequence's cached K/V tiles through its block
// table with cp.async and runs attention_tc.cu's mma.sync bf16 → fp32 flash forward with the causal offset
// context − n_q (attention_tc.cu, tc_paged_forward_kernel). Numerics: those of attention_cuda.h's tensor-core path
// (exact bf16 products, fp32 accumulation, P fed as hi + lo bf16), out rounded once to bf16. Metadata validation and
// the error flag as above. One difference from the contract above: a non-finite v row of a NEW token can make the
// earlier rows of its 16-key chunk NaN (the partially masked chunk goes through the mma as P = 0 · v).
bool attention_cache_tc_supported(const AttentionCacheCudaParams& p);
void attention_cache_forward_tc_cuda(__nv_bfloat16* out, const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                     const __nv_bfloat16* v_cache, const int32_t* block_tables,
                                     const int64_t* context_lens, const int64_t* cu_seqlens,
                                     const AttentionCacheCudaParams& p, int* error_flag, cudaStream_t stream);

}  // namespace hlm
