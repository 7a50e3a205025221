// Small-row bf16 linear products (contract: gemv_cuda.h). One warp per output column of the group (columns of the
// outputs in order), a grid of whole blocks striding over the columns; x [M, K] staged once per block in shared
// memory as bf16 (16-byte loads when aligned) after each warp has issued its first weight loads; each lane keeps two
// rounds of loads in flight from start to end, and the grid is the blocks resident at once. Session 28 (H200,
// bench_cuda_kernels gemv, one call) measured this 1-14 % faster per shape than session 11's kernel (one round in
// flight, waited for before the next; 8 blocks per SM launched where 4 fit), which it replaced; a 256-byte L2
// prefetch on each load, or 8 loads per round at 2 blocks per SM, was slower than either.
// With a GemvNorm (kNorm), the staging computes the input's RMSNorm instead of reading x (stage_normed_x): after the
// dependent-launch wait, while the first weight rounds are in flight.
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/matmul/gemv_cuda.h"
#include "ops/residual/residual_add.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/swiglu/swiglu_math.cuh"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRound = 4;  // 16-byte weight loads per lane and round; two rounds in flight

struct GemvGroup {
  const __nv_bfloat16* w[gemv_max_outputs()];
  const float* bias[gemv_max_outputs()];
  float* y[gemv_max_outputs()];
  int64_t n[gemv_max_outputs()];
  int64_t first[gemv_max_outputs() + 1];  // first column of each output in the group's numbering; first[outs] = total
  int outs;
  // The fused gate/up SwiGLU (gemv_bf16_swiglu_cuda; outputs 0 and 1 are gate and up, n[0] columns each): h [M, n[0]]
  // as fp32 or bf16 (one of the two), y unused.
  float* h_f32;
  __nv_bfloat16* h_bf16;
};

// acc += Σ_i w_i · x_i over one 16-byte chunk (8 bf16) of a weight row, w already widened to fp32.
__device__ __forceinline__ void dot8(float& acc, const float (&w)[8], const uint4& x) {
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 b = __bfloat1622float2(x2[i]);
    acc = fmaf(w[2 * i], b.x, acc);
    acc = fmaf(w[2 * i + 1], b.y, acc);
  }
}

__device__ __forceinline__ void widen8(float (&out)[8], const uint4& w) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(w2[i]);
    out[2 * i] = a.x;
    out[2 * i + 1] = a.y;
  }
}

// Group column `col` → (output, column within it).
__device__ __forceinline__ int output_of(const GemvGroup& g, int64_t col) {
  int o = 0;
  while (col >= g.first[o + 1]) ++o;
  return o;
}

// x [M, K] (fp32, rounded here, or bf16) → xs as bf16 bits; every thread of the block takes part; the caller syncs.
template <int M>
__device__ __forceinline__ void stage_x(uint16_t* xs, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t K) {
  const int64_t total = static_cast<int64_t>(M) * K;  // a multiple of 8
  if (x_bf16 != nullptr) {
    const uint4* src = reinterpret_cast<const uint4*>(x_bf16);
    if (reinterpret_cast<uintptr_t>(x_bf16) % 16 == 0) {
      for (int64_t i = threadIdx.x; i < total / 8; i += kThreads) reinterpret_cast<uint4*>(xs)[i] = src[i];
    } else {
      const uint16_t* s16 = reinterpret_cast<const uint16_t*>(x_bf16);
      for (int64_t i = threadIdx.x; i < total; i += kThreads) xs[i] = s16[i];
    }
  } else if (reinterpret_cast<uintptr_t>(x_f32) % 16 == 0) {
    const float4* src = reinterpret_cast<const float4*>(x_f32);
    for (int64_t i = threadIdx.x; i < total / 4; i += kThreads) {
      const float4 v = src[i];
      uint2 packed;
      packed.x = cuda::f32_to_bf16_bits(v.x) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(v.y)) << 16);
      packed.y = cuda::f32_to_bf16_bits(v.z) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(v.w)) << 16);
      reinterpret_cast<uint2*>(xs)[i] = packed;
    }
  } else {
    for (int64_t i = threadIdx.x; i < total; i += kThreads) xs[i] = cuda::f32_to_bf16_bits(x_f32[i]);
  }
}

