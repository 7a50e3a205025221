// Attention over a paged KV cache: CUDA kernels and launchers (contract: attention_cache.h, attention_cache_cuda.h).
//   write:   one thread per cached float, rows scattered to their slots.
//   chunk:   one block (256 threads, 4 per query row) per (sequence, 64-query tile, query head): q tile in shared
//            memory; per 64-key tile of the sequence's context the key rows are located through the block table once
//            (row offsets in shared memory), K and V staged, scores, running max and sum, P V in registers
//            (attention.cu's forward kernel with paged loads and the causal offset context − n_q).
//   decode:  flash decoding (header comment of attention_cache_cuda.h): grid (sequence, head group, key split), 128
//            threads. Tiled kernel (rows of 16-byte multiples, the usual case): 32-key K/V tiles double-buffered in
//            shared memory by cp.async, each K/V row read once for up to 4 query heads (cache_decode_tiled_kernel).
//            Stream kernel (other head dims, or HLM_DECODE_KERNEL=streams): 16 key streams of 8 lanes; each lane
//            holds every 8th dim of q, of the key/value row it loads and of its stream's output; streams merge in
//            shared memory. Warp kernel (HLM_DECODE_KERNEL=warps, 16-byte rows): lane groups hold key rows as
//            16-byte chunks in registers, 8 steps of loads in flight, no block barrier in the key loop
//            (cache_decode_warps_kernel); with one split it writes the output rows itself. Splits merge in
//            cache_decode_merge_kernel (default), inside a thread-block cluster (the tiled kernel's cluster launch,
//            DecodeMerge::cluster; decode_cluster_merge), or in the decode kernel's last block of each (sequence,
//            head group) (DecodeMerge::fused).
// Every kernel is a template over the cache's element type C (float, or __nv_bfloat16 for the bf16 cache): cached
// values are widened to fp32 as they are loaded and everything after the load is the same fp32 code.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/attention/attention_tc.cuh"
#include "ops/qk_norm_rope/qk_row_math.cuh"

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

// Float offset of key position p's row for kv head kvh in the cache, or −1 (flag raised) for a bad block id.
__device__ __forceinline__ int64_t key_row(const int32_t* table, int64_t p, int64_t kvh, const CacheDims& dm,
                                           int* flag) {
  const int64_t block = table[p / dm.block_size];
  if (block < 0 || block >= dm.num_blocks) {
    if (flag != nullptr) atomicOr(flag, 1);
    return -1;
  }
  return ((block * dm.block_size + p % dm.block_size) * dm.Hkv + kvh) * dm.D;
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

// ---- write

template <typename C>
__global__ void cache_write_kernel(C* k_cache, C* v_cache, const float* k, const float* v,
                                   const int64_t* slot_mapping, int64_t tokens, int64_t row, int64_t slots,
                                   int* flag) {
  const int64_t n = tokens * row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / row, s = slot_mapping[t];
    if (s < 0 || s >= slots) {
      if (flag != nullptr && i % row == 0) atomicOr(flag, 1);
      continue;
    }
    k_cache[s * row + i % row] = narrow<C>(k[i]);
    v_cache[s * row + i % row] = narrow<C>(v[i]);
  }
}

// ---- chunk path

constexpr int kThreads = 256;
constexpr int kRowThreads = 4;
constexpr int kTile = 64;  // queries per block and keys per step
static_assert(kThreads == kTile * kRowThreads, "one row per 4 threads");
constexpr int kPerThread = kTile / kRowThreads;
constexpr int kScoreStride = kTile + 1;

template <int DMAX>
inline constexpr int kRowStride = DMAX + 1;

template <int DMAX>
constexpr size_t chunk_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(3 * kTile) * kRowStride<DMAX> + kTile * kScoreStride) +
         sizeof(int64_t) * kTile;
}

__device__ __forceinline__ float row_dot(const float* a, const float* b, int D) {
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}
__device__ __forceinline__ float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float row_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

template <int DMAX, typename C>
__global__ void __launch_bounds__(kThreads)
    cache_chunk_kernel(float* out, const float* q, const C* k_cache, const C* v_cache,
                       const int32_t* tables, const int64_t* context_lens, const int64_t* cu, CacheDims dm,
                       int* flag) {
  constexpr int S = kRowStride<DMAX>;
  constexpr int kOwn = DMAX / kRowThreads;
  const int64_t seq = blockIdx.x / dm.n_tiles, q0 = (blockIdx.x % dm.n_tiles) * kTile, h = blockIdx.y;
  const SeqView sv = seq_view(cu, context_lens, tables, seq, dm, flag);
  if (!sv.ok || q0 >= sv.nq) return;  // uniform over the block
  const int64_t kvh = h / dm.group, start = sv.ctx - sv.nq;  // start: absolute position of the chunk's query 0

  extern __shared__ float smem[];
  float* q_s = smem;            // [kTile][S]
  float* k_s = q_s + kTile * S;  // [kTile][S]
  float* v_s = k_s + kTile * S;  // [kTile][S]
  float* p_s = v_s + kTile * S;  // [kTile][kScoreStride]
  auto* row_s = reinterpret_cast<int64_t*>(p_s + kTile * kScoreStride);  // [kTile] cache offsets of the key tile

  const int64_t q_rows = sv.nq - q0;
  for (int idx = threadIdx.x; idx < kTile * DMAX; idx += kThreads) {
    const int r = idx / DMAX, d = idx % DMAX;
    q_s[r * S + d] = r < q_rows && d < dm.D ? q[((sv.begin + q0 + r) * dm.Hq + h) * dm.D + d] : 0.0f;
  }
  const int r = threadIdx.x / kRowThreads, sub = threadIdx.x % kRowThreads;
  const bool row_valid = r < q_rows;
  const int64_t qpos = start + q0 + r;  // absolute position of this row's query
  float o[kOwn];
#pragma unroll
  for (int c = 0; c < kOwn; ++c) o[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const int64_t last = start + q0 + kTile < sv.ctx ? start + q0 + kTile : sv.ctx;  // keys the last row sees
  // Sliding window: key tiles before the first row's window are skipped whole (their blocks are never read).
  const int64_t first = start + q0 - dm.window + 1;
  const int64_t k_first = dm.window > 0 && first > 0 ? first / kTile * kTile : 0;
  const int64_t row_lo = dm.window > 0 && qpos - dm.window + 1 > 0 ? qpos - dm.window + 1 : 0;  // first visible key
  for (int64_t k0 = k_first; k0 < last; k0 += kTile) {
    const int64_t n_rows = last - k0 < kTile ? last - k0 : kTile;
    __syncthreads();  // the previous tile's reads of k_s, v_s, p_s, row_s are done
    // Rows before the first row's window are not looked up (a window layer may have released their blocks).
    if (threadIdx.x < n_rows)
      row_s[threadIdx.x] = k0 + threadIdx.x >= first || dm.window == 0
                               ? key_row(sv.table, k0 + threadIdx.x, kvh, dm, flag)
                               : -1;
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * DMAX; idx += kThreads) {
      const int j = idx / DMAX, d = idx % DMAX;
      const int64_t off = j < n_rows && d < dm.D ? row_s[j] : -1;
      k_s[j * S + d] = off >= 0 ? widen(k_cache[off + d]) : 0.0f;
      v_s[j * S + d] = off >= 0 ? widen(v_cache[off + d]) : 0.0f;
    }
    __syncthreads();
    const int64_t vis = row_valid ? qpos + 1 - k0 : 0;
    const int n_vis = static_cast<int>(vis < 0 ? 0 : (vis > kTile ? kTile : vis));
    const int64_t lo = row_lo - k0;
    const int j_lo = static_cast<int>(lo < 0 ? 0 : (lo > kTile ? kTile : lo));  // keys [j_lo, n_vis) of the tile
    float s[kPerThread];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int j = sub + kRowThreads * c;
      const bool visible = j >= j_lo && j < n_vis;
      s[c] = visible ? row_dot(q_s + r * S, k_s + j * S, dm.D) * dm.scale : 0.0f;
      if (visible) tile_max = fmaxf(tile_max, s[c]);
    }
    const float m_new = fmaxf(m, row_max(tile_max));
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all −Inf so far: keep l, O at 0 (attention.cu)
    const float alpha = expf(m - m_use);
    float e_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int j = sub + kRowThreads * c;
      const float e = j >= j_lo && j < n_vis ? expf(s[c] - m_use) : 0.0f;
      p_s[r * kScoreStride + j] = e;
      e_sum += e;
    }
    l = fmaf(alpha, l, row_sum(e_sum));
    m = m_new;
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kOwn; ++c) o[c] *= alpha;
    for (int j = j_lo; j < n_vis; ++j) {
      const float pj = p_s[r * kScoreStride + j];
      const float* vj = v_s + j * S + sub;
#pragma unroll
      for (int c = 0; c < kOwn; ++c) o[c] = fmaf(pj, vj[kRowThreads * c], o[c]);
    }
  }
  if (!row_valid) return;
  const int64_t row = (sv.begin + q0 + r) * dm.Hq + h;
  const bool no_finite_max = m == -INFINITY;
  const float inv_l = 1.0f / l;
