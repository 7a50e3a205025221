// Causal GQA attention CUDA kernels and launchers (contract: attention.h, attention_cuda.h). fp32 FMA tiles in
// shared memory; 4 threads share one query (or key) row: each computes the scores of every 4th key (query) of a tile
// and owns every 4th dimension of its row's accumulators.
//   forward:  one block per (sequence, query tile, query head). Per key tile: scores, running max and sum, P into
//             shared memory, O = α·O + P V in registers; then out = O / l and lse = m + log l.
//   backward: (1) Dᵢ = dO·O, one thread per (token, query head) row;
//             (2) dk/dv: one block per (sequence, key tile, kv head), looping over the group's query heads and over
//                 the query tiles at or after the key tile (dV += Pᵀ dO, dK += dSᵀ Q);
//             (3) dq: one block per (sequence, query tile, query head), looping over key tiles (dQ += dS K).
//             (2) and (3) both recompute P and dP; neither needs a float atomic.
// bf16 storage with head dim 64 or 128 (16-byte aligned tensors) runs the tensor-core kernels of attention_tc.cu
// instead (same split of the work, mma.sync); f32 and other head dims run the scalar kernels here.
// Non-goals for now: wgmma, fusing (2) and (3), splitting long rows over blocks.
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/attention/attention_cuda.h"
#include "ops/attention/attention_cudnn.h"
#include "ops/attention/attention_tc.cuh"

namespace hlm {

namespace {

using attention_detail::Dims;
using attention_detail::seq_bounds;
using attention_detail::SeqBounds;
using cuda::from_f32;
using cuda::quiet_nan;
using cuda::to_f32;

constexpr int kThreads = 256;
constexpr int kRowThreads = 4;  // threads sharing one row; consecutive lanes of one warp
constexpr int kTileQ = attention_cuda_query_tile();
constexpr int kTileK = attention_cuda_key_tile();
static_assert(kThreads == kTileQ * kRowThreads && kThreads == kTileK * kRowThreads, "one row per 4 threads");
static_assert(kTileQ == kTileK, "the score phases index both tiles with the same per-thread count");
constexpr int kPerThread = kTileK / kRowThreads;  // scores each thread computes per tile
constexpr int kScoreStride = kTileK + 1;           // padded shared row of P / dS (bank conflicts)
constexpr unsigned kFullMask = 0xffffffffu;

// Padded shared row of q/k/v/dO: rows r and r+1 start in different banks.
template <int DMAX>
inline constexpr int kRowStride = DMAX + 1;

// Shared-memory floats of each kernel: tiles of [rows][DMAX + 1], score tiles [rows][kTileK + 1], row statistics.
template <int DMAX>
constexpr size_t forward_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(kTileQ + 2 * kTileK) * kRowStride<DMAX> + kTileQ * kScoreStride);
}
template <int DMAX>
constexpr size_t dkdv_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(2 * kTileK + 2 * kTileQ) * kRowStride<DMAX> +
                          2 * kTileK * kScoreStride + 2 * kTileQ);
}
template <int DMAX>
constexpr size_t dq_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(2 * kTileQ + 2 * kTileK) * kRowStride<DMAX> + kTileQ * kScoreStride);
}

// dst[r][d] = src row (tok0 + r, head) as fp32 for r < n_rows, d < D; zero elsewhere (padding rows and dims).
template <int kRows, int DMAX, typename T>
__device__ void load_tile(float* dst, const T* src, int64_t tok0, int64_t n_rows, int64_t heads, int64_t head,
                          int D) {
  for (int idx = threadIdx.x; idx < kRows * DMAX; idx += kThreads) {
    const int r = idx / DMAX, d = idx % DMAX;
    float val = 0.0f;
    if (r < n_rows && d < D) val = to_f32(src[((tok0 + r) * heads + head) * D + d]);
    dst[r * kRowStride<DMAX> + d] = val;
  }
}

