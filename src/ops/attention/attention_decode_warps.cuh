// The warp decode attention kernel (DecodeKernel::warps, with the q/k preparation folded in or not) and the split
// merge kernel, as device code only: launched by attention_cache.cu, and run on the CPU by tools/cuda_emu's emulation
// (decode_attention_emu.sh). Internal linkage: included by one translation unit each.
#pragma once
#include <cstdint>

#include "backend/cuda/dependent_launch.cuh"
#include "ops/attention/attention_cache_common.cuh"
#include "ops/attention/attention_decode_prep.cuh"
#include "ops/qk_norm_rope/qk_row_math.cuh"

namespace hlm {

namespace {

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

// kPrep (attention_cache_decode_prep_cuda): q is the raw projection; after the wait each block prepares its HPB q
// heads and its KV head's new k row in shared memory as qk_norm_rope.cu does (decode_prep_block, shared with the
// tiled kernel; per-head norms only here) and uses them for q and for the new key (its k and v narrowed to the
// cache's type and widened back, the values the cache would hold); the block whose split holds the new key, first
// head group of its KV head, writes k, v into the cache slot. No other block reads that slot in this launch (the other
// splits end before it); the raw q and k are not written back (every split's block reads them).
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
  __shared__ __align__(16) PrepShared<kPrep ? DMAX : 8> ps;
  const auto load = [&](int64_t b, bool new_key_only, bool skip_new_key) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
      const int64_t pos = kb + b * Sh::kBatchKeys + s * G + grp;
      const bool is_new = pos == last;
      if (off[s] >= 0 && has_chunk && (new_key_only ? is_new : !(skip_new_key && is_new))) {
        if (kPrep && is_new) {
          kr[s] = pack_chunk<C, kVec>(ps.k + c * kVec);
          vr[s] = pack_chunk<C, kVec>(ps.v + c * kVec);
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
  if constexpr (kPrep) {  // q heads and the new key's k, v prepared in shared memory (decode_prep_block)
    __shared__ __align__(16) float qp_s[HPB][DMAX];
    decode_prep_block<HPB, DMAX, C, false>(pr, dm, sv.begin, h0, kvh, kb <= last && last < ke, qp_s, ps,
                                           const_cast<C*>(k_cache), const_cast<C*>(v_cache), flag);
#pragma unroll
    for (int hh = 0; hh < HPB; ++hh)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int d = c * kVec + e;
        qr[hh][e] = d < dm.D ? qp_s[hh][d] : 0.0f;
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

}  // namespace

}  // namespace hlm