#pragma unroll
  for (int c = 0; c < kOwn; ++c) {
    const int d = sub + kRowThreads * c;
    if (d < dm.D) out[row * dm.D + d] = no_finite_max ? quiet_nan() : o[c] * inv_l;
  }
}

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

// part: [N, Hq, splits, D + 2] = unnormalised O (D floats), running max, running sum of the split.
template <int DMAX, int HPB, typename C>
__global__ void __launch_bounds__(kDecodeThreads)
    cache_decode_kernel(float* part, const float* q, const C* k_cache, const C* v_cache,
                        const int32_t* tables, const int64_t* context_lens, const int64_t* cu, CacheDims dm,
                        int64_t splits, int64_t split_len, int* flag, FusedMerge fm) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  constexpr int DPL = DMAX / kKeyLanes;  // dims per lane
  const int64_t seq = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * HPB, split = blockIdx.z;
  const SeqView sv = seq_view(cu, context_lens, tables, seq, dm, blockIdx.y == 0 && split == 0 ? flag : nullptr);
  if (!sv.ok || sv.nq == 0) return;  // no query: nothing to write (row sv.begin is another sequence's)
  const int64_t kvh = h0 / dm.group;
  const int lane = threadIdx.x & 31, l8 = lane & (kKeyLanes - 1);
  const int stream = threadIdx.x / kKeyLanes;
  const KeyRange keys = split_keys(split, split_len, sv.ctx, dm.window);
  const int64_t kb = keys.kb, ke = keys.ke;

  float qr[HPB][DPL], o[HPB][DPL], m[HPB], l[HPB];
#pragma unroll
  for (int hh = 0; hh < HPB; ++hh) {
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      const int d = l8 + kKeyLanes * c;
      qr[hh][c] = d < dm.D ? q[(sv.begin * dm.Hq + h0 + hh) * dm.D + d] : 0.0f;
      o[hh][c] = 0.0f;
    }
  }
  for (int64_t j0 = kb; j0 < ke; j0 += kStreams) {
    const int64_t j = j0 + stream;
    const int64_t off = j < ke ? key_row(sv.table, j, kvh, dm, l8 == 0 ? flag : nullptr) : -1;
    const bool valid = off >= 0;  // uniform over the 8 lanes of the stream
    float kr[DPL], vr[DPL];
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      const int d = l8 + kKeyLanes * c;
      kr[c] = valid && d < dm.D ? widen(k_cache[off + d]) : 0.0f;
      vr[c] = valid && d < dm.D ? widen(v_cache[off + d]) : 0.0f;
    }
#pragma unroll
    for (int hh = 0; hh < HPB; ++hh) {
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < DPL; ++c) s = fmaf(qr[hh][c], kr[c], s);
      s += __shfl_xor_sync(kFullMask, s, 1);
      s += __shfl_xor_sync(kFullMask, s, 2);
      s += __shfl_xor_sync(kFullMask, s, 4);
      s *= dm.scale;
      if (!valid) continue;  // skipped, never multiplied by 0
      const float m_new = fmaxf(m[hh], s);  // fmaxf skips NaN, like the CPU's std::max
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = expf(m[hh] - m_use), e = expf(s - m_use);
      l[hh] = fmaf(alpha, l[hh], e);
      m[hh] = m_new;
#pragma unroll
      for (int c = 0; c < DPL; ++c) o[hh][c] = fmaf(e, vr[c], o[hh][c] * alpha);
    }
  }
  // Merge the streams: M = max of the streams' maxima, each stream weighted by exp(m_stream − M).
  __shared__ float o_s[kStreams][HPB][DMAX];
  __shared__ float m_s[kStreams][HPB], l_s[kStreams][HPB];
#pragma unroll
  for (int hh = 0; hh < HPB; ++hh) {
#pragma unroll
    for (int c = 0; c < DPL; ++c) o_s[stream][hh][l8 + kKeyLanes * c] = o[hh][c];
    if (l8 == 0) {
      m_s[stream][hh] = m[hh];
      l_s[stream][hh] = l[hh];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < HPB * dm.D; idx += kDecodeThreads) {
    const int hh = idx / dm.D, d = idx % dm.D;
    float mx = -INFINITY;
    for (int g = 0; g < kStreams; ++g) mx = fmaxf(mx, m_s[g][hh]);
    const float m_use = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f, acc = 0.0f;
    for (int g = 0; g < kStreams; ++g) {
      const float w = expf(m_s[g][hh] - m_use);
      sum = fmaf(l_s[g][hh], w, sum);
      acc = fmaf(o_s[g][hh][d], w, acc);
    }
    float* dst = part + ((seq * dm.Hq + h0 + hh) * splits + split) * (dm.D + 2);
    dst[d] = acc;
    if (d == 0) {
      dst[dm.D] = mx;
      dst[dm.D + 1] = sum;
    }
  }
  if (fm.counters != nullptr) decode_merge_if_last<HPB>(fm, part, seq, h0, sv.begin, dm, splits);
}

// The split merge of a cluster launch: block `rank` of the (sequence, head group)'s cluster holds split `rank`'s
// unnormalised O (o_split), max (m_split) and sum (l_split) per head in its shared memory. After a cluster barrier,
// the group's HPB · D outputs are dealt to the cluster's blocks in equal runs, and each output is merged exactly as
// merge_split_rows does it (maxima folded with fmaxf in split order, FMA chains of sum and acc over the splits in
// order with weights exp(m_s − mx), out = acc · (1 / sum), NaN when every max is −Inf): the same bits as the separate
// merge kernel, read from the other blocks' shared memory (DSMEM) instead of a global workspace. A second barrier keeps
// every block's shared memory alive until the last reader is done.
template <int HPB, int DMAX>
__device__ __forceinline__ void decode_cluster_merge(float* out, float (&o_split)[HPB][DMAX], float (&m_split)[HPB],
                                                     float (&l_split)[HPB], int64_t row, int64_t h0,
                                                     const CacheDims& dm, int splits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every split's o_split, m_split, l_split written and visible to the cluster
  const int rank = static_cast<int>(cluster.block_rank());
  const int total = HPB * dm.D, per = (total + splits - 1) / splits;
  for (int e = static_cast<int>(threadIdx.x); e < per; e += kDecodeThreads) {
    const int idx = rank * per + e;
    if (idx >= total) break;
    const int hh = idx / dm.D, d = idx % dm.D;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, cluster.map_shared_rank(&m_split[0], s)[hh]);
    float sum = 0.0f, acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float w = expf(cluster.map_shared_rank(&m_split[0], s)[hh] - mx);
      sum = fmaf(cluster.map_shared_rank(&l_split[0], s)[hh], w, sum);
      acc = fmaf(cluster.map_shared_rank(&o_split[0][0], s)[hh * DMAX + d], w, acc);
    }
    out[(row * dm.Hq + h0 + hh) * dm.D + d] = mx == -INFINITY ? quiet_nan() : acc * (1.0f / sum);
  }
  cluster.sync();  // the other blocks may still read this block's shared memory
#endif
}

// Tiled decode (the default when D·sizeof(C) is a multiple of 16 bytes and the caches are 16-byte aligned): the
// same grid, split and partial-result layout as cache_decode_kernel, but the split's keys go through shared memory in
// tiles of kTileKeys rows, double-buffered with cp.async 16-byte copies (the next tile's K and V rows are in flight
// while this tile is used), so a block keeps 2 × kTileKeys K/V rows of loads outstanding instead of 16, in ~40
// registers instead of ~200. Per tile: scores of every (query head, key) pair (4 / HPB lanes per pair, each an FMA
// chain over its share of the 16-byte chunks, then an xor-shuffle sum), × scale, −Inf for keys outside the split or
// with a bad block id; then one warp per head takes the tile's max (fmaxf: NaN skipped as in the streams), rescales
// with alpha = exp(m_old − m_use), p = exp(s − m_use), l = alpha·l + Σp; then O = alpha·O + Σ_j p_j v_j over the tile
// (2 dims per thread; when a block has fewer heads than thread groups, the groups take interleaved key subsets and
// add their partial O in group order at the end). Same non-finite behaviour as the streams: NaN or +Inf scores and
// NaN values propagate, all −Inf gives m = −Inf, l = 0 (NaN after the merge).
constexpr int kTileKeys = 32;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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
__device__ __forceinline__ float2 widen2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 widen2(const float* p) { return *reinterpret_cast<const float2*>(p); }

