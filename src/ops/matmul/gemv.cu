// Small-row bf16 linear products (contract: gemv_cuda.h). One warp per output column of the group (columns of the
// outputs in order), a grid of whole blocks striding over the columns; x [M, K] staged once per block in shared
// memory as bf16 (16-byte loads when aligned) after each warp has issued its first weight loads. gemv_pipe_kernel
// (the default) keeps two rounds of loads in flight per lane from start to end, with a grid of the resident blocks
// only; gemv_kernel (HLM_GEMV_KERNEL=v1) waits for each round before the next and launches 8 blocks per SM.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/matmul/gemv_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

struct GemvGroup {
  const __nv_bfloat16* w[gemv_max_outputs()];
  const float* bias[gemv_max_outputs()];
  float* y[gemv_max_outputs()];
  int64_t n[gemv_max_outputs()];
  int64_t first[gemv_max_outputs() + 1];  // first column of each output in the group's numbering; first[outs] = total
  int outs;
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

// One pass of kUnroll 16-byte loads of a weight row from chunk c0 on (lanes 32 apart); zeros past the row.
__device__ __forceinline__ void load_round(uint4 (&wv)[kUnroll], const uint4* wr, int64_t c0, int64_t chunks) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t c = c0 + u * 32;
    wv[u] = c < chunks ? __ldcs(wr + c) : make_uint4(0, 0, 0, 0);
  }
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

template <int M>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvGroup g, const float* x_f32, const __nv_bfloat16* x_bf16,
                                                        int64_t K) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem_raw);  // [M, K] bf16 bits
  const int lane = threadIdx.x % 32;
  const int64_t chunks = K / 8;  // 8 bf16 = 16 bytes
  const int64_t columns = g.first[g.outs];
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t col_step = static_cast<int64_t>(gridDim.x) * kWarps;

  // The next kernel, if launched as a programmatic dependent (another GEMV), may start taking free SMs now.
  cuda::dependent_launch_trigger();
  // The warp's first weight loads go out before x is staged, so the staging's latency overlaps the stream; launched
  // as a programmatic dependent, they also overlap the end of the kernel that writes x (weights are not written
  // during inference: dependent_launch.cuh's contract), and x is read only after the wait.
  uint4 first[kUnroll];
  if (col0 < columns) {
    const int o = output_of(g, col0);
    load_round(first, reinterpret_cast<const uint4*>(g.w[o] + (col0 - g.first[o]) * K), lane, chunks);
  }
  cuda::dependent_launch_wait();

  stage_x<M>(xs, x_f32, x_bf16, K);
  __syncthreads();

  bool prefetched = true;
  for (int64_t col = col0; col < columns; col += col_step) {
    const int o = output_of(g, col);
    const int64_t c_local = col - g.first[o];
    const uint4* wr = reinterpret_cast<const uint4*>(g.w[o] + c_local * K);
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
      uint4 wv[kUnroll];
      if (prefetched) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = first[u];
        prefetched = false;
      } else {
        load_round(wv, wr, c0, chunks);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        if (c < chunks) {
          float wf[8];
          widen8(wf, wv[u]);
#pragma unroll
          for (int m = 0; m < M; ++m) dot8(acc[m], wf, reinterpret_cast<const uint4*>(xs + m * K)[c]);
        }
      }
    }
    prefetched = false;
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
    if (lane == 0) {
      const float b = g.bias[o] != nullptr ? g.bias[o][c_local] : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m) g.y[o][m * g.n[o] + c_local] = acc[m] + b;
    }
  }
}