// fp32 dot of two shared rows over the first D dims (FMA, in order d = 0..D-1).
__device__ __forceinline__ float row_dot(const float* a, const float* b, int D) {
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

// Combines a value over the 4 threads of a row (xor tree: all four get the same bits).
__device__ __forceinline__ float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float row_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

template <typename T, int DMAX>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, const int64_t* cu_seqlens,
                             Dims dm, int* error_flag) {
  constexpr int S = kRowStride<DMAX>;
  constexpr int kOwn = DMAX / kRowThreads;  // output dims per thread
  const int64_t seq = blockIdx.x / dm.n_tiles, q0 = (blockIdx.x % dm.n_tiles) * kTileQ, h = blockIdx.y;
  const SeqBounds sb = seq_bounds(cu_seqlens, seq, dm, error_flag);
  if (!sb.ok || q0 >= sb.len) return;  // uniform over the block
  const int64_t kvh = h / dm.group, len = sb.len, begin = sb.begin;

  extern __shared__ float smem[];
  float* q_s = smem;               // [kTileQ][S]
  float* k_s = q_s + kTileQ * S;   // [kTileK][S]
  float* v_s = k_s + kTileK * S;   // [kTileK][S]
  float* p_s = v_s + kTileK * S;   // [kTileQ][kScoreStride]: exp(s - m) of the current key tile
  load_tile<kTileQ, DMAX>(q_s, q, begin + q0, len - q0, dm.Hq, h, dm.D);

  const int r = threadIdx.x / kRowThreads, sub = threadIdx.x % kRowThreads;
  const int64_t qpos = q0 + r;  // query position in the sequence
  const bool row_valid = qpos < len;
  float o[kOwn];
#pragma unroll
  for (int c = 0; c < kOwn; ++c) o[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const int64_t k_end = len < q0 + kTileQ ? len : q0 + kTileQ;  // keys the tile's last query sees
  // Sliding window: the tile's first query sees keys from window_begin(q0); earlier key tiles are skipped whole.
  const int64_t k_first = dm.window > 0 && q0 - dm.window + 1 > 0 ? (q0 - dm.window + 1) / kTileK * kTileK : 0;
  const int64_t row_lo = dm.window > 0 && qpos - dm.window + 1 > 0 ? qpos - dm.window + 1 : 0;  // first visible key
  for (int64_t k0 = k_first; k0 < k_end; k0 += kTileK) {
    __syncthreads();  // the previous tile's k_s/v_s/p_s reads are done
    load_tile<kTileK, DMAX>(k_s, k, begin + k0, len - k0, dm.Hkv, kvh, dm.D);
    load_tile<kTileK, DMAX>(v_s, v, begin + k0, len - k0, dm.Hkv, kvh, dm.D);
    __syncthreads();
    // Keys [k0 + j_lo, k0 + n_vis) are visible to this row (causal: a prefix of the tile; a window also cuts its
    // start); the rest are skipped, not zeroed.
    const int64_t vis = row_valid ? qpos + 1 - k0 : 0;
    const int n_vis = static_cast<int>(vis < 0 ? 0 : (vis > kTileK ? kTileK : vis));
    const int64_t lo = row_lo - k0;
    const int j_lo = static_cast<int>(lo < 0 ? 0 : (lo > kTileK ? kTileK : lo));
    float s[kPerThread];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int j = sub + kRowThreads * c;
      const bool visible = j >= j_lo && j < n_vis;
      s[c] = visible ? row_dot(q_s + r * S, k_s + j * S, dm.D) * dm.scale : 0.0f;
      if (visible) tile_max = fmaxf(tile_max, s[c]);  // fmaxf skips NaN, like the CPU's std::max
    }
    const float m_new = fmaxf(m, row_max(tile_max));
    // While every visible score is -Inf (or NaN), exponents are taken against 0: exp(-Inf) = 0 keeps l and O at 0
    // (or NaN) until a finite score arrives, as the CPU's single max over the whole row gives.
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
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
    __syncwarp();  // p_s row r was written by the row's 4 threads, all in this warp
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
  const int64_t row = (begin + qpos) * dm.Hq + h;
  const bool no_finite_max = m == -INFINITY;  // the CPU's exp(-Inf - -Inf): NaN
  const float inv_l = 1.0f / l;
#pragma unroll
  for (int c = 0; c < kOwn; ++c) {
    const int d = sub + kRowThreads * c;
    if (d < dm.D) out[row * dm.D + d] = from_f32<T>(no_finite_max ? quiet_nan() : o[c] * inv_l);
  }
  if (sub == 0) lse[row] = no_finite_max ? quiet_nan() : m + logf(l);
}

// dvec[r] = Σ_d d_out[r, d] · out[r, d] (fp32 FMA in order) for rows r of [T · Hq].
template <typename T>
__global__ void attention_row_dot_kernel(float* dvec, const T* d_out, const T* out, int64_t rows, int D) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int d = 0; d < D; ++d) acc = fmaf(to_f32(d_out[r * D + d]), to_f32(out[r * D + d]), acc);
    dvec[r] = acc;
  }
}