// The prologue's RMSNorm (gemv_cuda.h, GemvNorm) → xs as bf16 bits, and its outputs into memory: every thread of the
// block takes part (thread t the elements t, t + kThreads, ... of each row: the norm's block path with kThreads =
// rmsnorm_cuda_threads()); pass e of row m is written by block (m · passes + e) mod gridDim.x. Loads go out in
// batches of kNormBatch passes before their sums (one L2 round trip per batch, not per pass: the rows' ~10-16 passes
// in two), elements past K as zeros (fmaf(0, 0, s) = s: the norm's sum, which skips them, has the same bits). v is
// read twice from memory (the second time mostly from L1) rather than held: the GEMV's 64 registers already hold its
// first weights. F: the form, fixed per launch (no branch on it between the loads).
static_assert(kThreads == rmsnorm_cuda_threads(), "the norm prologue sums in the block path's order");
constexpr int kNormBatch = 8;   // passes per batch of the sum's loads
constexpr int kStageBatch = 4;  // of the second read (v, weight, h): fewer registers beside the weights in flight
enum class NormForm { kPre, kPreBranch, kPost };

template <int M, NormForm F>
__device__ __forceinline__ void stage_normed_rows(uint16_t* xs, const GemvNorm& nm, int64_t K, float* red) {
  const int passes = static_cast<int>((K + kThreads - 1) / kThreads);
  for (int m = 0; m < M; ++m) {
    const float* h = nm.h + m * K;
    const float* br = F == NormForm::kPre ? nullptr : nm.branch + m * K;
    // The value the norm normalizes: kPre h, kPreBranch h + scale · branch, kPost the branch.
    const auto value = [&](int64_t d) {
      if constexpr (F == NormForm::kPost) return br[d];
      else if constexpr (F == NormForm::kPreBranch) return cuda::residual_add_value(h[d], nm.scale, br[d]);
      else return h[d];
    };
    float ss = 0.0f;
    for (int e0 = 0; e0 < passes; e0 += kNormBatch) {
      float v[kNormBatch];
#pragma unroll
      for (int u = 0; u < kNormBatch; ++u) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e0 + u) * kThreads;
        v[u] = d < K ? value(d) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kNormBatch; ++u) ss = fmaf(v[u], v[u], ss);
    }
    ss = cuda::block_sum<kThreads>(ss, red);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(K) + nm.eps);
    for (int e0 = 0; e0 < passes; e0 += kStageBatch) {
      float v[kStageBatch], w[kStageBatch], hv[kStageBatch];
#pragma unroll
      for (int u = 0; u < kStageBatch; ++u) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e0 + u) * kThreads;
        v[u] = d < K ? value(d) : 0.0f;
        w[u] = d < K ? nm.weight[d] : 0.0f;
        if constexpr (F == NormForm::kPost) hv[u] = d < K ? h[d] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kStageBatch; ++u) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e0 + u) * kThreads;
        if (d >= K) break;
        const float y = w[u] * (v[u] * inv);
        float x = y;
        if constexpr (F == NormForm::kPost) x = cuda::residual_add_value(hv[u], nm.scale, y);
        const uint16_t x16 = cuda::f32_to_bf16_bits(x);
        xs[m * K + d] = x16;
        if ((m * passes + e0 + u) % static_cast<int>(gridDim.x) == static_cast<int>(blockIdx.x)) {
          nm.norm_out[m * K + d] = y;
          if constexpr (F == NormForm::kPost) nm.h_out[m * K + d] = x;
          if constexpr (F != NormForm::kPost)
            if (nm.norm_out16 != nullptr) reinterpret_cast<uint16_t*>(nm.norm_out16)[m * K + d] = x16;
          if constexpr (F == NormForm::kPreBranch) nm.h_out[m * K + d] = v[u];
        }
      }
    }
  }
}

template <int M>
__device__ __forceinline__ void stage_normed_x(uint16_t* xs, const GemvNorm& nm, int64_t K, float* red) {
  if (nm.kind == GemvNorm::kPost)
    stage_normed_rows<M, NormForm::kPost>(xs, nm, K, red);
  else if (nm.branch != nullptr)
    stage_normed_rows<M, NormForm::kPreBranch>(xs, nm, K, red);
  else
    stage_normed_rows<M, NormForm::kPre>(xs, nm, K, red);
}

