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
#include "core/env_switch.h"
#include "core/error.h"
#include "ops/attention/attention_cache_common.cuh"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/attention/attention_decode_prep.cuh"
#include "ops/attention/attention_decode_tiled.cuh"
#include "ops/attention/attention_decode_warps.cuh"
#include "ops/attention/attention_tc.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

static_assert(kNormBlockThreads == rmsnorm_cuda_threads() && kNormWarpMaxDim == rmsnorm_cuda_warp_max_dim(),
              "the folded q/k preparation sums whole rows in rmsnorm.cu's orders (attention_decode_prep.cuh)");

namespace {

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

// ---- decode path (shared pieces: attention_cache_common.cuh; the warp kernel and the split merge kernel:
// attention_decode_warps.cuh)

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
  CacheDims dm{p.total_tokens, p.n_seqs,       p.q_heads,    p.kv_heads,     p.q_heads / p.kv_heads,
               p.num_blocks,   p.block_size,   p.max_blocks, p.max_query_len, p.max_context,
               n_tiles,        static_cast<int>(p.head_dim), p.scale, p.window};
  dm.block_shift = block_shift_of(p.block_size);  // a power of two: key_page shifts instead of dividing
  return dm;
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

// prep != nullptr: the q/k preparation folded in (attention_cache_decode_prep_cuda).
template <int DMAX, int HPB, typename C, bool kPrep>
void decode_tiled_launch_as(float* part, const float* q, const C* kc, const C* vc, const int32_t* tables,
                            const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits, int64_t len,
                            int* flag, FusedMerge fm, const DecodePrep& prep, cudaStream_t stream) {
  constexpr size_t smem = TiledDecodeSmem<DMAX, C>::bytes();
  auto* kernel = cache_decode_tiled_kernel<DMAX, HPB, C, false, kPrep>;
  static const bool attribute_set = [kernel] {  // above 48 KiB (the fp32 cache at DMAX 128) needs the opt-in
    HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)attribute_set;
  const dim3 grid(static_cast<unsigned>(dm.N), static_cast<unsigned>(dm.Hq / HPB), static_cast<unsigned>(splits));
  HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_attention(cuda::AttentionLaunch::kSplit), kernel,
                                              grid, dim3(kDecodeThreads), smem, stream, part, q, kc, vc, tables, ctx,
                                              cu, dm, splits, len, flag, fm, prep));
}
template <int DMAX, int HPB, typename C>
void decode_tiled_launch(float* part, const float* q, const C* kc, const C* vc, const int32_t* tables,
                         const int64_t* ctx, const int64_t* cu, const CacheDims& dm, int64_t splits, int64_t len,
                         int* flag, FusedMerge fm, const DecodePrep* prep, cudaStream_t stream) {
  if (prep != nullptr)
    decode_tiled_launch_as<DMAX, HPB, C, true>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, *prep,
                                               stream);
  else
    decode_tiled_launch_as<DMAX, HPB, C, false>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm,
                                                DecodePrep{}, stream);
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
  auto* kernel = cache_decode_tiled_kernel<DMAX, HPB, C, true, false>;
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
                                    splits, len, flag, fm, DecodePrep{}));
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
  if (kernel == DecodeKernel::tiled) {
    if (hpb == 4)
      decode_tiled_launch<DMAX, 4, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, prep, stream);
    else if (hpb == 2)
      decode_tiled_launch<DMAX, 2, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, prep, stream);
    else
      decode_tiled_launch<DMAX, 1, C>(part, q, kc, vc, tables, ctx, cu, dm, splits, len, flag, fm, prep, stream);
    return;
  }
  HLM_CHECK(prep == nullptr, "attention_cache: the q/k preparation is folded into the warp and tiled kernels only");
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

namespace {
// On by default since session 45 (H100, batch-1 decode at L 1024: olmo3_7b 5.72 -> 5.62 ms per step, at L 8192 7.36 ->
// 7.27, batch 32 14.56 -> 14.22; qwen3_4b batch 32 8.07 -> 7.87, L 8192 4.71 -> 4.55; H200: olmo3_7b 4.40 -> 4.30 at
// batch 1; bit-identical, docs/benchmarks.md).
OverridableSwitch g_tiled_qk_fold{"HLM_DECODE_TILED_QK_FOLD", true};
}  // namespace
bool attention_cache_cuda_tiled_qk_fold() { return g_tiled_qk_fold.on(); }
void attention_cache_cuda_set_tiled_qk_fold(int on) { g_tiled_qk_fold.set(on); }

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
  // With the preparation: the kernel attention_cache_decode_prep_supported agreed to (warps, or tiled when folding
  // into it is on); the rows are 16-byte multiples there.
  const DecodeKernel kernel = prep == nullptr ? decode_kernel_for(k_cache, v_cache, dm)
                              : attention_cache_cuda_decode_kernel() == DecodeKernel::warps ? DecodeKernel::warps
                                                                                            : DecodeKernel::tiled;
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

