// The tiled decode attention kernel (DecodeKernel::tiled, the default) and its cluster split merge, as device code
// only: launched by attention_cache.cu, and run on the CPU by tools/cuda_emu's emulation (decode_tiled_emu.sh, which
// swaps the cp.async copies for plain 16-byte copies and the dynamic shared memory for emu_dyn_smem; the cluster form
// is not emulated). Internal linkage: included by one translation unit each.
#pragma once
#include <cstdint>
#include <cstring>

#if !HLM_CUDA_EMU
#include <cooperative_groups.h>
#endif

#include "backend/cuda/dependent_launch.cuh"
#include "ops/attention/attention_cache_common.cuh"
#include "ops/attention/attention_decode_prep.cuh"

namespace hlm {

namespace {

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
// while this tile is used; the first two tiles are issued together), so a block keeps 2 × kTileKeys K/V rows of loads outstanding instead of 16, in ~40
// registers instead of ~200. Per tile: scores of every (query head, key) pair (4 / HPB lanes per pair, each an FMA
// chain over its share of the 16-byte chunks, then an xor-shuffle sum), × scale, −Inf for keys outside the split or
// with a bad block id; then one warp per head takes the tile's max (fmaxf: NaN skipped as in the streams), rescales
// with alpha = exp(m_old − m_use), p = exp(s − m_use), l = alpha·l + Σp; then O = alpha·O + Σ_j p_j v_j over the tile
// (2 dims per thread; when a block has fewer heads than thread groups, the groups take interleaved key subsets and
// add their partial O in group order at the end). Same non-finite behaviour as the streams: NaN or +Inf scores and
// NaN values propagate, all −Inf gives m = −Inf, l = 0 (NaN after the merge).
constexpr int kTileKeys = 32;

#if HLM_CUDA_EMU  // the emulation copies at once (its threads see each other's copies only after a block barrier)
inline void cp_async16(void* smem, const void* gmem) { std::memcpy(smem, gmem, 16); }
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}
#else
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

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
// kPrep (attention_cache_decode_prep_cuda; not with kCluster): q is unused and pr holds the raw projections; after
// the wait the block prepares its q heads, and when its split holds the step's new key that key's k and v, as the q/k
// kernel would (decode_prep_block: per-head or whole-row norms, RoPE, the cache slot written by the KV head's first
// head group), and the new key's tile row is filled from the prepared k, v narrowed to the cache's type (the values
// the cache holds) instead of copied from the cache. No other block reads that slot in this launch.
template <int DMAX, int HPB, typename C, bool kCluster, bool kPrep>
__global__ void __launch_bounds__(kDecodeThreads)
    cache_decode_tiled_kernel(float* part, const float* q, const C* k_cache, const C* v_cache,
                              const int32_t* tables, const int64_t* context_lens, const int64_t* cu, CacheDims dm,
                              int64_t splits, int64_t split_len, int* flag, FusedMerge fm, DecodePrep pr) {
  static_assert(!(kCluster && kPrep), "the q/k preparation is not folded into the cluster form");
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  using Smem = TiledDecodeSmem<DMAX, C>;
  constexpr int kVec = Smem::kVec, S = Smem::kStride;
  constexpr int kLanes = kDecodeThreads / (HPB * kTileKeys);  // lanes per (head, key) score: 4, 2, 1
  constexpr int kGroupThreads = DMAX / 2;                     // one thread per 2 output dims
  constexpr int kGroups = kDecodeThreads / kGroupThreads;     // 2 (DMAX 128) or 4 (DMAX 64)
  constexpr int kHeadsPerGroup = HPB >= kGroups ? HPB / kGroups : 1;
  constexpr int kKeySets = HPB >= kGroups ? 1 : kGroups / HPB;  // groups sharing one head split its keys
  static_assert(kLanes >= 1 && kDecodeThreads % (HPB * kTileKeys) == 0, "tile shape");

#if HLM_CUDA_EMU
  unsigned char* smem_raw = reinterpret_cast<unsigned char*>(emu_dyn_smem);
#else
  extern __shared__ __align__(16) unsigned char smem_raw[];
#endif
  C* k_s = reinterpret_cast<C*>(smem_raw);         // [2][kTileKeys][S]
  C* v_s = k_s + 2 * kTileKeys * S;                 // [2][kTileKeys][S]
  __shared__ __align__(16) float q_s[HPB][DMAX];
  __shared__ float s_s[HPB][kTileKeys];  // scores, then weights p
  __shared__ float alpha_s[HPB], m_s[HPB], l_s[HPB];
  __shared__ bool ok_s[2][kTileKeys];
  __shared__ float o_red[kKeySets > 1 ? kKeySets - 1 : 1][HPB][DMAX];
  __shared__ __align__(16) PrepShared<kPrep ? DMAX : 8> ps;  // kPrep: the new key's prepared k, v; cos, sin

  const int64_t seq = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * HPB, split = blockIdx.z;
  const SeqView sv = seq_view(cu, context_lens, tables, seq, dm, blockIdx.y == 0 && split == 0 ? flag : nullptr);
  if (!sv.ok || sv.nq == 0) return;  // uniform over the block
  const int64_t kvh = h0 / dm.group;
  const KeyRange keys = split_keys(split, split_len, sv.ctx, dm.window);
  const int64_t kb = keys.kb, ke = keys.ke;
  const int64_t n_tiles = ke > kb ? (ke - kb + kTileKeys - 1) / kTileKeys : 0;
  const int64_t last = sv.ctx - 1;  // the step's new key
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int chunks = dm.D / kVec;  // 16-byte chunks per row

  if (t < HPB) {
    m_s[t] = -INFINITY;
    l_s[t] = 0.0f;
  }

  // Tile `tile` into buffer `buf`. Thread t copies chunk c_own = t % kRowChunks of the rows j_own + k · kRowsPerPass
  // (k < kPasses): the rows' block ids are loaded first, all together (one round trip per tile instead of one per row
  // in turn, and no division per chunk), then its 16-byte copies are issued; rows outside the split or with a bad
  // block id are zero-filled and marked (a bad id raises the flag).
  constexpr int kRowChunks = DMAX / kVec;  // 16-byte chunks of a DMAX-wide row; a row copies its first `chunks`
  constexpr int kRowsPerPass = kDecodeThreads / kRowChunks;
  constexpr int kPasses = kTileKeys / kRowsPerPass;
  static_assert(kDecodeThreads % kRowChunks == 0 && kTileKeys % kRowsPerPass == 0, "tile copy shape");
  const int c_own = t % kRowChunks, j_own = t / kRowChunks;
  const int64_t head_off = c_own * kVec;
  const auto load_tile = [&](int64_t tile, int buf) {
    const int64_t k0 = kb + tile * kTileKeys + j_own;
    int64_t block[kPasses];
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {  // unconditional loads (a row past the split reads the last key's entry)
      const int64_t pos = k0 + k * kRowsPerPass;
      block[k] = sv.table[key_page(pos < ke ? pos : ke - 1, dm).page];
    }
    bool bad = false;
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const int64_t pos = k0 + k * kRowsPerPass;
      const int j = j_own + k * kRowsPerPass;
      const int64_t off = pos < ke ? block_row(block[k], key_page(pos, dm).slot, kvh, dm) : -1;  // n_tiles > 0: ke > kb
      bad |= pos < ke && off < 0;
      if (c_own < chunks) {
        C* kd = k_s + (buf * kTileKeys + j) * S + head_off;
        C* vd = v_s + (buf * kTileKeys + j) * S + head_off;
        if (kPrep && off >= 0 && pos == last) {  // the new key's row from the prepared k, v
          *reinterpret_cast<uint4*>(kd) = pack_chunk<C, kVec>(ps.k + head_off);
          *reinterpret_cast<uint4*>(vd) = pack_chunk<C, kVec>(ps.v + head_off);
        } else if (off >= 0) {
          cp_async16(kd, k_cache + off + head_off);
          cp_async16(vd, v_cache + off + head_off);
        } else {
          *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
        }
      }
      if (c_own == 0) ok_s[buf][j] = off >= 0;
    }
    if (bad && c_own == 0 && flag != nullptr) atomicOr(flag, 1);
  };