// A warp's work is one sequence of rounds (its columns col0, col0 + col_step, ..., each `rounds` rounds of U loads
// per lane), two rounds' loads in flight at all times: round i + 1's are issued before round i is consumed, across
// column boundaries, and both of the first two rounds go out before the wait for x. Lane l sums its chunks l, l + 32,
// l + 64, ... in that order (gemv_cuda.h's numerics).
// kSwiglu: the columns are numbered 2j (gate row j) and 2j + 1 (up row j); a warp takes pairs j0, j0 + col_step, ...,
// the gate column then the up column of each, keeps the gate sums in registers and stores silu(gate) · up (the same
// fp32 sums, bias added the same way, swiglu_math.cuh's value: the bits of the separate launches).
// kNorm: x is the norm prologue's (stage_normed_x), x_f32 and x_bf16 unused.
template <int M, int U, bool kSwiglu, bool kNorm>  // U 4: 4 blocks of 256 resident per SM (64 registers)
__global__ void __launch_bounds__(kThreads, 16 / U) gemv_pipe_kernel(GemvGroup g, const float* x_f32,
                                                             const __nv_bfloat16* x_bf16, int64_t K, GemvNorm nm) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem_raw);  // [M, K] bf16 bits
  const int lane = threadIdx.x % 32;
  // 32-bit indices: columns (≤ 6 outputs of < 2^31 / 8 rows) and chunks (K ≤ gemv_max_k()) fit, fewer registers.
  const int chunks = static_cast<int>(K / 8);
  const int rounds = (chunks + 32 * U - 1) / (32 * U);
  const int columns = kSwiglu ? 2 * static_cast<int>(g.n[0]) : static_cast<int>(g.first[g.outs]);
  const int col_step = static_cast<int>(gridDim.x) * kWarps;

  // A round: (column, round index r, the column's weight row).
  struct Round {
    int col, r;
    const uint4* row;
  };
  const auto row_of = [&](int col) -> const uint4* {
    if constexpr (kSwiglu) return reinterpret_cast<const uint4*>(g.w[col & 1] + static_cast<int64_t>(col >> 1) * K);
    const int o = output_of(g, col);
    return reinterpret_cast<const uint4*>(g.w[o] + (col - g.first[o]) * K);
  };
  const auto next_of = [&](const Round& x) -> Round {
    if (x.r + 1 < rounds) return {x.col, x.r + 1, x.row};
    int col = x.col + col_step;
    if constexpr (kSwiglu) col = (x.col & 1) == 0 ? x.col + 1 : x.col - 1 + 2 * col_step;  // up, then the next pair
    return {col, 0, col < columns ? row_of(col) : nullptr};
  };
  const auto load = [&](uint4 (&buf)[U], const Round& x) {
    if (x.col >= columns) return;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = lane + (x.r * U + u) * 32;
      buf[u] = c < chunks ? __ldcs(x.row + c) : make_uint4(0, 0, 0, 0);
    }
  };
  float acc[M], gate[M];  // gate: kSwiglu's gate sums of the current pair
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = gate[m] = 0.0f;
  const auto consume = [&](const uint4 (&buf)[U], const Round& x) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = lane + (x.r * U + u) * 32;
      if (c < chunks) {
        float wf[8];
        widen8(wf, buf[u]);
#pragma unroll
        for (int m = 0; m < M; ++m) dot8(acc[m], wf, reinterpret_cast<const uint4*>(xs + m * K)[c]);
      }
    }
    if (x.r + 1 < rounds) return;  // the column's last round: reduce, store, start the next column from zero
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
    if constexpr (kSwiglu) {
      const int o = x.col & 1;
      const int64_t j = x.col >> 1;
      const float b = g.bias[o] != nullptr ? g.bias[o][j] : 0.0f;
      if (o == 0) {
#pragma unroll
        for (int m = 0; m < M; ++m) gate[m] = acc[m] + b;
      } else if (lane == 0) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const float h = cuda::swiglu_forward_value(gate[m], acc[m] + b);
          if (g.h_f32 != nullptr)
            g.h_f32[m * g.n[0] + j] = h;
          else
            reinterpret_cast<uint16_t*>(g.h_bf16)[m * g.n[0] + j] = cuda::f32_to_bf16_bits(h);
        }
      }
    } else if (lane == 0) {
      const int o = output_of(g, x.col);
      const int64_t c_local = x.col - g.first[o];
      const float b = g.bias[o] != nullptr ? g.bias[o][c_local] : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m) g.y[o][m * g.n[o] + c_local] = acc[m] + b;
    }
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  };

  cuda::dependent_launch_trigger();
  const int warp0 = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x / 32);
  const int col0 = kSwiglu ? 2 * warp0 : warp0;
  Round a{col0, 0, col0 < columns ? row_of(col0) : nullptr};
  Round b = next_of(a);
  uint4 wa[U], wb[U];
  load(wa, a);  // weights are not written during inference: loaded before the wait (dependent_launch.cuh)
  if constexpr (!kNorm) load(wb, b);
  cuda::dependent_launch_wait();
  if constexpr (kNorm) {
    // One round in flight through the norm (its batched loads need the registers of the second), the second after.
    __shared__ float red[kWarps];
    stage_normed_x<M>(xs, nm, K, red);
    load(wb, b);
  } else {
    stage_x<M>(xs, x_f32, x_bf16, K);
  }
  __syncthreads();
  while (a.col < columns) {
    consume(wa, a);
    a = next_of(b);
    load(wa, a);
    if (b.col >= columns) break;
    consume(wb, b);
    b = next_of(a);
    load(wb, b);
  }
}