template <int DMAX, typename C>
struct TiledDecodeSmem {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(C));  // elements per 16-byte copy
  static constexpr int kStride = DMAX + kVec;  // padded row: consecutive rows start 4 banks apart
  static constexpr size_t kTileBytes = static_cast<size_t>(kTileKeys) * kStride * sizeof(C);
  static constexpr size_t bytes() { return 4 * kTileBytes; }  // K and V, two buffers each
};

// kCluster: the launch groups the `splits` blocks of each (sequence, head group) into one thread-block cluster
// (cluster dims (1, 1, splits)), and the splits are merged through distributed shared memory instead of `part`
// (decode_cluster_merge); `part` is unused and fm.out receives the output.
template <int DMAX, int HPB, typename C, bool kCluster>
__global__ void __launch_bounds__(kDecodeThreads)
    cache_decode_tiled_kernel(float* part, const float* q, const C* k_cache, const C* v_cache,
                              const int32_t* tables, const int64_t* context_lens, const int64_t* cu, CacheDims dm,
                              int64_t splits, int64_t split_len, int* flag, FusedMerge fm) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  using Smem = TiledDecodeSmem<DMAX, C>;
  constexpr int kVec = Smem::kVec, S = Smem::kStride;
  constexpr int kLanes = kDecodeThreads / (HPB * kTileKeys);  // lanes per (head, key) score: 4, 2, 1
  constexpr int kGroupThreads = DMAX / 2;                     // one thread per 2 output dims
  constexpr int kGroups = kDecodeThreads / kGroupThreads;     // 2 (DMAX 128) or 4 (DMAX 64)
  constexpr int kHeadsPerGroup = HPB >= kGroups ? HPB / kGroups : 1;
  constexpr int kKeySets = HPB >= kGroups ? 1 : kGroups / HPB;  // groups sharing one head split its keys
  static_assert(kLanes >= 1 && kDecodeThreads % (HPB * kTileKeys) == 0, "tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  C* k_s = reinterpret_cast<C*>(smem_raw);         // [2][kTileKeys][S]
  C* v_s = k_s + 2 * kTileKeys * S;                 // [2][kTileKeys][S]
  __shared__ __align__(16) float q_s[HPB][DMAX];
  __shared__ float s_s[HPB][kTileKeys];  // scores, then weights p
  __shared__ float alpha_s[HPB], m_s[HPB], l_s[HPB];
  __shared__ bool ok_s[2][kTileKeys];
  __shared__ float o_red[kKeySets > 1 ? kKeySets - 1 : 1][HPB][DMAX];

  const int64_t seq = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * HPB, split = blockIdx.z;
  const SeqView sv = seq_view(cu, context_lens, tables, seq, dm, blockIdx.y == 0 && split == 0 ? flag : nullptr);
  if (!sv.ok || sv.nq == 0) return;  // uniform over the block
  const int64_t kvh = h0 / dm.group;
  const KeyRange keys = split_keys(split, split_len, sv.ctx, dm.window);
  const int64_t kb = keys.kb, ke = keys.ke;
  const int64_t n_tiles = ke > kb ? (ke - kb + kTileKeys - 1) / kTileKeys : 0;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int chunks = dm.D / kVec;  // 16-byte chunks per row

  if (t < HPB) {
    m_s[t] = -INFINITY;
    l_s[t] = 0.0f;
  }

  // Tile `tile` into buffer `buf`: every thread copies its share of the 2 · kTileKeys · chunks 16-byte chunks; rows
  // outside the split or with a bad block id are zero-filled and marked.
  const auto load_tile = [&](int64_t tile, int buf) {
    const int64_t k0 = kb + tile * kTileKeys;
    for (int i = t; i < kTileKeys * chunks; i += kDecodeThreads) {
      const int j = i / chunks, c = i % chunks;
      const int64_t pos = k0 + j;
      const int64_t off = pos < ke ? key_row(sv.table, pos, kvh, dm, c == 0 ? flag : nullptr) : -1;
      C* kd = k_s + (buf * kTileKeys + j) * S + c * kVec;
      C* vd = v_s + (buf * kTileKeys + j) * S + c * kVec;
      if (off >= 0) {
        cp_async16(kd, k_cache + off + c * kVec);
        cp_async16(vd, v_cache + off + c * kVec);
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
      if (c == 0) ok_s[buf][j] = off >= 0;
    }
  };

  float acc[kHeadsPerGroup][2];
#pragma unroll
  for (int i = 0; i < kHeadsPerGroup; ++i) acc[i][0] = acc[i][1] = 0.0f;
  const int grp = t / kGroupThreads, d0 = (t % kGroupThreads) * 2;
  const int key_set = kKeySets > 1 ? grp / HPB : 0;

  // Launched as a programmatic dependent of the q/k norm + RoPE + cache write (dependent_launch_attention), which
  // writes q and the new token's K/V row (position ctx − 1): tile 0 is loaded before the wait when all its keys are
  // older (written by earlier steps), q and everything else after it.
  const bool early = n_tiles > 0 && (kb + kTileKeys < ke ? kb + kTileKeys : ke) <= sv.ctx - 1;
  if (early) load_tile(0, 0);
  cuda::dependent_launch_wait();
  for (int i = t; i < HPB * DMAX; i += kDecodeThreads) {
    const int g = i / DMAX, d = i % DMAX;
    q_s[g][d] = d < dm.D ? q[(sv.begin * dm.Hq + h0 + g) * dm.D + d] : 0.0f;
  }
  if (n_tiles > 0 && !early) load_tile(0, 0);
  cp_async_commit();
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const int buf = static_cast<int>(tile & 1);
    if (tile + 1 < n_tiles) load_tile(tile + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's copies are done (the next tile's may still be in flight)
    __syncthreads();

    {  // scores
      const int pair = t / kLanes, sub = t % kLanes, g = pair / kTileKeys, j = pair % kTileKeys;
      const C* kr = k_s + (buf * kTileKeys + j) * S;
      float dot = 0.0f;
      for (int c = sub; c < chunks; c += kLanes) {
        float f[kVec];
        widen16(*reinterpret_cast<const uint4*>(kr + c * kVec), f);
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot = fmaf(q_s[g][c * kVec + e], f[e], dot);
      }
#pragma unroll
      for (int w = 1; w < kLanes; w *= 2) dot += __shfl_xor_sync(kFullMask, dot, w);
      if (sub == 0) s_s[g][j] = ok_s[buf][j] ? dot * dm.scale : -INFINITY;
    }
    __syncthreads();
    if (warp < HPB) {  // one warp per head: the tile's weights and the running max and sum
      const int g = warp;
      const float sc = s_s[g][lane];
      float mx = sc;
#pragma unroll
      for (int w = 16; w >= 1; w /= 2) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, w));
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float pj = expf(sc - m_use);
      float sum = pj;
#pragma unroll
      for (int w = 16; w >= 1; w /= 2) sum += __shfl_xor_sync(kFullMask, sum, w);
      __syncwarp();
      s_s[g][lane] = pj;
      if (lane == 0) {
        const float alpha = expf(m_old - m_use);
        alpha_s[g] = alpha;
        l_s[g] = fmaf(alpha, l_s[g], sum);
        m_s[g] = m_new;
      }
    }
    __syncthreads();
    if (d0 < dm.D) {  // O += P V over the tile
      const C* vb = v_s + buf * kTileKeys * S + d0;
#pragma unroll
      for (int i = 0; i < kHeadsPerGroup; ++i) {
        const int g = kKeySets > 1 ? grp % HPB : grp + kGroups * i;
        const float alpha = alpha_s[g];
        float a0 = acc[i][0] * alpha, a1 = acc[i][1] * alpha;
        for (int j = key_set; j < kTileKeys; j += kKeySets) {
          const float pj = s_s[g][j];
          const float2 v = widen2(vb + j * S);
          a0 = fmaf(pj, v.x, a0);
          a1 = fmaf(pj, v.y, a1);
        }
        acc[i][0] = a0;
        acc[i][1] = a1;
      }
    }
    __syncthreads();  // the buffer is refilled by the next iteration's load
  }
  cp_async_wait<0>();
  __syncthreads();  // m_s, l_s written by other threads (also when the split had no tile)

  // Key sets of one head: sets 1.. hand their partial O to set 0, which adds them in set order.
  if (kKeySets > 1) {
    if (key_set > 0 && d0 < dm.D) {
      o_red[key_set - 1][grp % HPB][d0] = acc[0][0];
      o_red[key_set - 1][grp % HPB][d0 + 1] = acc[0][1];
    }
    __syncthreads();
    if (key_set == 0 && d0 < dm.D)
      for (int k = 1; k < kKeySets; ++k) {
        acc[0][0] += o_red[k - 1][grp % HPB][d0];
        acc[0][1] += o_red[k - 1][grp % HPB][d0 + 1];
      }
  }
  if constexpr (kCluster) {
    __shared__ float o_split[HPB][DMAX];  // this split's unnormalised O, read by the cluster's other blocks
    if (key_set == 0 && d0 < dm.D) {
#pragma unroll
      for (int i = 0; i < kHeadsPerGroup; ++i) {
        const int g = kKeySets > 1 ? grp % HPB : grp + kGroups * i;
        o_split[g][d0] = acc[i][0];
        o_split[g][d0 + 1] = acc[i][1];
      }
    }
    decode_cluster_merge<HPB, DMAX>(fm.out, o_split, m_s, l_s, sv.begin, h0, dm, static_cast<int>(splits));
    return;
  }
  if (key_set == 0 && d0 < dm.D) {
#pragma unroll
    for (int i = 0; i < kHeadsPerGroup; ++i) {
      const int g = kKeySets > 1 ? grp % HPB : grp + kGroups * i;
      float* dst = part + ((seq * dm.Hq + h0 + g) * splits + split) * (dm.D + 2);
      dst[d0] = acc[i][0];
      dst[d0 + 1] = acc[i][1];
      if (d0 == 0) {
        dst[dm.D] = m_s[g];
        dst[dm.D + 1] = l_s[g];
      }
    }
  }
  if (fm.counters != nullptr) decode_merge_if_last<HPB>(fm, part, seq, h0, sv.begin, dm, splits);
}

