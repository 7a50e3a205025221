// The paged-cache attention kernels' shared device pieces (attention_cache.cu, the warp decode kernel's
// attention_decode_warps.cuh, and tools/cuda_emu's host emulation of that kernel): the shapes as the kernels see them,
// a sequence's view of the metadata with its validation, key rows through the block table, cache element widening and
// narrowing, the decode path's constants, the split merge (merge_split_rows, the fused last-block tail), a split's key
// range, and 16-byte chunk widening. Internal linkage: included by one translation unit each.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"

namespace hlm {

namespace {

using cuda::quiet_nan;

constexpr unsigned kFullMask = 0xffffffffu;

// Shapes as the kernels see them.
struct CacheDims {
  int64_t T, N, Hq, Hkv, group, num_blocks, block_size, max_blocks, max_q, max_ctx;
  int64_t n_tiles;  // chunk path: query tiles per sequence
  int D;
  float scale;
  int64_t window;  // sliding window: a query at p sees keys p−W+1 .. p (0 = all earlier keys)
  int block_shift = -1;  // log2(block_size) when it is a power of two (set by make_dims), else −1
};

struct SeqView {
  int64_t begin, nq, ctx;
  const int32_t* table;
  bool ok;
};

// Sequence `seq`'s rows, context and block table, validated (header of attention_cache_cuda.h); a bad one raises
// the flag when `flag` is given.
__device__ SeqView seq_view(const int64_t* cu, const int64_t* context_lens, const int32_t* tables, int64_t seq,
                            const CacheDims& dm, int* flag) {
  const int64_t b = cu[seq], e = cu[seq + 1], c = context_lens[seq];
  bool ok = b >= 0 && e >= b && e <= dm.T && e - b <= dm.max_q && c >= e - b && c <= dm.max_ctx &&
            (c + dm.block_size - 1) / dm.block_size <= dm.max_blocks;
  if (seq == 0 && b != 0) ok = false;
  if (seq == dm.N - 1 && e != dm.T) ok = false;
  if (!ok && flag != nullptr && threadIdx.x == 0) atomicOr(flag, 1);
  return {b, e - b, c, tables + seq * dm.max_blocks, ok};
}

// CacheDims::block_shift for a block size: its log2 when it is a power of two, else −1.
inline int block_shift_of(int64_t block_size) {
  if (block_size <= 0 || (block_size & (block_size - 1)) != 0) return -1;
  int shift = 0;
  while ((int64_t{1} << shift) < block_size) ++shift;
  return shift;
}

// Key position p's block-table entry and its slot in that block: a shift and a mask for a power-of-two block size (the
// default 16), else 64-bit division (tens of instructions per key row).
struct KeyPage {
  int64_t page, slot;
};
__device__ __forceinline__ KeyPage key_page(int64_t p, const CacheDims& dm) {
  if (dm.block_shift >= 0) return {p >> dm.block_shift, p & (dm.block_size - 1)};
  return {p / dm.block_size, p % dm.block_size};
}

// Float offset of the row in block `block`, slot `slot` for kv head kvh, or −1 when the block id is bad.
__device__ __forceinline__ int64_t block_row(int64_t block, int64_t slot, int64_t kvh, const CacheDims& dm) {
  if (block < 0 || block >= dm.num_blocks) return -1;
  return ((block * dm.block_size + slot) * dm.Hkv + kvh) * dm.D;
}

// Float offset of key position p's row for kv head kvh in the cache, or −1 (flag raised) for a bad block id.
__device__ __forceinline__ int64_t key_row(const int32_t* table, int64_t p, int64_t kvh, const CacheDims& dm,
                                           int* flag) {
  const KeyPage kp = key_page(p, dm);
  const int64_t off = block_row(table[kp.page], kp.slot, kvh, dm);
  if (off < 0 && flag != nullptr) atomicOr(flag, 1);
  return off;
}

// Cache element <-> fp32 (the bf16 rounding is round-to-nearest-even, as cast_f32_to_bf16_cuda).
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename C>
__device__ __forceinline__ C narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// ---- decode path

constexpr int kDecodeThreads = 128;
constexpr int kKeyLanes = 8;                                     // lanes sharing one key row
constexpr int kStreams = kDecodeThreads / kKeyLanes;             // key rows in flight per block
constexpr int64_t kMinSplitKeys = 64;  // fewer keys per split: merging costs more (two 32-key tiles of the tiled kernel)
constexpr int64_t kMaxSplits = 64;
constexpr int64_t kMaxClusterSplits = 16;  // the largest thread-block cluster on Hopper (non-portable size)

// The split merge folded into the decode kernels (DecodeMerge::fused): `counters` [N · Hq/HPB], zero
// between launches, counts the finished splits of each (sequence, head group); the block that finishes last merges
// the group's rows into `out` and sets its counter back to 0. counters == nullptr: the separate merge kernel runs.
struct FusedMerge {
  float* out = nullptr;
  unsigned* counters = nullptr;
};

// out rows (seq, h0 + i), i < heads, from the splits' partial results [.., splits, D + 2]: mx = the splits' maxima
// folded with fmaxf in split order; per dim, sum and acc are FMA chains over the splits in order with weights
// exp(m_s − mx); out = acc · (1 / sum), NaN when every split's max is −Inf. Every output element is computed by one
// thread in that fixed order, so any thread layout gives the same bits (the merge kernel and the fused tail share
// it). The partial results are read with L2 loads (__ldcg): in the fused tail they were written by other blocks.
// Latency: the splits' (max, sum) pairs are staged in shared memory by all threads at once, and each thread issues
// its first kMergePreload partial-O loads together with them, so a merge of ≤ kMergePreload splits costs one round
// trip to L2 instead of one per split (session 14's trace: 6.6 µs per call with the loads in a dependent chain).
constexpr int kMergePreload = 16;
constexpr int kMergeMaxHeads = 4;  // attention_cache_cuda_decode_heads_per_block()
__device__ __forceinline__ void merge_split_rows(float* out, const float* part, int64_t seq, int64_t h0, int heads,
                                                 int64_t row, const CacheDims& dm, int64_t splits, int tid,
                                                 int nthreads) {
  static_assert(kMaxSplits == 64, "ml_s holds kMaxSplits splits");
  __shared__ float ml_s[kMergeMaxHeads][2][64];  // [head][max | sum][split]
  const int64_t stride = dm.D + 2;
  for (int idx = tid; idx < heads * 2 * splits; idx += nthreads) {
    const int hh = idx / (2 * static_cast<int>(splits)), r = idx % (2 * static_cast<int>(splits));
    const int which = r / static_cast<int>(splits), sp = r % static_cast<int>(splits);
    ml_s[hh][which][sp] = __ldcg(part + ((seq * dm.Hq + h0 + hh) * splits + sp) * stride + dm.D + which);
  }
  // Each thread's first element: its partial-O values of the first kMergePreload splits, loaded before the barrier.
  float pre[kMergePreload];
  {
    const int idx = tid < heads * dm.D ? tid : 0;
    const float* p = part + (seq * dm.Hq + h0 + idx / dm.D) * splits * stride + idx % dm.D;
#pragma unroll
    for (int s = 0; s < kMergePreload; ++s) pre[s] = s < splits && tid < heads * dm.D ? __ldcg(p + s * stride) : 0.0f;
  }
  __syncthreads();
  for (int idx = tid; idx < heads * dm.D; idx += nthreads) {
    const int hh = idx / dm.D, d = idx % dm.D;
    const float* p = part + (seq * dm.Hq + h0 + hh) * splits * stride;
    float mx = -INFINITY;
    for (int64_t s = 0; s < splits; ++s) mx = fmaxf(mx, ml_s[hh][0][s]);
    float sum = 0.0f, acc = 0.0f;
    int64_t s0 = 0;
    if (idx == tid) {  // this thread's first element: the preloaded splits first (same order, same arithmetic)
#pragma unroll
      for (int u = 0; u < kMergePreload; ++u)
        if (u < splits) {
          const float w = expf(ml_s[hh][0][u] - mx);
          sum = fmaf(ml_s[hh][1][u], w, sum);
          acc = fmaf(pre[u], w, acc);
        }
      s0 = splits < kMergePreload ? splits : kMergePreload;
    }
    for (int64_t s = s0; s < splits; ++s) {
      const float w = expf(ml_s[hh][0][s] - mx);
      sum = fmaf(ml_s[hh][1][s], w, sum);
      acc = fmaf(__ldcg(p + s * stride + d), w, acc);
    }
    out[(row * dm.Hq + h0 + hh) * dm.D + d] = mx == -INFINITY ? quiet_nan() : acc * (1.0f / sum);
  }
}

// End of a decode block (every thread calls it, after its last store of the partial results): count this split; the
// last of its (sequence, head group) merges the HPB rows (the threadFenceReduction pattern: each thread's stores are
// fenced before thread 0's atomic, and the last block fences before reading the others' results).
template <int HPB>
__device__ void decode_merge_if_last(const FusedMerge& fm, const float* part, int64_t seq, int64_t h0, int64_t row,
                                     const CacheDims& dm, int64_t splits) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* c = fm.counters + seq * gridDim.y + blockIdx.y;
    last = atomicAdd(c, 1u) == static_cast<unsigned>(splits - 1);
    if (last) *c = 0u;  // every split of the group has counted: ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  merge_split_rows(fm.out, part, seq, h0, HPB, row, dm, splits, static_cast<int>(threadIdx.x),
                   static_cast<int>(blockDim.x));
}

// Keys [kb, ke) of key split `split` (split_len keys each) of a sequence whose query is at ctx − 1: the window's first
// key when that is later (a query at ctx − 1 sees ctx − W .. ctx − 1); kb ≥ ke for a split with nothing to read.
struct KeyRange {
  int64_t kb, ke;
};
__device__ __forceinline__ KeyRange split_keys(int64_t split, int64_t split_len, int64_t ctx, int64_t window) {
  int64_t kb = split * split_len;
  const int64_t ke = kb + split_len < ctx ? kb + split_len : ctx;
  if (window > 0 && kb < ctx - window) kb = ctx - window;
  return {kb, ke};
}

// 16 bytes of cache elements (8 bf16 or 4 floats) widened to fp32.
__device__ __forceinline__ void widen16(const uint4& u, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void widen16(const uint4& u, float (&f)[4]) {
  f[0] = __uint_as_float(u.x);
  f[1] = __uint_as_float(u.y);
  f[2] = __uint_as_float(u.z);
  f[3] = __uint_as_float(u.w);
}

}  // namespace

}  // namespace hlm