template <typename T, int DMAX>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(T* dk, T* dv, const T* d_out, const T* q, const T* k, const T* v, const float* lse,
                          const float* dvec, const int64_t* cu_seqlens, Dims dm, int* error_flag) {
  constexpr int S = kRowStride<DMAX>;
  constexpr int kOwn = DMAX / kRowThreads;
  const int64_t seq = blockIdx.x / dm.n_tiles, k0 = (blockIdx.x % dm.n_tiles) * kTileK, kvh = blockIdx.y;
  const SeqBounds sb = seq_bounds(cu_seqlens, seq, dm, error_flag);
  if (!sb.ok || k0 >= sb.len) return;
  const int64_t len = sb.len, begin = sb.begin;

  extern __shared__ float smem[];
  float* k_s = smem;                        // [kTileK][S]
  float* v_s = k_s + kTileK * S;            // [kTileK][S]
  float* q_s = v_s + kTileK * S;            // [kTileQ][S]
  float* do_s = q_s + kTileQ * S;           // [kTileQ][S]
  float* p_s = do_s + kTileQ * S;           // [kTileK][kScoreStride]: P, key-major
  float* ds_s = p_s + kTileK * kScoreStride;  // [kTileK][kScoreStride]: dS, key-major
  float* lse_s = ds_s + kTileK * kScoreStride;  // [kTileQ]
  float* dvec_s = lse_s + kTileQ;               // [kTileQ]
  load_tile<kTileK, DMAX>(k_s, k, begin + k0, len - k0, dm.Hkv, kvh, dm.D);
  load_tile<kTileK, DMAX>(v_s, v, begin + k0, len - k0, dm.Hkv, kvh, dm.D);

  const int jr = threadIdx.x / kRowThreads, sub = threadIdx.x % kRowThreads;
  const int64_t kpos = k0 + jr;  // key position in the sequence
  const bool key_valid = kpos < len;
  float dk_acc[kOwn], dv_acc[kOwn];
#pragma unroll
  for (int c = 0; c < kOwn; ++c) dk_acc[c] = dv_acc[c] = 0.0f;

  for (int64_t h = kvh * dm.group; h < (kvh + 1) * dm.group; ++h) {
    // Queries after the window of the tile's last key never see it (sliding window): the query tiles stop there.
    const int64_t q_end = dm.window > 0 && k0 + kTileK - 1 + dm.window < len ? k0 + kTileK - 1 + dm.window : len;
    for (int64_t q0 = k0; q0 < q_end; q0 += kTileQ) {
      __syncthreads();  // the previous tile's q_s/do_s/p_s/ds_s reads are done
      load_tile<kTileQ, DMAX>(q_s, q, begin + q0, len - q0, dm.Hq, h, dm.D);
      load_tile<kTileQ, DMAX>(do_s, d_out, begin + q0, len - q0, dm.Hq, h, dm.D);
      for (int i = threadIdx.x; i < kTileQ; i += kThreads) {
        const bool in_seq = q0 + i < len;
        lse_s[i] = in_seq ? lse[(begin + q0 + i) * dm.Hq + h] : 0.0f;
        dvec_s[i] = in_seq ? dvec[(begin + q0 + i) * dm.Hq + h] : 0.0f;
      }
      __syncthreads();
      // Queries [q0 + i_lo, q0 + i_hi) see this key: positions >= kpos inside the sequence.
      const int i_lo = key_valid ? static_cast<int>(kpos > q0 ? kpos - q0 : 0) : kTileQ;
      int i_hi = static_cast<int>(len - q0 < kTileQ ? len - q0 : kTileQ);
      if (dm.window > 0) {  // and positions < kpos + W
        const int64_t hi = key_valid ? kpos + dm.window - q0 : 0;
        if (hi < i_hi) i_hi = static_cast<int>(hi < 0 ? 0 : hi);
      }
#pragma unroll
      for (int c = 0; c < kPerThread; ++c) {
        const int i = sub + kRowThreads * c;
        float p = 0.0f, ds = 0.0f;
        if (i >= i_lo && i < i_hi) {
          const float s = row_dot(q_s + i * S, k_s + jr * S, dm.D) * dm.scale;
          const float dp = row_dot(do_s + i * S, v_s + jr * S, dm.D);
          p = expf(s - lse_s[i]);
          ds = p * (dp - dvec_s[i]);
        }
        p_s[jr * kScoreStride + i] = p;
        ds_s[jr * kScoreStride + i] = ds;
      }
      __syncwarp();  // p_s/ds_s row jr was written by the row's 4 threads, all in this warp
      for (int i = i_lo; i < i_hi; ++i) {
        const float p = p_s[jr * kScoreStride + i], ds = ds_s[jr * kScoreStride + i];
        const float* doi = do_s + i * S + sub;
        const float* qi = q_s + i * S + sub;
#pragma unroll
        for (int c = 0; c < kOwn; ++c) {
          dv_acc[c] = fmaf(p, doi[kRowThreads * c], dv_acc[c]);
          dk_acc[c] = fmaf(ds, qi[kRowThreads * c], dk_acc[c]);
        }
      }
    }
  }
  if (!key_valid) return;
  const int64_t row = (begin + kpos) * dm.Hkv + kvh;
#pragma unroll
  for (int c = 0; c < kOwn; ++c) {
    const int d = sub + kRowThreads * c;
    if (d < dm.D) {
      dk[row * dm.D + d] = from_f32<T>(dk_acc[c] * dm.scale);
      dv[row * dm.D + d] = from_f32<T>(dv_acc[c]);
    }
  }
}

