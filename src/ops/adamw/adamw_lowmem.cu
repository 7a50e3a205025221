// The low-memory AdamW step and block quantization on CUDA (contract: adamw_lowmem_cuda.h, arithmetic: adamw_lowmem.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "ops/adamw/adamw_lowmem_cuda.h"

namespace hlm {

namespace {

static_assert(kQ8Block == 256, "one thread per element of a quantization block");
constexpr int kThreads = static_cast<int>(kQ8Block);

// Global (not __constant__) memory: each block copies the tables into shared memory with coalesced loads; from
// constant memory that copy is serialized (the threads of a warp read 32 different addresses, which the constant
// cache serves one after another).
__device__ float c_code_m[256];
__device__ float c_mid_m[255];
__device__ float c_code_v[256];
__device__ float c_mid_v[255];

// The host tables, copied once per process (GPU 0 is the only device the trainer uses).
void upload_tables() {
  static std::once_flag once;
  std::call_once(once, [] {
    const Q8Codebook& m = q8_codebook_signed();
    const Q8Codebook& v = q8_codebook_unsigned();
    HLM_CUDA_CHECK(cudaMemcpyToSymbol(c_code_m, m.code.data(), sizeof(float) * 256));
    HLM_CUDA_CHECK(cudaMemcpyToSymbol(c_mid_m, m.mid.data(), sizeof(float) * 255));
    HLM_CUDA_CHECK(cudaMemcpyToSymbol(c_code_v, v.code.data(), sizeof(float) * 256));
    HLM_CUDA_CHECK(cudaMemcpyToSymbol(c_mid_v, v.mid.data(), sizeof(float) * 255));
  });
}

// Count of midpoints strictly below x over mid[0, used − 1) (q8_quantize_value).
__device__ __forceinline__ uint8_t quantize_value(const float* mid, int used, float x) {
  int lo = 0, hi = used - 1;
  while (lo < hi) {
    const int m = (lo + hi) >> 1;
    if (mid[m] < x)
      lo = m + 1;
    else
      hi = m;
  }
  return static_cast<uint8_t>(lo);
}

// Max of x over the block's threads (every thread gets it).
__device__ __forceinline__ float block_max(float x) {
  __shared__ float warp_max[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = x;
  __syncthreads();
  float a = warp_max[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) a = fmaxf(a, warp_max[w]);
  __syncthreads();  // warp_max is reused by the next call
  return a;
}

__device__ __forceinline__ uint8_t quantize_in_block(bool is_signed, float x, float absmax) {
  if (!(absmax > 0.0f)) return is_signed ? 127 : 0;
  const float r = __fdiv_rn(x, absmax);
  return is_signed ? quantize_value(c_mid_m, 255, r) : quantize_value(c_mid_v, 256, r);
}

// The count of midpoints strictly below x (quantize_value's answer) found from a guess: start at `guess` (any index
// in [0, used − 1]) and step down while the midpoint below is not < x, then up while the midpoint at the index is < x.
// The midpoints are sorted ascending, so this ends at the count for any guess (NaN x: every comparison is false, so
// it ends at 0, as the binary search does); a good guess makes it one or two shared-memory reads instead of eight
// dependent ones.
__device__ __forceinline__ uint8_t quantize_from_guess(const float* mid, int used, float x, int guess) {
  int i = guess;
  while (i > 0 && !(mid[i - 1] < x)) --i;
  while (i < used - 1 && mid[i] < x) ++i;
  return static_cast<uint8_t>(i);
}

// The index guess from the tables' power laws (adamw_lowmem.h): signed m codes sign(k)·(|k|/127)³ at index k + 127,
// unsigned v codes (i/255)⁴ at i. Fast approximate functions: only the starting point depends on them.
__device__ __forceinline__ int q8_guess_signed(float r) {
  const float a = fminf(fabsf(r), 1.0f);
  const float k = rintf(127.0f * __expf(__logf(a) * (1.0f / 3.0f)));  // a = 0: exp(−inf) = 0
  const float i = 127.0f + (r < 0.0f ? -k : k);
  return static_cast<int>(fminf(fmaxf(i, 0.0f), 254.0f));  // fmaxf(NaN, 0) = 0
}
__device__ __forceinline__ int q8_guess_unsigned(float r) {
  const float a = fminf(fmaxf(r, 0.0f), 1.0f);
  const float i = rintf(255.0f * sqrtf(sqrtf(a)));
  return static_cast<int>(fminf(fmaxf(i, 0.0f), 255.0f));
}

// The same over a table in shared memory (mid: the table's midpoints, `used` codes; zero_code when absmax is 0).
// guess = false: the plain binary search (HLM_ADAMW8_SEARCH=binary, for A/B timing; same bits).
__device__ __forceinline__ uint8_t quantize_in_block(const float* mid, int used, float x, float absmax,
                                                     uint8_t zero_code, bool guess) {
  if (!(absmax > 0.0f)) return zero_code;
  const float r = __fdiv_rn(x, absmax);
  if (!guess) return quantize_value(mid, used, r);
  return quantize_from_guess(mid, used, r, used == 255 ? q8_guess_signed(r) : q8_guess_unsigned(r));
}

__device__ __forceinline__ uint16_t bf16_stochastic(float x, uint32_t r) {
  const uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7F800000u) == 0x7F800000u) {
    if ((bits & 0x007FFFFFu) != 0) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
    return static_cast<uint16_t>(bits >> 16);
  }
  return static_cast<uint16_t>((bits + (r & 0xFFFFu)) >> 16);
}

__device__ __forceinline__ uint64_t splitmix64_device(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The max of x over the warp's lanes (every lane gets it). fmaxf ignores a NaN operand, as block_max does: the
// result is the max over the non-NaN values in any order, so the warp's and the block's reductions agree.
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Q8: 8-bit moments; Sr: the update rounded stochastically to bf16 (stored in param_bf16, or widened into param_f32
// with f32_holds_bf16); GradBf16: the gradient read from grad_bf16.
// One warp per quantization block: lane l updates elements l, l + 32, ..., l + 224 of the block (each load of the
// warp reads 32 consecutive elements), the block's absmax is a warp reduction, so no barrier is needed after the
// tables are copied. A persistent grid: each CUDA block copies the four code tables into shared memory once, then
// its warps walk quantization blocks (global warp index, + the grid's warp count, ...). Shared memory because every
// lane looks up a different code (dequantizing) and walks its own search (quantizing). Every element takes the
// same fp32 operations as adamw_lowmem_step_ref, so the bits are the reference's. (H200: one CUDA block of 256
// threads per quantization block, one element per thread and four barriers per block, took 7.17 ms for 2^29
// elements, 748 GB/s, 2026-12-02; docs/memory.md.)
template <bool Q8, bool Sr, bool GradBf16>
__global__ void __launch_bounds__(kThreads) adamw_lowmem_kernel(AdamWLowmemCudaTensor t, const float* scale_ptr,
                                                                AdamWLowmemStep s, bool guess) {
  constexpr int kPerLane = kQ8Block / 32;
  const bool scaled = scale_ptr != nullptr;
  const float scale = scaled ? *scale_ptr : 1.0f;
  if (!isfinite(scale)) return;  // uniform over the grid: no thread is left waiting at the barrier below
  __shared__ float code_m[256], mid_m[255], code_v[256], mid_v[255];
  if (Q8) {
    code_m[threadIdx.x] = c_code_m[threadIdx.x];
    code_v[threadIdx.x] = c_code_v[threadIdx.x];
    if (threadIdx.x < 255) {
      mid_m[threadIdx.x] = c_mid_m[threadIdx.x];
      mid_v[threadIdx.x] = c_mid_v[threadIdx.x];
    }
    __syncthreads();
  }
  const int64_t n_blocks = (t.n + kQ8Block - 1) / kQ8Block;  // q8_blocks (host only)
  const bool in_bf16 = t.param_bf16 != nullptr;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5); b < n_blocks;
       b += warps) {
    const int64_t base = b * kQ8Block + lane;
    // Every load of the block first (independent, so they are in flight together), then the arithmetic.
    float g0[kPerLane] = {}, m0[kPerLane] = {}, v0[kPerLane] = {}, p0[kPerLane] = {};
    const float am0 = Q8 ? t.absmax_m[b] : 0.0f, av0 = Q8 ? t.absmax_v[b] : 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = base + 32 * k;
      if (i < t.n) {
        g0[k] = GradBf16 ? __uint_as_float(static_cast<uint32_t>(t.grad_bf16[i]) << 16) : t.grad[i];
        m0[k] = Q8 ? __fmul_rn(code_m[t.q_m[i]], am0) : t.exp_avg[i];
        v0[k] = Q8 ? __fmul_rn(code_v[t.q_v[i]], av0) : t.exp_avg_sq[i];
        p0[k] = in_bf16 ? __uint_as_float(static_cast<uint32_t>(t.param_bf16[i]) << 16) : t.param_f32[i];
      }
    }
    float m[kPerLane], v[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = base + 32 * k;
      m[k] = 0.0f;
      v[k] = 0.0f;
      if (i >= t.n) continue;
      const float g = scaled ? __fmul_rn(g0[k], scale) : g0[k];
      m[k] = __fadd_rn(__fmul_rn(s.beta1, m0[k]), __fmul_rn(s.one_minus_beta1, g));
      v[k] = __fadd_rn(__fmul_rn(s.beta2, v0[k]), __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v[k]), s.bias_correction2_sqrt), s.eps);
      const float p = __fsub_rn(__fmul_rn(p0[k], s.decay), __fdiv_rn(__fmul_rn(s.step_size, m[k]), denom));
      if (Sr) {
        const uint16_t r =
            bf16_stochastic(p, static_cast<uint32_t>(splitmix64_device(s.sr_base + static_cast<uint64_t>(i)) >> 48));
        if (in_bf16)
          t.param_bf16[i] = r;
        else
          t.param_f32[i] = __uint_as_float(static_cast<uint32_t>(r) << 16);
      } else {
        t.param_f32[i] = p;
      }
      if (!Q8) {
        t.exp_avg[i] = m[k];
        t.exp_avg_sq[i] = v[k];
      }
    }
    if (Q8) {  // every lane takes part in the reductions
      // Over |m|, |v| of the live elements and 0 for the others, as block_max sees them: started from element 0's
      // value (not from 0), so that a block whose values are all NaN gets a NaN absmax, as there.
      float am = fabsf(m[0]), av = fabsf(v[0]);
#pragma unroll
      for (int k = 1; k < kPerLane; ++k) {
        am = fmaxf(am, fabsf(m[k]));
        av = fmaxf(av, fabsf(v[k]));
      }
      am = warp_max(am);
      av = warp_max(av);
      if (lane == 0) {
        t.absmax_m[b] = am;
        t.absmax_v[b] = av;
      }
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t i = base + 32 * k;
        if (i >= t.n) continue;
        t.q_m[i] = quantize_in_block(mid_m, 255, m[k], am, 127, guess);
        t.q_v[i] = quantize_in_block(mid_v, 256, v[k], av, 0, guess);
      }
    }
  }
}