int sm_count() {
  int device = 0, count = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return std::max(count, 1);
}

template <int M, bool kSwiglu, bool kNorm>
void launch(const GemvGroup& g, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t K, const GemvNorm& nm,
            cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(M) * static_cast<size_t>(K) * sizeof(uint16_t);
  const auto kernel = gemv_pipe_kernel<M, kRound, kSwiglu, kNorm>;
  // Once per process: the opt-in to M · gemv_max_k() · 2 bytes of shared memory, and the blocks of 256 threads that
  // registers and threads let reside per SM (4 for the pipelined form).
  static const int resident = [kernel] {
    HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(M * gemv_max_k() * sizeof(uint16_t))));
    int n = 0;
    HLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0));
    return std::max(n, 1);
  }();
  static const int sms = sm_count();
  const int64_t warps = kSwiglu ? g.n[0] : g.first[g.outs];  // kSwiglu: a warp per (gate, up) pair
  const int64_t needed = (warps + kWarps - 1) / kWarps;
  // Fewer when x's copy is large (~227 KiB of shared memory per SM, 1 KiB of it reserved per block).
  const int64_t by_smem = static_cast<int64_t>((227u << 10) / (smem + 1024));
  const int64_t per_sm = std::clamp<int64_t>(resident, 1, std::max<int64_t>(by_smem, 1));
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>(needed, 1, per_sm * sms));
  HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_enabled(), kernel, dim3(blocks), dim3(kThreads),
                                              smem, stream, g, x_f32, x_bf16, K, nm));
}

// The kernel's rows and inner dimension: 1-4 rows, K a multiple of 8 (16-byte chunks) up to gemv_max_k().
bool shape_supported(int64_t M, int64_t K) {
  return M >= 1 && M <= gemv_max_rows() && K >= 8 && K % 8 == 0 && K <= gemv_max_k();
}

// The launch for M rows (1-4), with or without the norm prologue.
template <bool kSwiglu>
void launch_rows(int64_t M, const GemvGroup& g, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t K,
                 const GemvNorm* norm, cudaStream_t stream) {
  const GemvNorm nm = norm != nullptr ? *norm : GemvNorm{};
  const auto go = [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    if (norm != nullptr)
      launch<R, kSwiglu, true>(g, nullptr, nullptr, K, nm, stream);
    else
      launch<R, kSwiglu, false>(g, x_f32, x_bf16, K, nm, stream);
  };
  switch (M) {
    case 1: return go(std::integral_constant<int, 1>{});
    case 2: return go(std::integral_constant<int, 2>{});
    case 3: return go(std::integral_constant<int, 3>{});
    default: return go(std::integral_constant<int, 4>{});
  }
}

}  // namespace

void gemv_norm_launches_cuda(const GemvNorm& n, int64_t M, int64_t K, cudaStream_t stream) {
  const RmsnormCudaParams p{M, K, n.eps};
  if (n.kind == GemvNorm::kPost) {
    HLM_CHECK(n.branch != nullptr && n.h_out != nullptr && n.h_out != n.h, "gemv_norm_launches_cuda: a post-norm "
              "needs its branch and an h_out apart from h");
    HLM_CUDA_CHECK(cudaMemcpyAsync(n.h_out, n.h, static_cast<size_t>(M * K) * sizeof(float), cudaMemcpyDeviceToDevice,
                                   stream));
    rmsnorm_post_residual_forward_cuda(n.norm_out, n.h_out, n.branch, n.scale, n.weight, p, stream);
  } else if (n.branch != nullptr) {
    rmsnorm_residual_into_forward_rounded_cuda(n.norm_out, n.norm_out16, n.h_out, n.h, n.branch, n.scale, n.weight, p,
                                               stream);
  } else {
    rmsnorm_forward_rounded_cuda(n.norm_out, n.norm_out16, n.h, n.weight, p, stream);
  }
}