template <typename T, int DMAX>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(T* dq, const T* d_out, const T* q, const T* k, const T* v, const float* lse,
                        const float* dvec, const int64_t* cu_seqlens, Dims dm, int* error_flag) {
  constexpr int S = kRowStride<DMAX>;
  constexpr int kOwn = DMAX / kRowThreads;
  const int64_t seq = blockIdx.x / dm.n_tiles, q0 = (blockIdx.x % dm.n_tiles) * kTileQ, h = blockIdx.y;
  const SeqBounds sb = seq_bounds(cu_seqlens, seq, dm, error_flag);
  if (!sb.ok || q0 >= sb.len) return;
  const int64_t kvh = h / dm.group, len = sb.len, begin = sb.begin;

  extern __shared__ float smem[];
  float* q_s = smem;               // [kTileQ][S]
  float* do_s = q_s + kTileQ * S;  // [kTileQ][S]
  float* k_s = do_s + kTileQ * S;  // [kTileK][S]
  float* v_s = k_s + kTileK * S;   // [kTileK][S]
  float* ds_s = v_s + kTileK * S;  // [kTileQ][kScoreStride]
  load_tile<kTileQ, DMAX>(q_s, q, begin + q0, len - q0, dm.Hq, h, dm.D);
  load_tile<kTileQ, DMAX>(do_s, d_out, begin + q0, len - q0, dm.Hq, h, dm.D);

  const int r = threadIdx.x / kRowThreads, sub = threadIdx.x % kRowThreads;
  const int64_t qpos = q0 + r;
  const bool row_valid = qpos < len;
  const int64_t row = (begin + qpos) * dm.Hq + h;
  const float lse_r = row_valid ? lse[row] : 0.0f, dvec_r = row_valid ? dvec[row] : 0.0f;
  float dq_acc[kOwn];
#pragma unroll
  for (int c = 0; c < kOwn; ++c) dq_acc[c] = 0.0f;

  const int64_t k_end = len < q0 + kTileQ ? len : q0 + kTileQ;
  const int64_t k_first = dm.window > 0 && q0 - dm.window + 1 > 0 ? (q0 - dm.window + 1) / kTileK * kTileK : 0;
  const int64_t row_lo = dm.window > 0 && qpos - dm.window + 1 > 0 ? qpos - dm.window + 1 : 0;  // first visible key
  for (int64_t k0 = k_first; k0 < k_end; k0 += kTileK) {
    __syncthreads();  // the previous tile's k_s/v_s/ds_s reads are done
    load_tile<kTileK, DMAX>(k_s, k, begin + k0, len - k0, dm.Hkv, kvh, dm.D);
    load_tile<kTileK, DMAX>(v_s, v, begin + k0, len - k0, dm.Hkv, kvh, dm.D);
    __syncthreads();
    const int64_t vis = row_valid ? qpos + 1 - k0 : 0;
    const int n_vis = static_cast<int>(vis < 0 ? 0 : (vis > kTileK ? kTileK : vis));
    const int64_t lo = row_lo - k0;
    const int j_lo = static_cast<int>(lo < 0 ? 0 : (lo > kTileK ? kTileK : lo));
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int j = sub + kRowThreads * c;
      float ds = 0.0f;
      if (j >= j_lo && j < n_vis) {
        const float s = row_dot(q_s + r * S, k_s + j * S, dm.D) * dm.scale;
        const float dp = row_dot(do_s + r * S, v_s + j * S, dm.D);
        ds = expf(s - lse_r) * (dp - dvec_r);
      }
      ds_s[r * kScoreStride + j] = ds;
    }
    __syncwarp();  // ds_s row r was written by the row's 4 threads, all in this warp
    for (int j = j_lo; j < n_vis; ++j) {
      const float ds = ds_s[r * kScoreStride + j];
      const float* kj = k_s + j * S + sub;
#pragma unroll
      for (int c = 0; c < kOwn; ++c) dq_acc[c] = fmaf(ds, kj[kRowThreads * c], dq_acc[c]);
    }
  }
  if (!row_valid) return;