// Warp-streaming decode (DecodeKernel::warps): the tiled kernel's grid, split and partial-result layout, without
// shared-memory tiles or block barriers in the key loop. A key row is kLanesPerKey 16-byte chunks; each group of
// kLanesPerKey lanes of a warp holds one key per step (chunk c of its K and V rows in lane c, kVec dims each) and
// loads kSteps steps at once, so a block has kGroups · kSteps keys of loads in flight (64 rows of bf16 D 128), all of
// them issued before the first is used. Per batch of kSteps keys, each group computes every (head, key) score (kVec
// FMAs per lane in order, then an xor-shuffle tree over the group's lanes: every lane gets the same bits), ×scale
// (−Inf for keys outside the split or with a bad block id, whose V is zero), takes the batch max with fmaxf (NaN
// skipped), rescales its running sum and output by alpha = exp(m_old − m_use) once per batch and adds p = exp(s −
// m_use) and p·v key by key. At the end the block's kGroups partial softmaxes are merged in shared memory in group
// order (as the streams kernel merges its streams) into the split's (O, max, sum), or into `out` itself when there is
// one split (then no merge launch: attention_cache.cu's launcher). Same non-finite behaviour as the other kernels.
// Launched as a programmatic dependent of the q/k norm + RoPE + cache write: the first batch's keys older than the
// step's new token are loaded before the wait, q and the new token's row after it.
template <int DMAX, typename C>
struct WarpDecodeShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(C));         // cache elements per 16-byte chunk
  static constexpr int kLanesPerKey = DMAX / kVec;                       // 16 (bf16, D 128), 8, 32 (fp32, D 128), 16
  static constexpr int kKeysPerStep = 32 / kLanesPerKey;                 // keys a warp holds per step
  static constexpr int kGroups = (kDecodeThreads / 32) * kKeysPerStep;   // partial softmaxes per block
  static constexpr int kSteps = 8;                                       // loads in flight per lane: 8 K + 8 V chunks
  static constexpr int kBatchKeys = kGroups * kSteps;
  static_assert(kLanesPerKey >= 1 && kLanesPerKey <= 32 && 32 % kLanesPerKey == 0, "a key row within a warp");
};

__device__ __forceinline__ uint4 load_chunk_l2(const void* p) { return __ldcg(static_cast<const uint4*>(p)); }

// The q/k preparation folded into the warp kernel (attention_cache_decode_prep_cuda): the raw projections, the
// per-head norms (or none), RoPE and the cache slots of the step's tokens, as qk_norm_rope_cache_write_cuda takes them.
struct DecodePrep {
  const float* q;       // [T, Hq·D] the raw projections: read by every split's block, so never written
  const float* k;       // [T, Hkv·D]
  const float* v;       // [T, Hkv·D]
  const float* q_norm;  // [D] or nullptr
  const float* k_norm;  // [D] or nullptr
  float eps;
  bool q_vec, k_vec;    // the norms' V = 4 order (qk_row_math.cuh)
  const int32_t* positions;  // [T]
  const float* cos;     // [num_positions, half] or nullptr (no RoPE)
  const float* sin;
  int64_t half, num_positions;
  const int64_t* slots;  // [T] cache slots of the new k/v rows
  int64_t cache_slots;
};

// kVec cache elements packed into 16 bytes from fp32 values (narrowed as the cache write narrows them).
template <typename C, int kVec>
__device__ __forceinline__ uint4 pack_chunk(const float* x) {
  uint4 u;
  C* e = reinterpret_cast<C*>(&u);
#pragma unroll
  for (int i = 0; i < kVec; ++i) e[i] = narrow<C>(x[i]);
  return u;
}