namespace {

// One block per row, copied in words of W (the widest that divides the row's bytes).
template <typename W>
__global__ void fill_rows_kernel(W* k_cache, W* v_cache, const W* k_rows, const W* v_rows, const int64_t* slots,
                                 int64_t row_words, int64_t pool_rows) {
  const int64_t t = blockIdx.x, s = slots[t];
  if (s < 0 || s >= pool_rows) return;
  for (int64_t i = threadIdx.x; i < row_words; i += blockDim.x) {
    k_cache[s * row_words + i] = k_rows[t * row_words + i];
    v_cache[s * row_words + i] = v_rows[t * row_words + i];
  }
}

template <typename W>
void fill_rows_as(void* k_cache, void* v_cache, const void* k_rows, const void* v_rows, const int64_t* slots,
                  int64_t count, int64_t row_bytes, int64_t pool_rows, cudaStream_t stream) {
  fill_rows_kernel<W><<<static_cast<unsigned>(count), 128, 0, stream>>>(
      static_cast<W*>(k_cache), static_cast<W*>(v_cache), static_cast<const W*>(k_rows),
      static_cast<const W*>(v_rows), slots, row_bytes / static_cast<int64_t>(sizeof(W)), pool_rows);
  HLM_CUDA_CHECK_LAUNCH();
}

void fill_rows(void* k_cache, void* v_cache, const void* k_rows, const void* v_rows, const int64_t* slots,
               int64_t count, int64_t row_bytes, int64_t pool_rows, cudaStream_t stream) {
  HLM_CHECK(row_bytes > 0 && row_bytes % 2 == 0, "attention_cache_fill_rows_cuda: a row of ", row_bytes, " bytes");
  HLM_CHECK(count >= 0 && count <= 0x7FFFFFFF, "attention_cache_fill_rows_cuda: ", count, " rows");
  if (count == 0) return;
  if (row_bytes % 16 == 0)
    fill_rows_as<uint4>(k_cache, v_cache, k_rows, v_rows, slots, count, row_bytes, pool_rows, stream);
  else if (row_bytes % 4 == 0)
    fill_rows_as<uint32_t>(k_cache, v_cache, k_rows, v_rows, slots, count, row_bytes, pool_rows, stream);
  else
    fill_rows_as<uint16_t>(k_cache, v_cache, k_rows, v_rows, slots, count, row_bytes, pool_rows, stream);
}

}  // namespace

void attention_cache_fill_rows_cuda(float* k_cache, float* v_cache, const float* k_rows, const float* v_rows,
                                    const int64_t* slots, int64_t count, int64_t row_elements, int64_t pool_rows,
                                    cudaStream_t stream) {
  fill_rows(k_cache, v_cache, k_rows, v_rows, slots, count, row_elements * 4, pool_rows, stream);
}
void attention_cache_fill_rows_cuda(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* k_rows,
                                    const __nv_bfloat16* v_rows, const int64_t* slots, int64_t count,
                                    int64_t row_elements, int64_t pool_rows, cudaStream_t stream) {
  fill_rows(k_cache, v_cache, k_rows, v_rows, slots, count, row_elements * 2, pool_rows, stream);
}

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
  const int64_t q_size = a.q_norm_whole ? p.q_heads * p.head_dim : p.head_dim;  // the norm's row
  const int64_t k_size = a.k_norm_whole ? p.kv_heads * p.head_dim : p.head_dim;
  d.q_vec = a.q_norm != nullptr && aligned16(a.q) && aligned16(a.q_norm) && q_size % 4 == 0;
  d.k_vec = a.k_norm != nullptr && aligned16(a.k) && aligned16(a.k_norm) && k_size % 4 == 0;
  d.q_whole = a.q_norm_whole;
  d.k_whole = a.k_norm_whole;
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
  // The kernel the decode path runs: warps (per-head norms only), or tiled when folding into it is on.
  const DecodeKernel kernel = attention_cache_cuda_decode_kernel();
  if (kernel == DecodeKernel::streams || (kernel == DecodeKernel::tiled && !attention_cache_cuda_tiled_qk_fold()))
    return false;
  if (kernel == DecodeKernel::warps && ((a.q_norm_whole && p.q_heads > 1) || (a.k_norm_whole && p.kv_heads > 1)))
    return false;
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
