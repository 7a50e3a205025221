// q/k norm + RoPE + KV cache write: CUDA kernel and launchers (contract: qk_norm_rope_cuda.h). One block of kThreads
// threads per unit: a token's rows, or, when every norm row lies inside one KV group (per-head norms, or none), one
// KV group of a token (its Hq/Hkv q heads, its k and v head), so that a batch-1 decode step spreads over Hkv blocks
// instead of serializing all heads in one (measured: the one-block form made the qwen3_4b B1 step slower):
//   1. loads: the token's q, k and v rows, its position, slot and cos/sin row into shared memory, every load issued
//      before any is waited on (16-byte loads when the rows allow);
//   2. norms: the rows of q, then of k, each in the summation order of rmsnorm.cu (a warp per row of ≤ 1024, 8 warps
//      taking rows w, w + 8, ...; longer rows: the whole block, block_sum), results written over the shared row;
//   3. RoPE on the shared rows, one thread per (head, pair) as rope.cu;
//   4. stores: q and k back in place, k and v into the cache slot (narrowed to the cache's type).
// A norm over whole rows at a few tokens (decode: OLMo's q/k norms span the projection) would leave one block per
// token doing every head (15.8 µs per layer for olmo_hybrid_7b at batch 1, session 27). There a token is split over a
// thread-block CLUSTER of C blocks (C the largest divisor of Hkv ≤ 8), each owning Hkv/C KV groups: every block loads
// the token's whole q and k rows and computes the row sums itself (the same sums in the same order: same bits), then
// normalizes, rotates and stores only its own heads. Since q and k are written back in place, no block writes before
// every block of its cluster has read them: a cluster barrier (arrive after the loads, wait before the stores).
// Non-goals: interleaved RoPE pairs (the CUDA model refuses them), bf16 q/k/v inputs.
#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/warp_rows.cuh"
#include "core/env_switch.h"
#include "core/error.h"
#include "ops/qk_norm_rope/qk_norm_rope_cuda.h"
#include "ops/qk_norm_rope/qk_row_math.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = rmsnorm_cuda_threads();  // the block path's thread count: its block_sum must match
constexpr int kWarps = kThreads / 32;
constexpr int64_t kWarpMaxDim = rmsnorm_cuda_warp_max_dim();
constexpr int64_t kMaxTokenBlocks = 1 << 20;
static_assert(kThreads == 256, "the block-path norm sums 256 partials as rmsnorm.cu does");

struct Args {
  float* q;
  float* k;
  const float* v;
  const float* q_norm;  // nullptr: no q norm
  const float* k_norm;
  const int32_t* positions;
  const float* cos;  // nullptr: no RoPE
  const float* sin;
  const int64_t* slots;
  int* flag;
  int64_t T, Cq, Ckv, D, half, num_positions, cache_slots;
  int64_t units;           // units per token: 1 (the whole token), Hkv (one KV group each) or `cluster`
  int64_t q_span, kv_span;  // floats of q and of k (= of v) per unit: Cq / units, Ckv / units
  bool whole_rows;          // a cluster of `units` blocks per token: each loads the whole q and k rows
  int64_t q_norm_size, k_norm_size;
  bool q_vec, k_vec;  // the norm's V = 4 order (rmsnorm_cuda.h)
  bool io_vec;        // 16-byte global loads / stores of the q, k, v rows
  float eps;
};

template <typename C>
__device__ __forceinline__ C narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// dst[0, n) ← src[0, n): 16-byte accesses when `vec` (both 16-byte aligned, n % 4 == 0), else one float per thread.
__device__ __forceinline__ void copy_row(float* dst, const float* src, int64_t n, bool vec) {
  if (vec) {
    for (int64_t i = threadIdx.x; i < n / 4; i += kThreads)
      reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
  } else {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
  }
}