// kPrep (attention_cache_decode_prep_cuda): q is the raw projection; after the wait each block prepares its HPB q
// heads and its KV head's new k row in shared memory as qk_norm_rope.cu does (the same per-row operations:
// qk_row_math.cuh) and uses them for q and for the new key (its k and v narrowed to the cache's type and widened back,
// the values the cache would hold); the block whose split holds the new key, first head group of its KV head, writes
// k, v into the cache slot. No other block reads that slot in this launch (the other splits end before it); the raw q
// and k are not written back (every split's block reads them).
template <int DMAX, int HPB, typename C, bool kPrep>
__global__ void __launch_bounds__(kDecodeThreads)
    cache_decode_warps_kernel(float* part, float* out, const float* q, const C* k_cache, const C* v_cache,
                              const int32_t* tables, const int64_t* context_lens, const int64_t* cu, CacheDims dm,
                              int64_t splits, int64_t split_len, int* flag, FusedMerge fm, DecodePrep pr) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the merge or the next GEMV) may start now
  using Sh = WarpDecodeShape<DMAX, C>;
  constexpr int kVec = Sh::kVec, LPK = Sh::kLanesPerKey, G = Sh::kGroups, R = Sh::kSteps;
  __shared__ __align__(16) float o_s[G][HPB][DMAX];
  __shared__ float m_s[G][HPB], l_s[G][HPB];

  const int64_t seq = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * HPB, split = blockIdx.z;
  const SeqView sv = seq_view(cu, context_lens, tables, seq, dm, blockIdx.y == 0 && split == 0 ? flag : nullptr);
  if (!sv.ok || sv.nq == 0) return;  // uniform over the block
  const int64_t kvh = h0 / dm.group;
  const KeyRange keys = split_keys(split, split_len, sv.ctx, dm.window);
  const int64_t kb = keys.kb, ke = keys.ke;
  const int t = static_cast<int>(threadIdx.x), lane = t & 31;
  const int c = lane % LPK;                              // this lane's chunk of every row
  const int grp = (t / 32) * Sh::kKeysPerStep + lane / LPK;  // this lane's group: key kb + batch·B + step·G + grp
  const bool has_chunk = c < dm.D / kVec;                // rows narrower than DMAX: the upper lanes hold zeros
  const int64_t last = sv.ctx - 1;                       // the step's new key: written by the kernel before this one

  uint4 kr[R], vr[R];
  int64_t off[R];
  // locate: offsets of batch `b`'s keys (−1: outside the split or a bad block id, the flag raised by the chunk-0 lane)
  // and zeroed rows; load: this lane's chunks of those keys, all of them, all but the step's new key (before the
  // wait), or only the new key (after it). Rows not loaded stay zero.
  const auto locate = [&](int64_t b) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
      const int64_t pos = kb + b * Sh::kBatchKeys + s * G + grp;
      off[s] = pos < ke ? key_row(sv.table, pos, kvh, dm, c == 0 ? flag : nullptr) : -1;
      kr[s] = vr[s] = make_uint4(0, 0, 0, 0);
    }
  };
  // kPrep: the new key's row (normalized, rotated k and v, narrowed) from shared memory instead of the cache.
  __shared__ __align__(16) float kp_s[kPrep ? DMAX : 1], vp_s[kPrep ? DMAX : 1];
  const auto load = [&](int64_t b, bool new_key_only, bool skip_new_key) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
      const int64_t pos = kb + b * Sh::kBatchKeys + s * G + grp;
      const bool is_new = pos == last;
      if (off[s] >= 0 && has_chunk && (new_key_only ? is_new : !(skip_new_key && is_new))) {
        if (kPrep && is_new) {
          kr[s] = pack_chunk<C, kVec>(kp_s + c * kVec);
          vr[s] = pack_chunk<C, kVec>(vp_s + c * kVec);
        } else {
          kr[s] = load_chunk_l2(k_cache + off[s] + c * kVec);
          vr[s] = load_chunk_l2(v_cache + off[s] + c * kVec);
        }
      }
    }
  };

  const int64_t n_batches = ke > kb ? (ke - kb + Sh::kBatchKeys - 1) / Sh::kBatchKeys : 0;
  if (n_batches > 0) {
    locate(0);
    load(0, false, true);  // the first batch's older keys, before the wait
  }
  cuda::dependent_launch_wait();
  float qr[HPB][kVec];
  if constexpr (kPrep) {
    __shared__ __align__(16) float qp_s[HPB][DMAX];
    __shared__ float cs_s[DMAX / 2], sn_s[DMAX / 2];
    const int64_t tok = sv.begin, D = dm.D;
    const int32_t pos = pr.cos != nullptr ? pr.positions[tok] : 0;
    const bool pos_ok = pr.cos != nullptr && pos >= 0 && pos < pr.num_positions;
    for (int64_t i = t; i < HPB * D; i += kDecodeThreads)
      qp_s[i / D][i % D] = __ldcg(pr.q + (tok * dm.Hq + h0) * D + i);
    for (int64_t i = t; i < D; i += kDecodeThreads) {
      kp_s[i] = __ldcg(pr.k + (tok * dm.Hkv + kvh) * D + i);
      vp_s[i] = __ldcg(pr.v + (tok * dm.Hkv + kvh) * D + i);
    }
    if (pos_ok)
      for (int64_t i = t; i < pr.half; i += kDecodeThreads) {
        cs_s[i] = pr.cos[static_cast<int64_t>(pos) * pr.half + i];
        sn_s[i] = pr.sin[static_cast<int64_t>(pos) * pr.half + i];
      }
    __syncthreads();
    // Norms: a warp per row (the q heads, then the k head), rmsnorm.cu's warp order.
    for (int r = t / 32; r <= HPB; r += kDecodeThreads / 32) {
      const float* w = r < HPB ? pr.q_norm : pr.k_norm;
      if (w != nullptr)
        cuda::qk_norm_row_warp(r < HPB ? &qp_s[r][0] : kp_s, D, w, r < HPB ? pr.q_vec : pr.k_vec, pr.eps, 0, D);
    }
    __syncthreads();
    if (pr.cos != nullptr) {  // RoPE over the q heads and the k head (a bad position: NaN on the rotary dims, flag)
      if (!pos_ok && t == 0 && flag != nullptr) atomicOr(flag, 1);
      for (int64_t p = t; p < (HPB + 1) * pr.half; p += kDecodeThreads) {
        const int64_t h = p / pr.half, i = p - h * pr.half;
        float* x = h < HPB ? &qp_s[h][0] : kp_s;
        if (!pos_ok) {
          x[i] = quiet_nan();
          x[i + pr.half] = quiet_nan();
        } else {
          cuda::qk_rope_pair(x, i, pr.half, cs_s[i], sn_s[i]);
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int hh = 0; hh < HPB; ++hh)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int d = c * kVec + e;
        qr[hh][e] = d < dm.D ? qp_s[hh][d] : 0.0f;
      }
    // The block whose split holds the new key (the KV head's first head group) writes k, v into the cache slot, as
    // the q/k kernel would.
    if (kb <= last && last < ke && h0 % dm.group == 0) {
      const int64_t slot = pr.slots[tok];
      if (slot < 0 || slot >= pr.cache_slots) {
        if (t == 0 && flag != nullptr) atomicOr(flag, 1);
      } else {  // the caches are written only here (the kernel's other accesses read them)
        C* kc = const_cast<C*>(k_cache) + (slot * dm.Hkv + kvh) * D;
        C* vc = const_cast<C*>(v_cache) + (slot * dm.Hkv + kvh) * D;
        for (int64_t i = t; i < D; i += kDecodeThreads) {
          kc[i] = narrow<C>(kp_s[i]);
          vc[i] = narrow<C>(vp_s[i]);
        }
      }
    }
  } else {
#pragma unroll
    for (int hh = 0; hh < HPB; ++hh)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int d = c * kVec + e;
        qr[hh][e] = d < dm.D ? __ldcg(q + (sv.begin * dm.Hq + h0 + hh) * dm.D + d) : 0.0f;
      }
  }
  if (n_batches > 0) load(0, true, false);  // the new key's row, if it is in the first batch

  float m[HPB], l[HPB], acc[HPB][kVec];
#pragma unroll
  for (int hh = 0; hh < HPB; ++hh) {
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[hh][e] = 0.0f;
  }
  for (int64_t b = 0; b < n_batches; ++b) {
    if (b > 0) {
      locate(b);
      load(b, false, false);
    }
    float sc[R][HPB];
#pragma unroll
    for (int s = 0; s < R; ++s) {
      float kf[kVec];
      widen16(kr[s], kf);
#pragma unroll
      for (int hh = 0; hh < HPB; ++hh) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot = fmaf(qr[hh][e], kf[e], dot);
#pragma unroll
        for (int w = 1; w < LPK; w *= 2) dot += __shfl_xor_sync(kFullMask, dot, w);
        sc[s][hh] = off[s] >= 0 ? dot * dm.scale : -INFINITY;
      }
    }
#pragma unroll
    for (int hh = 0; hh < HPB; ++hh) {
      float mx = m[hh];
#pragma unroll
      for (int s = 0; s < R; ++s) mx = fmaxf(mx, sc[s][hh]);  // fmaxf skips NaN, like the CPU's std::max
      const float m_use = mx == -INFINITY ? 0.0f : mx;
      const float alpha = expf(m[hh] - m_use);
      m[hh] = mx;
      l[hh] *= alpha;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[hh][e] *= alpha;
#pragma unroll
      for (int s = 0; s < R; ++s) {
        const float p = expf(sc[s][hh] - m_use);
        l[hh] += p;
        float vf[kVec];
        widen16(vr[s], vf);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[hh][e] = fmaf(p, vf[e], acc[hh][e]);
      }
    }
  }

  // The block's groups merged in group order: M = the groups' max, each weighted by exp(m_g − M).
#pragma unroll
  for (int hh = 0; hh < HPB; ++hh) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) o_s[grp][hh][c * kVec + e] = acc[hh][e];
    if (c == 0) {
      m_s[grp][hh] = m[hh];
      l_s[grp][hh] = l[hh];
    }
  }
  __syncthreads();
  const bool direct = splits == 1;  // one split: the result is the row itself
  for (int idx = t; idx < HPB * dm.D; idx += kDecodeThreads) {
    const int hh = idx / dm.D, d = idx % dm.D;
    float mx = -INFINITY;
#pragma unroll
    for (int g = 0; g < G; ++g) mx = fmaxf(mx, m_s[g][hh]);
    const float m_use = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f, a = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float w = expf(m_s[g][hh] - m_use);
      sum = fmaf(l_s[g][hh], w, sum);
      a = fmaf(o_s[g][hh][d], w, a);
    }
    if (direct) {
      out[(sv.begin * dm.Hq + h0 + hh) * dm.D + d] = mx == -INFINITY ? quiet_nan() : a * (1.0f / sum);
    } else {
      float* dst = part + ((seq * dm.Hq + h0 + hh) * splits + split) * (dm.D + 2);
      dst[d] = a;
      if (d == 0) {
        dst[dm.D] = mx;
        dst[dm.D + 1] = sum;
      }
    }
  }
  if (!direct && fm.counters != nullptr) decode_merge_if_last<HPB>(fm, part, seq, h0, sv.begin, dm, splits);
}

// out row (seq, h) from the splits' partial results.
__global__ void cache_decode_merge_kernel(float* out, const float* part, const int32_t* tables,
                                          const int64_t* context_lens, const int64_t* cu, CacheDims dm,
                                          int64_t splits) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  cuda::dependent_launch_wait();     // the split kernel's partial results (dependent_launch_attention)
  const int64_t seq = blockIdx.x, h = blockIdx.y;
  const SeqView sv = seq_view(cu, context_lens, tables, seq, dm, nullptr);
  if (!sv.ok || sv.nq == 0) return;
  merge_split_rows(out, part, seq, h, 1, sv.begin, dm, splits, static_cast<int>(threadIdx.x),
                   static_cast<int>(blockDim.x));
}

// ---- launchers

constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;