bool gemv_norm_supported(int64_t M, int64_t K, const GemvNorm& n) {
  if (!shape_supported(M, K)) return false;
  if (K <= rmsnorm_cuda_warp_max_dim()) return false;  // the warp path's summation order
  if (n.h == nullptr || n.weight == nullptr || n.norm_out == nullptr) return false;
  const bool post = n.kind == GemvNorm::kPost;
  if (n.kind != GemvNorm::kPre && !post) return false;
  if (post && (n.branch == nullptr || n.h_out == nullptr || n.norm_out16 != nullptr)) return false;
  if (!post && n.branch != nullptr && n.h_out == nullptr) return false;
  if (n.h_out != nullptr && (n.h_out == n.h || n.h_out == n.branch)) return false;
  return true;
}

bool gemv_supported(int64_t M, int64_t K, const GemvOutput* outs, int n_outs) {
  if (!shape_supported(M, K)) return false;
  if (n_outs < 1 || n_outs > gemv_max_outputs()) return false;
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i].w == nullptr || outs[i].y == nullptr || outs[i].n < 1) return false;
    if (reinterpret_cast<uintptr_t>(outs[i].w) % 16 != 0) return false;
  }
  return true;
}

void gemv_bf16_cuda(const GemvOutput* outs, int n_outs, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M,
                    int64_t K, cudaStream_t stream, const GemvNorm* norm) {
  HLM_CHECK(gemv_supported(M, K, outs, n_outs), "gemv_bf16_cuda: unsupported shape M ", M, ", K ", K, ", ", n_outs,
            " outputs (gemv_supported)");
  HLM_CHECK(norm == nullptr || gemv_norm_supported(M, K, *norm), "gemv_bf16_cuda: unsupported norm prologue at M ",
            M, ", K ", K, " (gemv_norm_supported)");
  HLM_CHECK(norm != nullptr || x_f32 != nullptr || x_bf16 != nullptr, "gemv_bf16_cuda: no input");
  GemvGroup g{};
  g.outs = n_outs;
  g.first[0] = 0;
  for (int i = 0; i < n_outs; ++i) {
    g.w[i] = outs[i].w;
    g.bias[i] = outs[i].bias;
    g.y[i] = outs[i].y;
    g.n[i] = outs[i].n;
    g.first[i + 1] = g.first[i] + outs[i].n;
  }
  launch_rows<false>(M, g, x_f32, x_bf16, K, norm, stream);
}

bool gemv_swiglu_supported(int64_t M, int64_t K, const GemvOutput& gate, const GemvOutput& up) {
  if (!shape_supported(M, K)) return false;
  if (gate.n < 1 || up.n != gate.n || gate.n > (int64_t{1} << 29)) return false;  // 2n columns in an int
  for (const GemvOutput* o : {&gate, &up})
    if (o->w == nullptr || reinterpret_cast<uintptr_t>(o->w) % 16 != 0) return false;
  return true;
}

void gemv_bf16_swiglu_cuda(const GemvOutput& gate, const GemvOutput& up, float* h_f32, __nv_bfloat16* h_bf16,
                           const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M, int64_t K,
                           cudaStream_t stream, const GemvNorm* norm) {
  HLM_CHECK(gemv_swiglu_supported(M, K, gate, up), "gemv_bf16_swiglu_cuda: unsupported shape M ", M, ", K ", K,
            ", n ", gate.n, " and ", up.n, " (gemv_swiglu_supported)");
  HLM_CHECK(norm == nullptr || gemv_norm_supported(M, K, *norm),
            "gemv_bf16_swiglu_cuda: unsupported norm prologue at M ", M, ", K ", K, " (gemv_norm_supported)");
  HLM_CHECK(norm != nullptr || x_f32 != nullptr || x_bf16 != nullptr, "gemv_bf16_swiglu_cuda: no input");
  HLM_CHECK((h_f32 != nullptr) != (h_bf16 != nullptr), "gemv_bf16_swiglu_cuda: exactly one output (fp32 or bf16)");
  GemvGroup g{};
  g.outs = 2;
  g.first[0] = 0;
  const GemvOutput* outs[2] = {&gate, &up};
  for (int i = 0; i < 2; ++i) {
    g.w[i] = outs[i]->w;
    g.bias[i] = outs[i]->bias;
    g.y[i] = nullptr;
    g.n[i] = outs[i]->n;
    g.first[i + 1] = g.first[i] + outs[i]->n;
  }
  g.h_f32 = h_f32;
  g.h_bf16 = h_bf16;
  launch_rows<true>(M, g, x_f32, x_bf16, K, norm, stream);
}

}  // namespace hlm