#pragma unroll
  for (int c = 0; c < kOwn; ++c) {
    const int d = sub + kRowThreads * c;
    if (d < dm.D) dq[row * dm.D + d] = from_f32<T>(dq_acc[c] * dm.scale);
  }
}

// ---- Launchers

constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridY = 65535;

// Validates the shapes and returns the kernels' view of them (n_tiles = 0: nothing to do).
Dims make_dims(const AttentionCudaParams& p, const char* who) {
  HLM_CHECK(p.total_tokens >= 0 && p.n_seqs >= 0 && p.max_seqlen >= 0, who, ": negative size (T ", p.total_tokens,
            ", n_seqs ", p.n_seqs, ", max_seqlen ", p.max_seqlen, ")");
  HLM_CHECK(p.n_seqs > 0 || p.total_tokens == 0, who, ": ", p.total_tokens, " tokens but no sequences");
  HLM_CHECK(p.q_heads > 0 && p.kv_heads > 0 && p.q_heads % p.kv_heads == 0, who, ": q heads ", p.q_heads,
            " not a positive multiple of kv heads ", p.kv_heads);
  HLM_CHECK_INPUT(p.head_dim >= 1 && p.head_dim <= attention_cuda_max_head_dim(), who, ": head_dim ", p.head_dim,
                  " is not supported on CUDA (1..", attention_cuda_max_head_dim(), ")");
  HLM_CHECK(p.q_heads <= kMaxGridY, who, ": ", p.q_heads, " query heads exceed the grid's y limit");
  const int64_t n_tiles = (p.max_seqlen + kTileQ - 1) / kTileQ;
  HLM_CHECK(n_tiles == 0 || p.n_seqs <= kMaxGridX / n_tiles, who, ": ", p.n_seqs, " sequences of up to ",
            p.max_seqlen, " tokens exceed the grid's x limit");
  HLM_CHECK(p.window >= 0, who, ": negative window ", p.window);
  return {p.total_tokens, p.q_heads,    p.kv_heads, p.q_heads / p.kv_heads, p.n_seqs, p.max_seqlen,
          n_tiles,        static_cast<int>(p.head_dim), p.scale, p.window};
}