CacheDims make_dims(const AttentionCacheCudaParams& p, const char* who) {
  HLM_CHECK(p.total_tokens >= 0 && p.n_seqs >= 0 && p.max_query_len >= 0 && p.max_context >= 0, who,
            ": negative size");
  HLM_CHECK(p.n_seqs > 0 || p.total_tokens == 0, who, ": ", p.total_tokens, " tokens but no sequences");
  HLM_CHECK(p.q_heads > 0 && p.kv_heads > 0 && p.q_heads % p.kv_heads == 0, who, ": q heads ", p.q_heads,
            " not a positive multiple of kv heads ", p.kv_heads);
  HLM_CHECK_INPUT(p.head_dim >= 1 && p.head_dim <= attention_cache_cuda_max_head_dim(), who, ": head_dim ",
                  p.head_dim, " is not supported on CUDA (1..", attention_cache_cuda_max_head_dim(), ")");
  HLM_CHECK(p.num_blocks >= 0 && p.block_size > 0 && p.max_blocks >= 0, who, ": bad cache shape (", p.num_blocks,
            " blocks of ", p.block_size, ", tables of ", p.max_blocks, ")");
  HLM_CHECK(p.q_heads <= kMaxGridYZ, who, ": ", p.q_heads, " query heads exceed the grid's y limit");
  const int64_t n_tiles = (p.max_query_len + kTile - 1) / kTile;
  HLM_CHECK(n_tiles == 0 || p.n_seqs <= kMaxGridX / n_tiles, who, ": too many sequences for the grid");
  return {p.total_tokens, p.n_seqs,       p.q_heads,    p.kv_heads,     p.q_heads / p.kv_heads,
          p.num_blocks,   p.block_size,   p.max_blocks, p.max_query_len, p.max_context,
          n_tiles,        static_cast<int>(p.head_dim), p.scale, p.window};
}

int heads_per_block(const AttentionCacheCudaParams& p) {
  const int64_t group = p.q_heads / p.kv_heads;
  for (int hpb = static_cast<int>(attention_cache_cuda_decode_heads_per_block()); hpb > 1; hpb /= 2)
    if (group % hpb == 0) return hpb;
  return 1;
}

bool decode_path(const AttentionCacheCudaParams& p) { return p.max_query_len == 1; }

int64_t split_len(const AttentionCacheCudaParams& p, int64_t splits) {
  const int64_t len = (p.max_context + splits - 1) / splits;
  return (len + kStreams - 1) / kStreams * kStreams;
}

template <int DMAX, typename C>
void chunk_launch(float* out, const float* q, const C* kc, const C* vc, const int32_t* tables,
                  const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int* flag, cudaStream_t stream) {
  constexpr size_t smem = chunk_smem_bytes<DMAX>();
  HLM_CUDA_CHECK(cudaFuncSetAttribute(cache_chunk_kernel<DMAX, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(dm.N * dm.n_tiles), static_cast<unsigned>(dm.Hq));
  cache_chunk_kernel<DMAX, C><<<grid, kThreads, smem, stream>>>(out, q, kc, vc, tables, ctx, cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
}

template <int DMAX, int HPB, typename C>
void decode_launch(float* part, const float* q, const C* kc, const C* vc, const int32_t* tables,
                   const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits, int64_t len,
                   int* flag, FusedMerge fm, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(dm.N), static_cast<unsigned>(dm.Hq / HPB), static_cast<unsigned>(splits));
  cache_decode_kernel<DMAX, HPB, C>
      <<<grid, kDecodeThreads, 0, stream>>>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm);
  HLM_CUDA_CHECK_LAUNCH();
}

template <int DMAX, int HPB, typename C>
void decode_tiled_launch(float* part, const float* q, const C* kc, const C* vc, const int32_t* tables,
                         const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits, int64_t len,
                         int* flag, FusedMerge fm, cudaStream_t stream) {
  constexpr size_t smem = TiledDecodeSmem<DMAX, C>::bytes();
  static const bool attribute_set = [] {  // above 48 KiB (the fp32 cache at DMAX 128) needs the opt-in
    HLM_CUDA_CHECK(cudaFuncSetAttribute(cache_decode_tiled_kernel<DMAX, HPB, C, false>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)attribute_set;
  const dim3 grid(static_cast<unsigned>(dm.N), static_cast<unsigned>(dm.Hq / HPB), static_cast<unsigned>(splits));
  HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_attention(cuda::AttentionLaunch::kSplit),
                                              cache_decode_tiled_kernel<DMAX, HPB, C, false>, grid,
                                              dim3(kDecodeThreads), smem, stream, part, q, kc, vc, tables, ctx, cu,
                                              dm, splits, len, flag, fm));
}

// prep != nullptr: the q/k preparation folded in (attention_cache_decode_prep_cuda).
template <int DMAX, int HPB, typename C>
void decode_warps_launch(float* part, float* out, const float* q, const C* kc, const C* vc, const int32_t* tables,
                         const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits, int64_t len,
                         int* flag, FusedMerge fm, const DecodePrep* prep, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(dm.N), static_cast<unsigned>(dm.Hq / HPB), static_cast<unsigned>(splits));
  const bool pdl = cuda::dependent_launch_attention(cuda::AttentionLaunch::kSplit);
  if (prep != nullptr)
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(pdl, cache_decode_warps_kernel<DMAX, HPB, C, true>, grid,
                                                dim3(kDecodeThreads), 0, stream, part, out, q, kc, vc, tables, ctx, cu,
                                                dm, splits, len, flag, fm, *prep));
  else
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(pdl, cache_decode_warps_kernel<DMAX, HPB, C, false>, grid,
                                                dim3(kDecodeThreads), 0, stream, part, out, q, kc, vc, tables, ctx, cu,
                                                dm, splits, len, flag, fm, DecodePrep{}));
}

// The tiled kernel as a cluster launch (splits blocks per cluster, merged through distributed shared memory):
// false when the device cannot run such a cluster (compute capability below 9.0, or no cluster of this size fits),
// then nothing is queued. Cluster sizes above 8 need the non-portable opt-in (Hopper allows 16).
template <int DMAX, int HPB, typename C>
bool decode_cluster_launch(float* out, const float* q, const C* kc, const C* vc, const int32_t* tables,
                           const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits, int64_t len,
                           int* flag, cudaStream_t stream) {
  constexpr size_t smem = TiledDecodeSmem<DMAX, C>::bytes();
  auto* kernel = cache_decode_tiled_kernel<DMAX, HPB, C, true>;
  static const bool capable = [kernel] {
    int device = 0, major = 0;
    HLM_CUDA_CHECK(cudaGetDevice(&device));
    HLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major < 9) return false;
    HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return true;
  }();
  if (!capable || splits < 2 || splits > kMaxClusterSplits) return false;
  const dim3 grid(static_cast<unsigned>(dm.N), static_cast<unsigned>(dm.Hq / HPB), static_cast<unsigned>(splits));
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(kDecodeThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 1;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = static_cast<unsigned>(splits);
  config.attrs = attribute;
  config.numAttrs = 1;
  static int fits[kMaxClusterSplits + 1] = {};  // per cluster size: 0 unknown, 1 fits, -1 does not
  if (fits[splits] == 0) {
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    fits[splits] = e == cudaSuccess && clusters > 0 ? 1 : -1;
    if (e != cudaSuccess) (void)cudaGetLastError();  // a refused size is an answer, not a sticky error
    const char* asked = std::getenv("HLM_DECODE_MERGE");
    if (fits[splits] < 0 && asked != nullptr && std::string(asked) == "cluster")  // asked for by name: say why not
      std::fprintf(stderr, "attention_cache: no cluster of %lld decode blocks fits (%s, %d clusters); the splits "
                   "merge in a second kernel\n", static_cast<long long>(splits), cudaGetErrorString(e), clusters);
  }
  if (fits[splits] < 0) return false;
  const FusedMerge fm{out, nullptr};
  HLM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<float*>(nullptr), q, kc, vc, tables, ctx, cu, dm,
                                    splits, len, flag, fm));
  return true;
}

// The kernel that runs: the chosen one (attention_cache_cuda_decode_kernel) where its rows fit — tiled and warps need
// 16-byte rows: D·sizeof(C) a multiple of 16 and both caches 16-byte aligned — else the stream kernel.
template <typename C>
DecodeKernel decode_kernel_for(const C* kc, const C* vc, const CacheDims& dm) {
  const bool rows16 = (dm.D * sizeof(C)) % 16 == 0 && reinterpret_cast<uintptr_t>(kc) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(vc) % 16 == 0;
  return rows16 ? attention_cache_cuda_decode_kernel() : DecodeKernel::streams;
}

// The cluster launch (merge in distributed shared memory), when chosen and possible; true: queued, nothing else to do.
template <int DMAX, typename C>
bool decode_cluster_dispatch(int hpb, float* out, const float* q, const C* kc, const C* vc, const int32_t* tables,
                             const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits, int64_t len,
                             int* flag, cudaStream_t stream) {
  if (attention_cache_cuda_decode_merge() != DecodeMerge::cluster) return false;
  if (decode_kernel_for(kc, vc, dm) != DecodeKernel::tiled) return false;
  if (hpb == 4) return decode_cluster_launch<DMAX, 4, C>(out, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, stream);
  if (hpb == 2) return decode_cluster_launch<DMAX, 2, C>(out, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, stream);
  return decode_cluster_launch<DMAX, 1, C>(out, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, stream);
}