// The rows of width n of x [C] (in shared memory) ← w · (x · r), r = 1 / sqrt(mean(x²) + eps), in rmsnorm.cu's
// summation order; only the elements in [lo, hi) are written (a cluster block's own heads; rows wholly outside are
// skipped), each row's sum is over all of it. Called by every thread of the block; ends before a barrier only on the
// block path (the caller syncs).
__device__ void norm_rows(float* x, int64_t C, int64_t n, const float* w, bool vec, float eps, float* red, int64_t lo,
                          int64_t hi) {
  const int64_t rows = C / n;
  if (n <= kWarpMaxDim) {  // rmsnorm_forward_warp_kernel: lane l's chunks of V at (32j + l)·V, in order
    const int warp = static_cast<int>(threadIdx.x / 32);
    for (int64_t r = warp; r < rows; r += kWarps) {
      if ((r + 1) * n <= lo || r * n >= hi) continue;
      // V = 4 (vec): rows start 16-byte aligned (n % 4 == 0, and ks = qs + q_span with q_span = Hq·D = (Hq/Hkv)·Hkv·D,
      // or (Hq/Hkv)·D per KV group, a multiple of 4 whenever the k rows are)
      cuda::qk_norm_row_warp(x + r * n, n, w, vec, eps, lo - r * n, hi - r * n);
    }
    return;
  }
  // rmsnorm_forward_kernel / _regs_kernel: thread t sums t, t + kThreads, ... in order, then block_sum.
  for (int64_t r = 0; r < rows; ++r) {
    if ((r + 1) * n <= lo || r * n >= hi) continue;  // the same for every thread of the block
    float* xr = x + r * n;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < n; d += kThreads) ss = fmaf(xr[d], xr[d], ss);
    ss = cuda::block_sum<kThreads>(ss, red);  // a barrier after every read of the row
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    const int64_t d_lo = lo - r * n > 0 ? lo - r * n : 0, d_hi = hi - r * n < n ? hi - r * n : n;
    for (int64_t d = d_lo + threadIdx.x; d < d_hi; d += kThreads) xr[d] = w[d] * (xr[d] * inv);
  }
}