bool nothing_to_do(const Dims& dm) { return dm.T == 0 || dm.n_tiles == 0; }

// Kernels take more than the default 48 KiB of dynamic shared memory (up to 166 KiB at D = 128).
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <typename T, int DMAX>
void forward_launch(T* out, float* lse, const T* q, const T* k, const T* v, const int64_t* cu, const Dims& dm,
                    int* flag, cudaStream_t stream) {
  constexpr size_t smem = forward_smem_bytes<DMAX>();
  allow_smem(attention_forward_kernel<T, DMAX>, smem);
  const dim3 grid(static_cast<unsigned>(dm.n_seqs * dm.n_tiles), static_cast<unsigned>(dm.Hq));
  attention_forward_kernel<T, DMAX><<<grid, kThreads, smem, stream>>>(out, lse, q, k, v, cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void forward_impl(T* out, float* lse, const T* q, const T* k, const T* v, const int64_t* cu,
                  const AttentionCudaParams& p, int* flag, cudaStream_t stream) {
  const Dims dm = make_dims(p, "attention_forward_cuda");
  if (nothing_to_do(dm)) return;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const void* tensors[] = {out, q, k, v};
    if (attention_detail::tc_supported(dm, tensors, 4)) {
      attention_detail::tc_forward(out, lse, q, k, v, cu, dm, flag, stream);
      return;
    }
  }
  if (dm.D <= 64)
    forward_launch<T, 64>(out, lse, q, k, v, cu, dm, flag, stream);
  else
    forward_launch<T, 128>(out, lse, q, k, v, cu, dm, flag, stream);
}

template <typename T, int DMAX>
void backward_launch(T* dq, T* dk, T* dv, const T* d_out, const T* q, const T* k, const T* v, const float* lse,
                     const float* dvec, const int64_t* cu, const Dims& dm, int* flag, cudaStream_t stream) {
  constexpr size_t smem_dkdv = dkdv_smem_bytes<DMAX>(), smem_dq = dq_smem_bytes<DMAX>();
  allow_smem(attention_dkdv_kernel<T, DMAX>, smem_dkdv);
  allow_smem(attention_dq_kernel<T, DMAX>, smem_dq);
  const auto x = static_cast<unsigned>(dm.n_seqs * dm.n_tiles);
  attention_dkdv_kernel<T, DMAX><<<dim3(x, static_cast<unsigned>(dm.Hkv)), kThreads, smem_dkdv, stream>>>(
      dk, dv, d_out, q, k, v, lse, dvec, cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
  attention_dq_kernel<T, DMAX><<<dim3(x, static_cast<unsigned>(dm.Hq)), kThreads, smem_dq, stream>>>(
      dq, d_out, q, k, v, lse, dvec, cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void backward_impl(T* dq, T* dk, T* dv, const T* d_out, const T* q, const T* k, const T* v, const T* out,
                   const float* lse, const int64_t* cu, const AttentionCudaParams& p, void* workspace,
                   size_t workspace_bytes, int* flag, cudaStream_t stream) {
  const Dims dm = make_dims(p, "attention_backward_cuda");
  if (nothing_to_do(dm)) return;
  HLM_CHECK(workspace != nullptr, "attention_backward_cuda: no workspace");
  HLM_CHECK(workspace_bytes >= attention_backward_cuda_workspace_bytes(p), "attention_backward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", attention_backward_cuda_workspace_bytes(p));
  auto* dvec = static_cast<float*>(workspace);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const void* tensors[] = {dq, dk, dv, d_out, q, k, v, out};
    if (attention_detail::tc_supported(dm, tensors, 8)) {
      attention_detail::tc_backward(dq, dk, dv, d_out, q, k, v, out, lse, dvec, cu, dm, flag, stream);
      return;
    }
  }
  const int64_t rows = dm.T * dm.Hq;
  attention_row_dot_kernel<T><<<cuda::grid_blocks(rows), cuda::kElementwiseThreads, 0, stream>>>(dvec, d_out, out,
                                                                                                   rows, dm.D);
  HLM_CUDA_CHECK_LAUNCH();
  if (dm.D <= 64)
    backward_launch<T, 64>(dq, dk, dv, d_out, q, k, v, lse, dvec, cu, dm, flag, stream);
  else
    backward_launch<T, 128>(dq, dk, dv, d_out, q, k, v, lse, dvec, cu, dm, flag, stream);
}

}  // namespace

void attention_forward_cuda(float* out, float* lse, const float* q, const float* k, const float* v,
                            const int64_t* cu_seqlens, const AttentionCudaParams& p, int* error_flag,
                            cudaStream_t stream) {
  forward_impl(out, lse, q, k, v, cu_seqlens, p, error_flag, stream);
}

namespace {

// The first refusal of each direction (the native kernels then run it).
void note_cudnn_refusal(bool backward, const std::string& why) {
  static std::once_flag forward_once, backward_once;
  attention_cudnn_note_refusal(backward ? backward_once : forward_once, "attention",
                               backward ? "a backward call" : "a forward call", why, "the native kernels run it");
}

}  // namespace

void attention_forward_cuda(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                            const __nv_bfloat16* v, const int64_t* cu_seqlens, const AttentionCudaParams& p,
                            int* error_flag, cudaStream_t stream) {
  if (attention_engine() == AttentionEngine::kCudnn) {
    std::string why;
    if (attention_cudnn_forward(out, lse, q, k, v, p, stream, &why)) return;
    note_cudnn_refusal(false, why);
  }
  forward_impl(out, lse, q, k, v, cu_seqlens, p, error_flag, stream);
}

size_t attention_backward_cuda_workspace_bytes(const AttentionCudaParams& p) {
  HLM_CHECK(p.total_tokens >= 0 && p.q_heads >= 0, "attention_backward_cuda_workspace_bytes: negative shape");
  return static_cast<size_t>(p.total_tokens * p.q_heads) * sizeof(float);
}

void attention_backward_cuda(float* dq, float* dk, float* dv, const float* d_out, const float* q, const float* k,
                             const float* v, const float* out, const float* lse, const int64_t* cu_seqlens,
                             const AttentionCudaParams& p, void* workspace, size_t workspace_bytes, int* error_flag,
                             cudaStream_t stream) {
  backward_impl(dq, dk, dv, d_out, q, k, v, out, lse, cu_seqlens, p, workspace, workspace_bytes, error_flag, stream);
}

void attention_backward_cuda(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* d_out,
                             const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                             const __nv_bfloat16* out, const float* lse, const int64_t* cu_seqlens,
                             const AttentionCudaParams& p, void* workspace, size_t workspace_bytes, int* error_flag,
                             cudaStream_t stream) {
  if (attention_engine() == AttentionEngine::kCudnn) {
    std::string why;
    if (attention_cudnn_backward(dq, dk, dv, d_out, q, k, v, out, lse, p, stream, &why)) return;
    note_cudnn_refusal(true, why);
  }
  backward_impl(dq, dk, dv, d_out, q, k, v, out, lse, cu_seqlens, p, workspace, workspace_bytes, error_flag, stream);
}

}  // namespace hlm