  float acc[kHeadsPerGroup][2];
#pragma unroll
  for (int i = 0; i < kHeadsPerGroup; ++i) acc[i][0] = acc[i][1] = 0.0f;
  const int grp = t / kGroupThreads, d0 = (t % kGroupThreads) * 2;
  const int key_set = kKeySets > 1 ? grp / HPB : 0;

  // Launched as a programmatic dependent of the q/k norm + RoPE + cache write (dependent_launch_attention), which
  // writes q and the new token's K/V row (position ctx − 1). Tiles 0 and 1 are loaded up front (tile i into buffer
  // i, one cp.async group each, an empty group standing for a missing tile), each before the wait when all its keys are
  // older (written by earlier steps: a split of two tiles has both in flight while the producer still runs), q and
  // everything else after it; tile i + 2 is loaded into buffer i's place once tile i is used, so that one group per
  // tile keeps wait_group<1> meaning "this tile's copies are done".
  const auto older = [&](int64_t tile) {  // every key of the tile precedes the new token
    const int64_t end = kb + (tile + 1) * kTileKeys;
    return (end < ke ? end : ke) <= sv.ctx - 1;
  };
  const auto issue = [&](int64_t tile) {  // tile (if it exists) into buffer tile & 1, one group either way
    if (tile < n_tiles) load_tile(tile, static_cast<int>(tile & 1));
    cp_async_commit();
  };
  const bool early0 = n_tiles > 0 && older(0), early1 = n_tiles > 1 && older(1);  // early1 implies early0
  if (early0) issue(0);
  if (early1) issue(1);
  cuda::dependent_launch_wait();
  if constexpr (kPrep) {  // q_s, and the new key's k and v when this split holds it (ends after a barrier)
    decode_prep_block<HPB, DMAX, C, true>(pr, dm, sv.begin, h0, kvh, kb <= last && last < ke, q_s, ps,
                                          const_cast<C*>(k_cache), const_cast<C*>(v_cache), flag);
  } else {
    for (int i = t; i < HPB * DMAX; i += kDecodeThreads) {
      const int g = i / DMAX, d = i % DMAX;
      q_s[g][d] = d < dm.D ? q[(sv.begin * dm.Hq + h0 + g) * dm.D + d] : 0.0f;
    }
  }
  if (!early0) issue(0);
  if (!early1) issue(1);
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const int buf = static_cast<int>(tile & 1);
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
    __syncthreads();  // every thread is done with the buffer: it takes tile + 2
    issue(tile + 2);
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

}  // namespace

}  // namespace hlm