// The pipelined form: a warp's work is one sequence of rounds (its columns col0, col0 + col_step, ..., each
// `rounds` rounds of U loads per lane), two rounds' loads in flight at all times: round i + 1's are issued before
// round i is consumed, across column boundaries, and both of the first two rounds go out before the wait for x.
// The chunks each lane sums, and their order (l, l + 32, l + 64, ...), are gemv_kernel's: the same bits.
template <int M, int U>  // U 4: 4 blocks of 256 resident per SM (64 registers)
__global__ void __launch_bounds__(kThreads, 16 / U) gemv_pipe_kernel(GemvGroup g, const float* x_f32,
                                                             const __nv_bfloat16* x_bf16, int64_t K) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem_raw);  // [M, K] bf16 bits
  const int lane = threadIdx.x % 32;
  // 32-bit indices: columns (≤ 6 outputs of < 2^31 / 8 rows) and chunks (K ≤ gemv_max_k()) fit, fewer registers.
  const int chunks = static_cast<int>(K / 8);
  const int rounds = (chunks + 32 * U - 1) / (32 * U);
  const int columns = static_cast<int>(g.first[g.outs]);
  const int col_step = static_cast<int>(gridDim.x) * kWarps;

  // A round: (column, round index r, the column's weight row).
  struct Round {
    int col, r;
    const uint4* row;
  };
  const auto row_of = [&](int col) -> const uint4* {
    const int o = output_of(g, col);
    return reinterpret_cast<const uint4*>(g.w[o] + (col - g.first[o]) * K);
  };
  const auto next_of = [&](const Round& x) -> Round {
    if (x.r + 1 < rounds) return {x.col, x.r + 1, x.row};
    const int col = x.col + col_step;
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
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
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
    if (lane == 0) {
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
  const int col0 = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x / 32);
  Round a{col0, 0, col0 < columns ? row_of(col0) : nullptr};
  Round b = next_of(a);
  uint4 wa[U], wb[U];
  load(wa, a);  // weights are not written during inference: loaded before the wait (dependent_launch.cuh)
  load(wb, b);
  cuda::dependent_launch_wait();
  stage_x<M>(xs, x_f32, x_bf16, K);
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

using GemvKernel = void (*)(GemvGroup, const float*, const __nv_bfloat16*, int64_t);

// The kernel form, chosen once per process: the pipelined one, or gemv_kernel with HLM_GEMV_KERNEL=v1 (A/B runs).
// Session 28 (H200, bench_cuda_kernels gemv, same call): the pipelined form 1-14 % faster per shape (7B o_proj
// 11.64 → 10.75 µs, 4B down 19.47 → 17.64 µs), batch-1 decode 0.06-0.19 ms per step faster; the same with a 256-byte
// L2 prefetch on each load, or with 8 loads per round (2 blocks per SM), was slower than either.
enum class GemvForm { kV1, kPipe };
GemvForm gemv_form() {
  static const GemvForm form = [] {
    const char* e = std::getenv("HLM_GEMV_KERNEL");
    return e != nullptr && std::string(e) == "v1" ? GemvForm::kV1 : GemvForm::kPipe;
  }();
  return form;
}

template <int M>
GemvKernel kernel_of(GemvForm form) {
  return form == GemvForm::kV1 ? gemv_kernel<M> : gemv_pipe_kernel<M, 4>;
}

template <int M>
void launch(const GemvGroup& g, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t K, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(M) * static_cast<size_t>(K) * sizeof(uint16_t);
  const GemvForm form = gemv_form();
  const GemvKernel kernel = kernel_of<M>(form);
  // Once per process: the opt-in to M · gemv_max_k() · 2 bytes of shared memory, and the blocks of 256 threads that
  // registers and threads let reside per SM (4 for the pipelined form).
  static const int resident = [&] {
    HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(M * gemv_max_k() * sizeof(uint16_t))));
    int n = 0;
    HLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0));
    return std::max(n, 1);
  }();
  static const int sms = sm_count();
  const int64_t needed = (g.first[g.outs] + kWarps - 1) / kWarps;
  // Fewer when x's copy is large (~227 KiB of shared memory per SM, 1 KiB of it reserved per block); the former
  // kernel's grid took 8 blocks per SM (by threads) whatever its registers allowed.
  const int64_t by_smem = static_cast<int64_t>((227u << 10) / (smem + 1024));
  const int64_t per_sm = std::clamp<int64_t>(form == GemvForm::kV1 ? 8 : resident, 1, std::max<int64_t>(by_smem, 1));
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>(needed, 1, per_sm * sms));
  HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_enabled(), kernel, dim3(blocks), dim3(kThreads),
                                              smem, stream, g, x_f32, x_bf16, K));
}

}  // namespace

bool gemv_supported(int64_t M, int64_t K, const GemvOutput* outs, int n_outs) {
  if (M < 1 || M > gemv_max_rows() || K < 8 || K % 8 != 0 || K > gemv_max_k()) return false;
  if (n_outs < 1 || n_outs > gemv_max_outputs()) return false;
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i].w == nullptr || outs[i].y == nullptr || outs[i].n < 1) return false;
    if (reinterpret_cast<uintptr_t>(outs[i].w) % 16 != 0) return false;
  }
  return true;
}

void gemv_bf16_cuda(const GemvOutput* outs, int n_outs, const float* x_f32, const __nv_bfloat16* x_bf16, int64_t M,
                    int64_t K, cudaStream_t stream) {
  HLM_CHECK(gemv_supported(M, K, outs, n_outs), "gemv_bf16_cuda: unsupported shape M ", M, ", K ", K, ", ", n_outs,
            " outputs (gemv_supported)");
  HLM_CHECK(x_f32 != nullptr || x_bf16 != nullptr, "gemv_bf16_cuda: no input");
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
  switch (M) {
    case 1: return launch<1>(g, x_f32, x_bf16, K, stream);
    case 2: return launch<2>(g, x_f32, x_bf16, K, stream);
    case 3: return launch<3>(g, x_f32, x_bf16, K, stream);
    default: return launch<4>(g, x_f32, x_bf16, K, stream);
  }
}

}  // namespace hlm