template <typename C>
__global__ void __launch_bounds__(kThreads) qk_norm_rope_cache_kernel(Args a, C* k_cache, C* v_cache) {
  extern __shared__ float4 smem4[];
  const int64_t q_rows = a.whole_rows ? a.Cq : a.q_span, k_rows = a.whole_rows ? a.Ckv : a.kv_span;
  float* qs = reinterpret_cast<float*>(smem4);  // [q_rows]
  float* ks = qs + q_rows;                        // [k_rows]
  float* vs = ks + k_rows;                        // [kv_span]
  float* cs = vs + a.kv_span;                     // [half] cos, then [half] sin
  float* sn = cs + a.half;
  __shared__ float red[kWarps];
  cuda::dependent_launch_trigger();
  cuda::dependent_launch_wait();  // q, k, v come from the kernel before (dependent_launch_attention)
  // A grid of whole clusters striding over units token-major: the blocks of a cluster take the same token together.
  for (int64_t u = blockIdx.x; u < a.T * a.units; u += gridDim.x) {
    const int64_t t = u / a.units, j = u - t * a.units;  // token, its unit (0 when a unit is the whole token)
    float* qg = a.q + t * a.Cq + j * a.q_span;
    float* kg = a.k + t * a.Ckv + j * a.kv_span;
    // this unit's rows within the shared ones (all of them unless whole_rows)
    const int64_t q_lo = a.whole_rows ? j * a.q_span : 0, k_lo = a.whole_rows ? j * a.kv_span : 0;
    float* qo = qs + q_lo;
    float* ko = ks + k_lo;
    // 1. loads (every thread reads the token's position and slot: one broadcast load each)
    const int32_t pos = a.cos != nullptr ? a.positions[t] : 0;
    const int64_t slot = a.slots[t];
    const bool pos_ok = a.cos != nullptr && pos >= 0 && pos < a.num_positions;
    copy_row(qs, qg - q_lo, q_rows, a.io_vec);
    copy_row(ks, kg - k_lo, k_rows, a.io_vec);
    copy_row(vs, a.v + t * a.Ckv + j * a.kv_span, a.kv_span, a.io_vec);
    if (pos_ok) {
      for (int64_t i = threadIdx.x; i < a.half; i += kThreads) {
        cs[i] = a.cos[static_cast<int64_t>(pos) * a.half + i];
        sn[i] = a.sin[static_cast<int64_t>(pos) * a.half + i];
      }
    }
    __syncthreads();
    // This block has read the token's q and k: its cluster may write them (every thread arrives, release semantics).
    if (a.whole_rows) cooperative_groups::this_cluster().barrier_arrive();
    // 2. norms (q then k; they touch disjoint rows, so no barrier between them)
    if (a.q_norm != nullptr) norm_rows(qs, q_rows, a.q_norm_size, a.q_norm, a.q_vec, a.eps, red, q_lo, q_lo + a.q_span);
    if (a.k_norm != nullptr) norm_rows(ks, k_rows, a.k_norm_size, a.k_norm, a.k_vec, a.eps, red, k_lo, k_lo + a.kv_span);
    __syncthreads();
    // 3. RoPE over the q heads, then the k heads: pair (h, i) rotates x[i], x[i + half] (rope.cu's operations)
    if (a.cos != nullptr) {
      const int64_t hq = a.q_span / a.D, heads = hq + a.kv_span / a.D, pairs = heads * a.half;
      if (!pos_ok && threadIdx.x == 0 && a.flag != nullptr) atomicOr(a.flag, 1);
      for (int64_t p = threadIdx.x; p < pairs; p += kThreads) {
        const int64_t h = p / a.half, i = p - h * a.half;
        float* x = h < hq ? qo + h * a.D : ko + (h - hq) * a.D;
        if (!pos_ok) {
          x[i] = cuda::quiet_nan();
          x[i + a.half] = cuda::quiet_nan();
          continue;
        }
        cuda::qk_rope_pair(x, i, a.half, cs[i], sn[i]);
      }
      __syncthreads();
    }
    // 4. stores (after every block of the cluster has read the rows these overwrite)
    if (a.whole_rows) cooperative_groups::this_cluster().barrier_wait();
    copy_row(qg, qo, a.q_span, a.io_vec);
    copy_row(kg, ko, a.kv_span, a.io_vec);
    if (slot < 0 || slot >= a.cache_slots) {
      if (threadIdx.x == 0 && a.flag != nullptr) atomicOr(a.flag, 1);
    } else {
      C* kc = k_cache + slot * a.Ckv + j * a.kv_span;
      C* vc = v_cache + slot * a.Ckv + j * a.kv_span;
      for (int64_t i = threadIdx.x; i < a.kv_span; i += kThreads) {
        kc[i] = narrow<C>(ko[i]);
        vc[i] = narrow<C>(vs[i]);
      }
    }
    __syncthreads();  // the shared rows are reloaded for the next token
  }
}

// Units per token: Hkv when every norm row lies inside one KV group's span (a norm over whole q or k rows needs the
// whole token in one block), else 1.
int64_t units_per_token(const QkNormRopeShape& s) {
  const int64_t q_span = s.q_heads / s.kv_heads * s.head_dim;
  const bool split = s.q_heads % s.kv_heads == 0 && (s.q_norm_size <= 0 || q_span % s.q_norm_size == 0) &&
                     (s.k_norm_size <= 0 || s.head_dim % s.k_norm_size == 0);
  return split ? s.kv_heads : 1;
}

// Shared memory of the one-block-per-unit layout (units_per_token); the cluster layout's (whole q and k rows, the
// block's share of v) is never larger.
size_t smem_bytes(const QkNormRopeCudaParams& p, int64_t half) {
  const QkNormRopeShape& s = p.shape;
  const int64_t units = units_per_token(s);
  return static_cast<size_t>((s.q_heads + 2 * s.kv_heads) * s.head_dim / units + 2 * half) * sizeof(float);
}
size_t cluster_smem_bytes(const QkNormRopeShape& s, int64_t cluster, int64_t half) {
  return static_cast<size_t>((s.q_heads + s.kv_heads + s.kv_heads / cluster) * s.head_dim + 2 * half) * sizeof(float);
}