__global__ void q8_quantize_kernel(bool is_signed, const float* x, int64_t n, uint8_t* q, float* absmax) {
  const int64_t b = blockIdx.x;
  const int64_t i = b * kQ8Block + threadIdx.x;
  const bool live = i < n;
  const float xi = live ? x[i] : 0.0f;
  const float a = block_max(fabsf(xi));
  if (threadIdx.x == 0) absmax[b] = a;
  if (live) q[i] = quantize_in_block(is_signed, xi, a);
}

__global__ void q8_dequantize_kernel(bool is_signed, const uint8_t* q, const float* absmax, int64_t n, float* x) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kQ8Block + threadIdx.x;
  if (i >= n) return;
  x[i] = __fmul_rn(is_signed ? c_code_m[q[i]] : c_code_v[q[i]], absmax[blockIdx.x]);
}

unsigned blocks_for(int64_t n) {
  const int64_t b = q8_blocks(n);
  HLM_CHECK(b <= 0x7FFFFFFF, "adamw_lowmem: ", n, " elements exceed one grid");
  return static_cast<unsigned>(b);
}

}  // namespace

void adamw_lowmem_step_cuda(const AdamWLowmemCudaTensor& t, const float* scale, const AdamWLowmemStep& s,
                            cudaStream_t stream) {
  HLM_CHECK(t.n >= 0, "adamw_lowmem_step_cuda: negative size ", t.n);
  if (t.n == 0) return;
  const bool bf16 = t.param_bf16 != nullptr, q8 = t.q_m != nullptr, g16 = t.grad_bf16 != nullptr;
  HLM_CHECK(bf16 != (t.param_f32 != nullptr) && (t.grad != nullptr) != g16 && (!t.f32_holds_bf16 || !bf16) &&
                (q8 ? (t.q_v && t.absmax_m && t.absmax_v) : (t.exp_avg && t.exp_avg_sq)),
            "adamw_lowmem_step_cuda: incomplete tensor storage");
  upload_tables();
  // Enough resident blocks to fill the device (8 of 256 threads per multiprocessor), at most one warp per
  // quantization block.
  static const int64_t resident = [] {
    int device = 0, sms = 0;
    HLM_CUDA_CHECK(cudaGetDevice(&device));
    HLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return static_cast<int64_t>(std::max(sms, 1)) * 8;
  }();
  const int64_t warps_per_block = kThreads / 32;
  const unsigned grid = static_cast<unsigned>(
      std::min<int64_t>((static_cast<int64_t>(blocks_for(t.n)) + warps_per_block - 1) / warps_per_block, resident));
  const bool sr = bf16 || t.f32_holds_bf16;
  static const bool guess = [] {
    const char* e = std::getenv("HLM_ADAMW8_SEARCH");
    return e == nullptr || std::strcmp(e, "binary") != 0;
  }();
  // The eight instantiations, chosen once per launch (the flags are uniform over the tensor).
  const auto launch = [&](auto q8_c, auto sr_c, auto g16_c) {
    adamw_lowmem_kernel<decltype(q8_c)::value, decltype(sr_c)::value, decltype(g16_c)::value>
        <<<grid, kThreads, 0, stream>>>(t, scale, s, guess);
  };
  using T = std::true_type;
  using F = std::false_type;
  if (q8) {
    if (sr)
      g16 ? launch(T{}, T{}, T{}) : launch(T{}, T{}, F{});
    else
      g16 ? launch(T{}, F{}, T{}) : launch(T{}, F{}, F{});
  } else {
    if (sr)
      g16 ? launch(F{}, T{}, T{}) : launch(F{}, T{}, F{});
    else
      g16 ? launch(F{}, F{}, T{}) : launch(F{}, F{}, F{});
  }
  HLM_CUDA_CHECK_LAUNCH();
}

void q8_quantize_cuda(bool is_signed, const float* x, int64_t n, uint8_t* q, float* absmax, cudaStream_t stream) {
  if (n <= 0) return;
  upload_tables();
  q8_quantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(is_signed, x, n, q, absmax);
  HLM_CUDA_CHECK_LAUNCH();
}

void q8_dequantize_cuda(bool is_signed, const uint8_t* q, const float* absmax, int64_t n, float* x,
                        cudaStream_t stream) {
  if (n <= 0) return;
  upload_tables();
  q8_dequantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(is_signed, q, absmax, n, x);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