template <int DMAX, typename C>
void decode_dispatch(DecodeKernel kernel, int hpb, float* part, float* out, const float* q, const C* kc, const C* vc,
                     const int32_t* tables, const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits,
                     int64_t len, int* flag, FusedMerge fm, const DecodePrep* prep, cudaStream_t stream) {
  if (kernel == DecodeKernel::warps) {
    if (hpb == 4)
      decode_warps_launch<DMAX, 4, C>(part, out, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, prep, stream);
    else if (hpb == 2)
      decode_warps_launch<DMAX, 2, C>(part, out, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, prep, stream);
    else
      decode_warps_launch<DMAX, 1, C>(part, out, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, prep, stream);
    return;
  }
  HLM_CHECK(prep == nullptr, "attention_cache: the q/k preparation is folded into the warp kernel only");
  if (kernel == DecodeKernel::tiled) {
    if (hpb == 4)
      decode_tiled_launch<DMAX, 4, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, stream);
    else if (hpb == 2)
      decode_tiled_launch<DMAX, 2, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, stream);
    else
      decode_tiled_launch<DMAX, 1, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, stream);
    return;
  }
  if (hpb == 4)
    decode_launch<DMAX, 4, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, stream);
  else if (hpb == 2)
    decode_launch<DMAX, 2, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, stream);
  else
    decode_launch<DMAX, 1, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, stream);
}

// ---- the fused split merge's counters

// -1: not read yet (HLM_DECODE_MERGE in the environment), else a DecodeMerge value.
std::atomic<int> g_decode_merge{-1};
// -1: not read yet (HLM_DECODE_KERNEL), else a DecodeKernel value.
std::atomic<int> g_decode_kernel{-1};
constexpr int64_t kMergeCounters = int64_t{1} << 16;  // (sequence, head group) pairs one launch may count
constexpr int kMaxDevices = 64;

// The device's counters (kMergeCounters unsigned, zeroed once, kept for the process: each launch leaves them 0), or
// nullptr when the fused merge is off, `groups` exceeds them, or they do not exist yet and `stream` is capturing a
// graph (no allocation inside a capture: that launch merges separately, with the same bits).
unsigned* fused_merge_counters(int64_t groups, cudaStream_t stream) {
  if (attention_cache_cuda_decode_merge() != DecodeMerge::fused || groups > kMergeCounters) return nullptr;
  static std::mutex mu;
  static unsigned* counters[kMaxDevices] = {};
  int device = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (counters[device] == nullptr) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    HLM_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    if (status != cudaStreamCaptureStatusNone) return nullptr;
    void* ptr = nullptr;
    HLM_CUDA_CHECK(cudaMalloc(&ptr, static_cast<size_t>(kMergeCounters) * sizeof(unsigned)));
    HLM_CUDA_CHECK(cudaMemset(ptr, 0, static_cast<size_t>(kMergeCounters) * sizeof(unsigned)));
    counters[device] = static_cast<unsigned*>(ptr);
  }
  return counters[device];
}

template <typename C>
void cache_write(C* k_cache, C* v_cache, const float* k, const float* v, const int64_t* slot_mapping, int64_t tokens,
                 const AttentionCacheCudaParams& p, int* error_flag, cudaStream_t stream) {
  HLM_CHECK(tokens >= 0 && p.kv_heads > 0 && p.head_dim > 0 && p.num_blocks >= 0 && p.block_size > 0,
            "attention_cache_write_cuda: bad shape");
  if (tokens == 0) return;
  const int64_t row = p.kv_heads * p.head_dim;
  cache_write_kernel<C><<<cuda::grid_blocks(tokens * row), cuda::kElementwiseThreads, 0, stream>>>(
      k_cache, v_cache, k, v, slot_mapping, tokens, row, p.num_blocks * p.block_size, error_flag);
  HLM_CUDA_CHECK_LAUNCH();
}

template <typename C>
void cache_forward(float* out, const float* q, const C* k_cache, const C* v_cache, const int32_t* block_tables,
                   const int64_t* context_lens, const int64_t* cu_seqlens, const AttentionCacheCudaParams& p,
                   void* workspace, size_t workspace_bytes, int* error_flag, cudaStream_t stream,
                   const DecodePrep* prep = nullptr);

}  // namespace

namespace {

// A choice read once from the environment into `slot` (−1: not read yet): unset or empty → 0, the i-th of `names` → i,
// any other word an input error naming the variable (the first caller's answer is kept).
int env_choice_once(std::atomic<int>& slot, const char* var, std::initializer_list<const char*> names) {
  int v = slot.load();
  if (v >= 0) return v;
  const char* e = std::getenv(var);
  const std::string word = e != nullptr ? e : "";
  int chosen = word.empty() ? 0 : -1;
  std::string expected;
  int i = 0;
  for (const char* n : names) {
    if (word == n) chosen = i;
    expected += (i++ > 0 ? ", " : "") + std::string(n);
  }
  HLM_CHECK_INPUT(chosen >= 0, var, "=", word, ": expected one of ", expected);
  int unset = -1;
  slot.compare_exchange_strong(unset, chosen);
  return slot.load();
}

}  // namespace

static_assert(static_cast<int>(DecodeMerge::fused) == 1 && static_cast<int>(DecodeMerge::cluster) == 2 &&
                  static_cast<int>(DecodeKernel::streams) == 1 && static_cast<int>(DecodeKernel::warps) == 2,
              "env_choice_once's names are in the enums' order");

DecodeMerge attention_cache_cuda_decode_merge() {
  return static_cast<DecodeMerge>(env_choice_once(g_decode_merge, "HLM_DECODE_MERGE", {"kernel", "fused", "cluster"}));
}

void attention_cache_cuda_set_decode_merge(DecodeMerge merge) { g_decode_merge.store(static_cast<int>(merge)); }

DecodeKernel attention_cache_cuda_decode_kernel() {
  return static_cast<DecodeKernel>(
      env_choice_once(g_decode_kernel, "HLM_DECODE_KERNEL", {"tiled", "streams", "warps"}));
}

void attention_cache_cuda_set_decode_kernel(DecodeKernel kernel) { g_decode_kernel.store(static_cast<int>(kernel)); }

int64_t attention_cache_cuda_decode_splits(const AttentionCacheCudaParams& p) {
  if (!decode_path(p) || p.n_seqs <= 0 || p.max_context <= 0 || p.kv_heads <= 0 || p.q_heads <= 0) return 1;
  int device = 0, sms = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t blocks = p.n_seqs * (p.q_heads / heads_per_block(p));
  const int64_t want = (4 * static_cast<int64_t>(sms) + blocks - 1) / blocks;  // ~4 blocks per SM
  // HLM_DECODE_MIN_SPLIT_KEYS=N (16..4096) overrides kMinSplitKeys (A/B runs of the split count).
  static const int64_t min_keys = [] {
    const char* e = std::getenv("HLM_DECODE_MIN_SPLIT_KEYS");
    return e != nullptr ? std::clamp<int64_t>(std::atoll(e), 16, 4096) : kMinSplitKeys;
  }();
  const int64_t by_len = (p.max_context + min_keys - 1) / min_keys;
  return std::clamp<int64_t>(std::min(want, by_len), 1, kMaxSplits);
}

size_t attention_cache_forward_cuda_workspace_bytes(const AttentionCacheCudaParams& p) {
  if (!decode_path(p)) return 0;
  return static_cast<size_t>(p.n_seqs * p.q_heads * attention_cache_cuda_decode_splits(p) * (p.head_dim + 2)) *
         sizeof(float);
}