// The cluster split is for a few tokens (decode steps): at more, one block per token already fills the GPU and each
// cluster block's whole-row loads would multiply the traffic.
constexpr int64_t kClusterMaxTokens = 64;
constexpr int64_t kMaxCluster = 8;  // the portable cluster size

// Blocks per token in a cluster for a norm over whole rows (units_per_token 1): the largest divisor of Hkv ≤ 8, or 1
// when there is none above 1, the GPU has no clusters (below sm_90) or the token count is past kClusterMaxTokens.
int64_t cluster_size(const QkNormRopeShape& s) {
  if (units_per_token(s) != 1 || s.tokens > kClusterMaxTokens || s.q_heads % s.kv_heads != 0) return 1;
  static const bool has_clusters = [] {  // HLM_QK_CLUSTER=off: one block per token (session 28's A/B)
    if (!env_switch("HLM_QK_CLUSTER", true)) return false;
    int device = 0, major = 0;
    HLM_CUDA_CHECK(cudaGetDevice(&device));
    HLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  if (!has_clusters) return 1;
  for (int64_t c = std::min(kMaxCluster, s.kv_heads); c > 1; --c)
    if (s.kv_heads % c == 0) return c;
  return 1;
}

// The device's opt-in shared memory per block, less the kernel's static part (red); read once per device (the
// engine asks at every attention layer of every eager step).
size_t max_smem_optin() {
  constexpr int kDevices = 64;
  static int cached[kDevices] = {};
  int device = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  int bytes = device < kDevices ? cached[device] : 0;
  if (bytes == 0) {
    HLM_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (device < kDevices) cached[device] = bytes;
  }
  return static_cast<size_t>(bytes) - 256;
}

template <typename C>
void launch(float* q, float* k, const float* v, const float* q_norm, const float* k_norm, const int32_t* positions,
            const RopeCudaTable* rope, C* k_cache, C* v_cache, const int64_t* slot_mapping,
            const QkNormRopeCudaParams& p, int* error_flag, cudaStream_t stream) {
  const QkNormRopeShape& s = p.shape;
  HLM_CHECK(s.tokens >= 0 && s.q_heads > 0 && s.kv_heads > 0 && s.head_dim > 0 && p.cache_slots >= 0,
            "qk_norm_rope_cache_write_cuda: bad shape");
  if (rope != nullptr) {
    HLM_CHECK(rope->head_dim == s.head_dim, "rope table head_dim ", rope->head_dim, " != attention head_dim ",
              s.head_dim);
    HLM_CHECK(rope->rotary_dim >= 2 && rope->rotary_dim % 2 == 0 && rope->rotary_dim <= rope->head_dim,
              "rope_cuda: bad table (head_dim ", rope->head_dim, ", rotary_dim ", rope->rotary_dim, ")");
  }
  const bool has_q_norm = q_norm != nullptr && s.q_norm_size > 0, has_k_norm = k_norm != nullptr && s.k_norm_size > 0;
  if (has_q_norm) (void)qk_norm_rows(s.q_norm_size, s.tokens, s.q_heads, s.head_dim);
  if (has_k_norm) (void)qk_norm_rows(s.k_norm_size, s.tokens, s.kv_heads, s.head_dim);
  if (s.tokens == 0) return;
  Args a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.q_norm = has_q_norm ? q_norm : nullptr;
  a.k_norm = has_k_norm ? k_norm : nullptr;
  a.positions = positions;
  a.cos = rope != nullptr ? rope->cos : nullptr;
  a.sin = rope != nullptr ? rope->sin : nullptr;
  a.slots = slot_mapping;
  a.flag = error_flag;
  a.T = s.tokens;
  a.D = s.head_dim;
  a.Cq = s.q_heads * s.head_dim;
  a.Ckv = s.kv_heads * s.head_dim;
  a.half = rope != nullptr ? rope->rotary_dim / 2 : 0;
  a.num_positions = rope != nullptr ? rope->num_positions : 0;
  a.cache_slots = p.cache_slots;
  const int64_t cluster = cluster_size(s);
  a.whole_rows = cluster > 1;
  a.units = a.whole_rows ? cluster : units_per_token(s);
  a.q_span = a.Cq / a.units;
  a.kv_span = a.Ckv / a.units;
  a.q_norm_size = s.q_norm_size;
  a.k_norm_size = s.k_norm_size;
  a.eps = s.eps;
  // rmsnorm.cu's dispatch_warp takes V = 4 when out, x and w are 16-byte aligned and the row length is a multiple of
  // 4 (out, the former sequence's fresh buffer, always is); rows longer than kWarpMaxDim ignore it.
  using cuda::aligned16;
  a.q_vec = has_q_norm && aligned16(q) && aligned16(q_norm) && s.q_norm_size % 4 == 0;
  a.k_vec = has_k_norm && aligned16(k) && aligned16(k_norm) && s.k_norm_size % 4 == 0;
  a.io_vec = aligned16(q) && aligned16(k) && aligned16(v) && s.head_dim % 4 == 0;
  const size_t smem = a.whole_rows ? cluster_smem_bytes(s, cluster, a.half) : smem_bytes(p, a.half);
  static size_t smem_allowed = 48 * 1024;  // per instantiation: raised once, as far as a launch needs
  if (smem > smem_allowed) {
    HLM_CHECK(smem <= max_smem_optin(), "qk_norm_rope_cache_write_cuda: ", smem,
              " bytes of shared memory per token exceed the device's (qk_norm_rope_cuda_supported)");
    HLM_CUDA_CHECK(cudaFuncSetAttribute(qk_norm_rope_cache_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
    smem_allowed = smem;
  }
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(s.tokens * a.units, kMaxTokenBlocks));
  const bool pdl = cuda::dependent_launch_attention(cuda::AttentionLaunch::kQk);
  if (!a.whole_rows) {
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(pdl, qk_norm_rope_cache_kernel<C>, dim3(blocks), dim3(kThreads), smem,
                                                stream, a, k_cache, v_cache));
    return;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);  // tokens · cluster ≤ kClusterMaxTokens · 8: whole clusters
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  attribute[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 2 : 1;
  HLM_CUDA_CHECK(cudaLaunchKernelEx(&config, qk_norm_rope_cache_kernel<C>, a, k_cache, v_cache));
}

}  // namespace

bool qk_norm_rope_cuda_supported(const QkNormRopeCudaParams& p) {
  const QkNormRopeShape& s = p.shape;
  if (s.q_heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0) return false;
  return smem_bytes(p, s.head_dim / 2) <= max_smem_optin();
}

void qk_norm_rope_cache_write_cuda(float* q, float* k, const float* v, const float* q_norm, const float* k_norm,
                                   const int32_t* positions, const RopeCudaTable* rope, float* k_cache,
                                   float* v_cache, const int64_t* slot_mapping, const QkNormRopeCudaParams& p,
                                   int* error_flag, cudaStream_t stream) {
  launch(q, k, v, q_norm, k_norm, positions, rope, k_cache, v_cache, slot_mapping, p, error_flag, stream);
}

void qk_norm_rope_cache_write_cuda(float* q, float* k, const float* v, const float* q_norm, const float* k_norm,
                                   const int32_t* positions, const RopeCudaTable* rope, __nv_bfloat16* k_cache,
                                   __nv_bfloat16* v_cache, const int64_t* slot_mapping, const QkNormRopeCudaParams& p,
                                   int* error_flag, cudaStream_t stream) {
  launch(q, k, v, q_norm, k_norm, positions, rope, k_cache, v_cache, slot_mapping, p, error_flag, stream);
}

}  // namespace hlm