namespace {

// prep != nullptr: the decode path with the q/k preparation folded into the warp kernel (the caller checked
// attention_cache_decode_prep_supported).
template <typename C>
void cache_forward(float* out, const float* q, const C* k_cache, const C* v_cache, const int32_t* block_tables,
                   const int64_t* context_lens, const int64_t* cu_seqlens, const AttentionCacheCudaParams& p,
                   void* workspace, size_t workspace_bytes, int* error_flag, cudaStream_t stream,
                   const DecodePrep* prep) {
  const CacheDims dm = make_dims(p, "attention_cache_forward_cuda");
  if (dm.T == 0 || dm.N == 0) return;
  if (!decode_path(p)) {
    if (dm.D <= 64)
      chunk_launch<64>(out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, dm, error_flag, stream);
    else
      chunk_launch<128>(out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, dm, error_flag, stream);
    return;
  }
  const int64_t splits = attention_cache_cuda_decode_splits(p);
  HLM_CHECK(dm.N <= kMaxGridX && splits <= kMaxGridYZ, "attention_cache_forward_cuda: grid too large");
  const size_t need = attention_cache_forward_cuda_workspace_bytes(p);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= need, "attention_cache_forward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", need);
  auto* part = static_cast<float*>(workspace);
  const int64_t len = split_len(p, splits);
  const int hpb = heads_per_block(p);
  if (prep == nullptr &&
      (dm.D <= 64 ? decode_cluster_dispatch<64>(hpb, out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens,
                                                dm, splits, len, error_flag, stream)
                  : decode_cluster_dispatch<128>(hpb, out, q, k_cache, v_cache, block_tables, context_lens,
                                                 cu_seqlens, dm, splits, len, error_flag, stream)))
    return;  // merged inside the clusters
  const DecodeKernel kernel = prep != nullptr ? DecodeKernel::warps : decode_kernel_for(k_cache, v_cache, dm);
  const bool direct = kernel == DecodeKernel::warps && splits == 1;  // the kernel writes out itself
  const FusedMerge fm{out, direct ? nullptr : fused_merge_counters(dm.N * (dm.Hq / hpb), stream)};
  if (dm.D <= 64)
    decode_dispatch<64>(kernel, hpb, part, out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, dm,
                        splits, len, error_flag, fm, prep, stream);
  else
    decode_dispatch<128>(kernel, hpb, part, out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, dm,
                         splits, len, error_flag, fm, prep, stream);
  if (direct || fm.counters != nullptr) return;  // no merge, or merged by each group's last split block
  HLM_CUDA_CHECK(cuda::launch_maybe_dependent(
      cuda::dependent_launch_attention(cuda::AttentionLaunch::kMerge), cache_decode_merge_kernel,
      dim3(static_cast<unsigned>(dm.N), static_cast<unsigned>(dm.Hq)), dim3(128), 0, stream, out,
      static_cast<const float*>(part), block_tables, context_lens, cu_seqlens, dm, splits));
}

}  // namespace

void attention_cache_write_cuda(float* k_cache, float* v_cache, const float* k, const float* v,
                                const int64_t* slot_mapping, int64_t tokens, const AttentionCacheCudaParams& p,
                                int* error_flag, cudaStream_t stream) {
  cache_write(k_cache, v_cache, k, v, slot_mapping, tokens, p, error_flag, stream);
}
void attention_cache_write_cuda(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const float* k, const float* v,
                                const int64_t* slot_mapping, int64_t tokens, const AttentionCacheCudaParams& p,
                                int* error_flag, cudaStream_t stream) {
  cache_write(k_cache, v_cache, k, v, slot_mapping, tokens, p, error_flag, stream);
}

void attention_cache_forward_cuda(float* out, const float* q, const float* k_cache, const float* v_cache,
                                  const int32_t* block_tables, const int64_t* context_lens, const int64_t* cu_seqlens,
                                  const AttentionCacheCudaParams& p, void* workspace, size_t workspace_bytes,
                                  int* error_flag, cudaStream_t stream) {
  cache_forward(out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, p, workspace, workspace_bytes,
                error_flag, stream);
}
bool attention_cache_tc_supported(const AttentionCacheCudaParams& p) {
  return (p.head_dim == 64 || p.head_dim == 128) && p.window == 0;  // sliding windows: the scalar chunk kernel
}

void attention_cache_forward_tc_cuda(__nv_bfloat16* out, const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                     const __nv_bfloat16* v_cache, const int32_t* block_tables,
                                     const int64_t* context_lens, const int64_t* cu_seqlens,
                                     const AttentionCacheCudaParams& p, int* error_flag, cudaStream_t stream) {
  const CacheDims c = make_dims(p, "attention_cache_forward_tc_cuda");
  HLM_CHECK(attention_cache_tc_supported(p), "attention_cache_forward_tc_cuda: head_dim ", p.head_dim,
            " (64 or 128 only), window ", p.window, " (0 only)");
  for (const void* ptr : {static_cast<const void*>(out), static_cast<const void*>(q),
                          static_cast<const void*>(k_cache), static_cast<const void*>(v_cache)})
    HLM_CHECK(reinterpret_cast<uintptr_t>(ptr) % 16 == 0, "attention_cache_forward_tc_cuda: a tensor is not ",
              "16-byte aligned");
  if (c.T == 0 || c.N == 0) return;
  const attention_detail::PagedDims dm{c.T,          c.N,          c.Hq,    c.Hkv,     c.group, c.num_blocks,
                                       c.block_size, c.max_blocks, c.max_q, c.max_ctx, c.n_tiles, c.D,
                                       c.scale};
  attention_detail::tc_paged_forward(out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, dm, error_flag,
                                     stream);
}

void attention_cache_forward_cuda(float* out, const float* q, const __nv_bfloat16* k_cache,
                                  const __nv_bfloat16* v_cache, const int32_t* block_tables,
                                  const int64_t* context_lens, const int64_t* cu_seqlens,
                                  const AttentionCacheCudaParams& p, void* workspace, size_t workspace_bytes,
                                  int* error_flag, cudaStream_t stream) {
  cache_forward(out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, p, workspace, workspace_bytes,
                error_flag, stream);
}

namespace {

// The kernel's DecodePrep from the caller's, with the norms' V = 4 order decided as qk_norm_rope.cu decides it.
DecodePrep decode_prep_args(const AttentionDecodePrepCuda& a, const AttentionCacheCudaParams& p) {
  using cuda::aligned16;
  DecodePrep d{};
  d.q = a.q;
  d.k = a.k;
  d.v = a.v;
  d.q_norm = a.q_norm;
  d.k_norm = a.k_norm;
  d.eps = a.eps;
  d.q_vec = a.q_norm != nullptr && aligned16(a.q) && aligned16(a.q_norm) && p.head_dim % 4 == 0;
  d.k_vec = a.k_norm != nullptr && aligned16(a.k) && aligned16(a.k_norm) && p.head_dim % 4 == 0;
  d.positions = a.positions;
  d.cos = a.rope != nullptr ? a.rope->cos : nullptr;
  d.sin = a.rope != nullptr ? a.rope->sin : nullptr;
  d.half = a.rope != nullptr ? a.rope->rotary_dim / 2 : 0;
  d.num_positions = a.rope != nullptr ? a.rope->num_positions : 0;
  d.slots = a.slot_mapping;
  d.cache_slots = a.cache_slots;
  return d;
}

template <typename C>
void decode_prep_forward(float* out, const AttentionDecodePrepCuda& a, C* k_cache, C* v_cache,
                         const int32_t* block_tables, const int64_t* context_lens, const int64_t* cu_seqlens,
                         const AttentionCacheCudaParams& p, void* workspace, size_t workspace_bytes, int* error_flag,
                         cudaStream_t stream) {
  HLM_CHECK(attention_cache_decode_prep_supported(p, a, k_cache, v_cache),
            "attention_cache_decode_prep_cuda: unsupported shape or inputs (attention_cache_decode_prep_supported)");
  const DecodePrep prep = decode_prep_args(a, p);
  cache_forward(out, a.q, k_cache, v_cache, block_tables, context_lens, cu_seqlens, p, workspace, workspace_bytes,
                error_flag, stream, &prep);
}

}  // namespace

bool attention_cache_decode_prep_supported(const AttentionCacheCudaParams& p, const AttentionDecodePrepCuda& a,
                                           const void* k_cache, const void* v_cache, size_t cache_element_bytes) {
  if (p.max_query_len != 1 || p.head_dim < 2 || p.head_dim > attention_cache_cuda_max_head_dim()) return false;
  if ((p.head_dim * static_cast<int64_t>(cache_element_bytes)) % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(k_cache) % 16 != 0 || reinterpret_cast<uintptr_t>(v_cache) % 16 != 0) return false;
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.slot_mapping == nullptr) return false;
  if (a.rope != nullptr && (a.positions == nullptr || a.rope->head_dim != p.head_dim || a.rope->rotary_dim < 2 ||
                            a.rope->rotary_dim % 2 != 0 || a.rope->rotary_dim > p.head_dim))
    return false;
  return true;
}

void attention_cache_decode_prep_cuda(float* out, const AttentionDecodePrepCuda& prep, float* k_cache, float* v_cache,
                                      const int32_t* block_tables, const int64_t* context_lens,
                                      const int64_t* cu_seqlens, const AttentionCacheCudaParams& p, void* workspace,
                                      size_t workspace_bytes, int* error_flag, cudaStream_t stream) {
  decode_prep_forward(out, prep, k_cache, v_cache, block_tables, context_lens, cu_seqlens, p, workspace,
                      workspace_bytes, error_flag, stream);
}
void attention_cache_decode_prep_cuda(float* out, const AttentionDecodePrepCuda& prep, __nv_bfloat16* k_cache,
                                      __nv_bfloat16* v_cache, const int32_t* block_tables,
                                      const int64_t* context_lens, const int64_t* cu_seqlens,
                                      const AttentionCacheCudaParams& p, void* workspace, size_t workspace_bytes,
                                      int* error_flag, cudaStream_t stream) {
  decode_prep_forward(out, prep, k_cache, v_cache, block_tables, context_lens, cu_seqlens, p, workspace,
                      workspace_bytes, error_flag, stream);
}

}  // namespace hlm
