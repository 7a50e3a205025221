// The low-memory AdamW step and block quantization on CUDA (contract: adamw_lowmem_cuda.h, arithmetic: adamw_lowmem.h).
#include <algorithm>
#include <cstdint>
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

static_assert(kQ8Block == 256, "one thread per element of a quantization block; 8 elements per lane of a warp");
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

// The midpoints of a table between two sentinels, in shared memory: ext[0] = −inf, ext[1 + j] = mid[j] for
// j < used − 1, ext[used] = +inf (257 entries for the unsigned table, 256 used of them for the signed one).
// The count of midpoints strictly below x (quantize_value's answer) found from a guess: start at `guess` (any index
// in [0, used − 1]) and step down while the midpoint below is not < x, then up while the midpoint at the index is
// < x. The midpoints are sorted ascending, so this ends at the count for any guess. x must not be NaN and lies in
// [−2, 1] (quantize_in_block maps NaN to −2, whose count is 0, as NaN's is: every comparison false), so the
// sentinels stop both walks without bounds checks. A right guess (ext[guess] < x ≤ ext[guess + 1]: ~99.6 % of the
// lanes on Adam-like moments, a CPU simulation) costs two shared-memory reads issued together and one branch,
// instead of eight dependent reads.
__device__ __forceinline__ uint8_t quantize_from_guess(const float* ext, float x, int guess) {
  int i = guess;
  const float lo = ext[i], hi = ext[i + 1];  // both read, whatever the first comparison gives
  if (!(lo < x) || hi < x) {
    while (!(ext[i] < x)) --i;   // ext[i] = mid[i − 1]; ext[0] = −inf < x
    while (ext[i + 1] < x) ++i;  // ext[i + 1] = mid[i]; ext[used] = +inf
  }
  return static_cast<uint8_t>(i);
}

// Fast approximate functions (flush-to-zero; MUFU): only the search's starting point depends on them.
__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rsqrt_approx(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Rounding to an integer by the float adder instead of a conversion (F2I runs at a quarter of the FP32 rate): for
// y ∈ [−0.5, 2^22), RN(y + 1.5·2^23) is the float 1.5·2^23 + rint(y) (the binade's ulp is 1), whose bits less the
// magic's are rint(y). Only the search's starting point is rounded this way, so ties and the ±0.5 ends do not matter.
constexpr float kRoundMagic = 12582912.0f;  // 1.5 · 2^23, bits 0x4B400000
__device__ __forceinline__ int round_small_index(float y_plus_magic) {
  return static_cast<int>(__float_as_uint(y_plus_magic) - 0x4B400000u);
}

// The index guess from the tables' power laws (adamw_lowmem.h), for r ∈ [−2, 1]: signed m codes sign(k)·(|k|/127)³
// at index k + 127, unsigned v codes (i/255)⁴ at i. Signed: k = 2^(log2(a)/3 + log2 127) for a = min(|r|, 1) ≤ 1,
// so k ≤ 127 up to the approximations' few-ulp errors and the rounded index lies in [0, 254]; a = 0: lg2 = −inf,
// ex2(−inf) = 0. Unsigned: rsqrt(rsqrt(a)) = a^(1/4) ≤ 1 (+ a few ulps) for a = max(r, 0) ≤ 1, so the index lies in
// [0, 255]; a = 0: rsqrt(+0) = +inf, rsqrt(+inf) = +0.
__device__ __forceinline__ int q8_guess_signed(float r) {
  const float k = ex2_approx(fmaf(lg2_approx(fminf(fabsf(r), 1.0f)), 1.0f / 3.0f, 6.98868468677f));  // log2 127
  return round_small_index(__fadd_rn(copysignf(k, r), kRoundMagic + 127.0f));
}
__device__ __forceinline__ int q8_guess_unsigned(float r) {
  return round_small_index(__fmaf_rn(255.0f, rsqrt_approx(rsqrt_approx(fmaxf(r, 0.0f))), kRoundMagic));
}

// The reciprocal quantize_in_block multiplies by, once per block: RN(1/absmax) when absmax ∈ [2^-125, 2^125] (so
// that it is a normal number), else 0 (the block's codes then come from divisions only).
__device__ __forceinline__ float q8_recip(float absmax) {
  return absmax >= 0x1p-125f && absmax <= 0x1p125f ? __frcp_rn(absmax) : 0.0f;
}

// The code of x in a block of scale absmax, over a table in shared memory (ext: its midpoints between sentinels,
// `used` codes; zero_code when absmax is 0): the count of midpoints below q = RN(x / absmax), the reference's one
// rounded division (q ∈ [−1, 1] as absmax = max |x|, ±0 or NaN when absmax = +inf, NaN when x is; NaN is replaced
// by −2, whose count is 0 as NaN's is).
// Fast path (recip = q8_recip(absmax) ≠ 0): the count of qa = RN(x · recip) instead, kept when both midpoints
// around qa (lo < qa ≤ hi, adjacent) are farther than tol = 2^-20·|qa| from it; else q is divided out and the walk
// goes on from there. Why that is q's count (u = 2^-24): recip = (1/a)(1 + e1), qa = x·recip·(1 + e2) and
// q = (x/a)(1 + e3) with |e_k| ≤ u while x·recip and x/a are normal, so |qa − q| ≤ 3.02u·|qa| < 2^-22·|qa|. The
// computed differences exceeding tol (an exact power-of-two product for |qa| ≥ 2^-100) imply the exact ones do
// (rounding is monotonic and tol representable), so lo < q < hi: the same count. For |qa| < 2^-100 (also the
// subnormal cases, absolute errors ≤ 2^-149) q and qa are both far closer to 0 than any midpoint (|mid| > 1e-10),
// so again the same count. NaN x: qa = −2 and the sentinels pass the test: count 0. guess = false: the division
// and the plain binary search (HLM_ADAMW8_SEARCH=binary, for A/B timing; same bits).
__device__ __forceinline__ uint8_t quantize_in_block(const float* ext, int used, float x, float absmax, float recip,
                                                     uint8_t zero_code, bool guess) {
  if (!(absmax > 0.0f)) return zero_code;
  int start = -1;
  if (guess && recip != 0.0f) {
    const float qa = fmaxf(__fmul_rn(x, recip), -2.0f);  // fmaxf(NaN, −2) = −2
    start = used == 255 ? q8_guess_signed(qa) : q8_guess_unsigned(qa);
    const float lo = ext[start], hi = ext[start + 1], tol = __fmul_rn(fabsf(qa), 0x1p-20f);
    if (__fsub_rn(qa, lo) > tol && __fsub_rn(hi, qa) > tol) return static_cast<uint8_t>(start);
  }
  const float r = fmaxf(__fdiv_rn(x, absmax), -2.0f);
  if (!guess) return quantize_value(ext + 1, used, r);
  if (start < 0) start = used == 255 ? q8_guess_signed(r) : q8_guess_unsigned(r);
  return quantize_from_guess(ext, r, start);
}

// Without branches (selects): NaN keeps its sign and top payload with the quiet bit set, ±Inf stays, every other
// value (subnormals included) adds the 16 random bits below its kept half and drops them.
__device__ __forceinline__ uint16_t bf16_stochastic(float x, uint32_t r) {
  const uint32_t bits = __float_as_uint(x);
  const bool special = (bits & 0x7F800000u) == 0x7F800000u;
  const uint32_t quiet = special && (bits & 0x007FFFFFu) != 0 ? 0x0040u : 0u;
  return static_cast<uint16_t>(((bits + (special ? 0u : (r & 0xFFFFu))) >> 16) | quiet);
}

__device__ __forceinline__ uint64_t splitmix64_device(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// The rounding's 16 random bits of the element at tensor index j (adamw_sr_bits): piece j mod 4, from the low end,
// of the hash of its group of four, splitmix64(sr_base + ⌊j / 4⌋).
__device__ __forceinline__ uint32_t sr_piece(uint64_t group_hash, uint64_t j) {
  return static_cast<uint32_t>(group_hash >> (16 * (j & 3))) & 0xFFFFu;
}
__device__ __forceinline__ uint32_t sr_bits(uint64_t sr_base, uint64_t j) {
  return sr_piece(splitmix64_device(sr_base + (j >> 2)), j);
}

// The max of x ≥ 0 (not NaN, not −0) over the warp's lanes (every lane gets it): such floats order as their bit
// patterns do (+inf included), so one integer max reduction (REDUX) gives it exactly.
__device__ __forceinline__ float warp_max_nonneg(float x) {
  return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(x)));
}

// The quantization block b's absmax of m and of v over the warp's lanes (each lane's N values), stored by lane 0 and
// returned to every lane. Started from +0 as the reference's std::max is (a NaN is never taken: fmaxf ignores a NaN
// operand, std::max(a, NaN) keeps a; a block of NaNs gets 0), so each lane's max is ≥ +0 and not NaN, as
// warp_max_nonneg needs.
template <int N>
__device__ __forceinline__ void block_absmax(const AdamWLowmemCudaTensor& t, int64_t b, int lane, const float (&m)[N],
                                             const float (&v)[N], float& am, float& av) {
  am = 0.0f;
  av = 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    am = fmaxf(am, fabsf(m[k]));
    av = fmaxf(av, fabsf(v[k]));
  }
  am = warp_max_nonneg(am);
  av = warp_max_nonneg(av);
  if (lane == 0) {
    t.absmax_m[b] = am;
    t.absmax_v[b] = av;
  }
}

// One element's update (adamw_lowmem.h; every operation rounded once, in the reference's order): from the gradient
// g0, the moments m0, v0 and the parameter p0, the new m, v and the new parameter before its storage rounding.
__device__ __forceinline__ float update_element(float g0, float m0, float v0, float p0, bool scaled, float scale,
                                               const AdamWLowmemStep& s, float& m, float& v) {
  const float g = scaled ? __fmul_rn(g0, scale) : g0;
  m = __fadd_rn(__fmul_rn(s.beta1, m0), __fmul_rn(s.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(s.beta2, v0), __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  return __fsub_rn(__fmul_rn(p0, s.decay), __fdiv_rn(__fmul_rn(s.step_size, m), denom));
}

__device__ __forceinline__ float widen_bf16(uint32_t h) { return __uint_as_float(h << 16); }

// Eight consecutive values from 16-byte (bf16, f32 pairs) or 8-byte (codes) aligned addresses.
__device__ __forceinline__ void load8(const uint16_t* p, float (&x)[8]) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = __uint_as_float(u[k] << 16);
    x[2 * k + 1] = __uint_as_float(u[k] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ void load8(const float* p, float (&x)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ void store8(float* p, const float (&x)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
}
// The low bytes of q[0..7] as 8 consecutive bytes (byte permutes: 3 per word instead of 3 shifts and 3 ors).
__device__ __forceinline__ uint2 pack_bytes8(const uint32_t (&q)[8]) {
  const auto word = [](uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
  };
  return make_uint2(word(q[0], q[1], q[2], q[3]), word(q[4], q[5], q[6], q[7]));
}
// Byte k (0..7) of a code pair as an index (one byte permute).
__device__ __forceinline__ uint32_t code_byte(const uint2 w, int k) {
  return __byte_perm(k < 4 ? w.x : w.y, 0u, 0x4440u | static_cast<uint32_t>(k & 3));
}

// The codes of a lane's 8 values x[k] in a block of scale absmax (recip = q8_recip(absmax)): quantize_in_block's
// codes with the guessed start, in a form with fewer instructions per value. Both conditions that decide a block's
// path (absmax > 0, recip ≠ 0) are the same for the warp's lanes, so they are tested once; each value's guess and
// its two neighbouring midpoints are checked without branches (select), and only the values whose check failed
// (~0.4 %, or all when recip is 0) take the division and the walk from its own guess (the walk's answer does not
// depend on where it starts).
template <bool Signed>
__device__ __forceinline__ void quantize8(const float* ext, const float (&x)[8], float absmax, float recip,
                                          uint32_t (&q)[8]) {
  if (!(absmax > 0.0f)) {
#pragma unroll
    for (int k = 0; k < 8; ++k) q[k] = Signed ? 127u : 0u;
    return;
  }
  uint32_t redo = 0xFFu;  // bit k: value k needs the division
  if (recip != 0.0f) {
    redo = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float qa = fmaxf(__fmul_rn(x[k], recip), -2.0f);  // fmaxf(NaN, −2) = −2
      const int c = Signed ? q8_guess_signed(qa) : q8_guess_unsigned(qa);
      const float lo = ext[c], hi = ext[c + 1], tol = __fmul_rn(fabsf(qa), 0x1p-20f);
      q[k] = static_cast<uint32_t>(c);
      redo |= (__fsub_rn(qa, lo) > tol && __fsub_rn(hi, qa) > tol) ? 0u : 1u << k;
    }
  }
  if (redo != 0) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (((redo >> k) & 1u) == 0) continue;
      const float r = fmaxf(__fdiv_rn(x[k], absmax), -2.0f);
      q[k] = quantize_from_guess(ext, r, Signed ? q8_guess_signed(r) : q8_guess_unsigned(r));
    }
  }
}

// The kernel's shared memory: the code tables and the midpoints between sentinels (quantize_from_guess).
struct Q8Tables {
  float code_m[256], code_v[256], ext_m[257], ext_v[257];
};

// Vector path of one full quantization block b (every row's base aligned: `vec` in adamw_lowmem_step_cuda): lane l
// updates the 8 consecutive elements 256b + 8l … 256b + 8l + 7, with one 16-byte load or store per bf16 row (two
// per f32 row) and one 8-byte load or store per code row, and no bounds checks. The same element operations,
// absmax reduction (a max: any order gives the same value) and codes as the scalar path.
template <bool Q8, bool Sr, bool GradBf16>
__device__ __forceinline__ void update_block_vec(const AdamWLowmemCudaTensor& t, const Q8Tables& tab, bool scaled,
                                                 float scale, const AdamWLowmemStep& s, bool guess, int64_t b,
                                                 int lane) {
  const int64_t e = b * kQ8Block + 8 * lane;  // this lane's first element
  const bool in_bf16 = t.param_bf16 != nullptr;
  float g0[8], m0[8], v0[8], p0[8];
  if (GradBf16)
    load8(t.grad_bf16 + e, g0);
  else
    load8(t.grad + e, g0);
  if (in_bf16)
    load8(t.param_bf16 + e, p0);
  else
    load8(t.param_f32 + e, p0);
  if (Q8) {
    const uint2 qm = *reinterpret_cast<const uint2*>(t.q_m + e), qv = *reinterpret_cast<const uint2*>(t.q_v + e);
    const float am0 = t.absmax_m[b], av0 = t.absmax_v[b];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      m0[k] = __fmul_rn(tab.code_m[code_byte(qm, k)], am0);
      v0[k] = __fmul_rn(tab.code_v[code_byte(qv, k)], av0);
    }
  } else {
    load8(t.exp_avg + e, m0);
    load8(t.exp_avg_sq + e, v0);
  }
  float m[8], v[8], p[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) p[k] = update_element(g0[k], m0[k], v0[k], p0[k], scaled, scale, s, m[k], v[k]);
  if (Sr) {
    // The lane's 8 elements are two whole groups of four (e and sr_first are multiples of 4 on this path): two hashes.
    const uint64_t group = (s.sr_first + static_cast<uint64_t>(e)) >> 2;
    const uint64_t r03 = splitmix64_device(s.sr_base + group), r47 = splitmix64_device(s.sr_base + group + 1);
    uint32_t h[8];
#pragma unroll
    for (int k = 0; k < 8; ++k)
      h[k] = bf16_stochastic(p[k], sr_piece(k < 4 ? r03 : r47, static_cast<uint64_t>(k)));
    if (in_bf16) {
      *reinterpret_cast<uint4*>(t.param_bf16 + e) =
          make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
    } else {
      float w[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = widen_bf16(h[k]);
      store8(t.param_f32 + e, w);
    }
  } else {
    store8(t.param_f32 + e, p);
  }
  if (!Q8) {
    store8(t.exp_avg + e, m);
    store8(t.exp_avg_sq + e, v);
    return;
  }
  float am = 0.0f, av = 0.0f;
  block_absmax(t, b, lane, m, v, am, av);
  const float rm = q8_recip(am), rv = q8_recip(av);
  uint32_t qm[8], qv[8];
  if (guess) {
    quantize8<true>(tab.ext_m, m, am, rm, qm);
    quantize8<false>(tab.ext_v, v, av, rv, qv);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      qm[k] = quantize_in_block(tab.ext_m, 255, m[k], am, rm, 127, false);
      qv[k] = quantize_in_block(tab.ext_v, 256, v[k], av, rv, 0, false);
    }
  }
  *reinterpret_cast<uint2*>(t.q_m + e) = pack_bytes8(qm);
  *reinterpret_cast<uint2*>(t.q_v + e) = pack_bytes8(qv);
}

// Scalar path of one quantization block (the tensor's last block when it is short, or every block when the vector
// path is off): lane l updates elements l, l + 32, ..., l + 224 of the block, each with its own bounds check.
template <bool Q8, bool Sr, bool GradBf16>
__device__ __forceinline__ void update_block_scalar(const AdamWLowmemCudaTensor& t, const Q8Tables& tab, bool scaled,
                                                    float scale, const AdamWLowmemStep& s, bool guess, int64_t b,
                                                    int lane) {
  constexpr int kPerLane = kQ8Block / 32;
  const bool in_bf16 = t.param_bf16 != nullptr;
  const int64_t base = b * kQ8Block + lane;
  // Every load of the block first (independent, so they are in flight together), then the arithmetic.
  float g0[kPerLane] = {}, m0[kPerLane] = {}, v0[kPerLane] = {}, p0[kPerLane] = {};
  const float am0 = Q8 ? t.absmax_m[b] : 0.0f, av0 = Q8 ? t.absmax_v[b] : 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = base + 32 * k;
    if (i < t.n) {
      g0[k] = GradBf16 ? widen_bf16(t.grad_bf16[i]) : t.grad[i];
      m0[k] = Q8 ? __fmul_rn(tab.code_m[t.q_m[i]], am0) : t.exp_avg[i];
      v0[k] = Q8 ? __fmul_rn(tab.code_v[t.q_v[i]], av0) : t.exp_avg_sq[i];
      p0[k] = in_bf16 ? widen_bf16(t.param_bf16[i]) : t.param_f32[i];
    }
  }
  float m[kPerLane], v[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = base + 32 * k;
    m[k] = 0.0f;
    v[k] = 0.0f;
    if (i >= t.n) continue;
    const float p = update_element(g0[k], m0[k], v0[k], p0[k], scaled, scale, s, m[k], v[k]);
    if (Sr) {
      const uint16_t r = bf16_stochastic(p, sr_bits(s.sr_base, s.sr_first + static_cast<uint64_t>(i)));
      if (in_bf16)
        t.param_bf16[i] = r;
      else
        t.param_f32[i] = widen_bf16(r);
    } else {
      t.param_f32[i] = p;
    }
    if (!Q8) {
      t.exp_avg[i] = m[k];
      t.exp_avg_sq[i] = v[k];
    }
  }
  if (Q8) {  // every lane takes part in the reductions
    // Over |m|, |v| of the live elements and 0 for the others.
    float am = 0.0f, av = 0.0f;
    block_absmax(t, b, lane, m, v, am, av);
    const float rm = q8_recip(am), rv = q8_recip(av);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = base + 32 * k;
      if (i >= t.n) continue;
      t.q_m[i] = quantize_in_block(tab.ext_m, 255, m[k], am, rm, 127, guess);
      t.q_v[i] = quantize_in_block(tab.ext_v, 256, v[k], av, rv, 0, guess);
    }
  }
}

// Q8: 8-bit moments; Sr: the update rounded stochastically to bf16 (stored in param_bf16, or widened into param_f32
// with f32_holds_bf16); GradBf16: the gradient read from grad_bf16.
// One warp per quantization block, its absmax a warp reduction, so no barrier is needed after the tables are
// copied. A persistent grid: each CUDA block copies the code tables into shared memory once, then its warps walk
// quantization blocks (global warp index, + the grid's warp count, ...). Shared memory because every lane looks up
// a different code (dequantizing) and walks its own search (quantizing). Full blocks take the vector path when
// `vec` (update_block_vec; every pointer aligned), the rest the scalar path. Every element takes the same fp32
// operations as adamw_lowmem_step_ref, so the bits are the reference's. (H200: one CUDA block of 256 threads per
// quantization block took 7.17 ms for 2^29 elements, 2026-12-02; the scalar path alone 6.3 ms, session 19.)
template <bool Q8, bool Sr, bool GradBf16>
__global__ void __launch_bounds__(kThreads) adamw_lowmem_kernel(AdamWLowmemCudaTensor t, const float* scale_ptr,
                                                                AdamWLowmemStep s, bool guess, bool vec) {
  const bool scaled = scale_ptr != nullptr;
  const float scale = scaled ? *scale_ptr : 1.0f;
  if (!isfinite(scale)) return;  // uniform over the grid: no thread is left waiting at the barrier below
  __shared__ Q8Tables tab;
  if (Q8) {
    const int j = static_cast<int>(threadIdx.x);
    tab.code_m[j] = c_code_m[j];
    tab.code_v[j] = c_code_v[j];
    tab.ext_m[j + 1] = j < 254 ? c_mid_m[j] : INFINITY;  // ext_m[255] = +inf (ext_m[256] unused)
    tab.ext_v[j + 1] = j < 255 ? c_mid_v[j] : INFINITY;  // ext_v[256] = +inf
    if (j == 0) {
      tab.ext_m[0] = -INFINITY;
      tab.ext_v[0] = -INFINITY;
    }
    __syncthreads();
  }
  const int64_t n_blocks = (t.n + kQ8Block - 1) / kQ8Block;  // q8_blocks (host only)
  const int64_t n_full = vec ? t.n / kQ8Block : 0;          // blocks on the vector path
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5); b < n_blocks;
       b += warps) {
    if (b < n_full)
      update_block_vec<Q8, Sr, GradBf16>(t, tab, scaled, scale, s, guess, b, lane);
    else
      update_block_scalar<Q8, Sr, GradBf16>(t, tab, scaled, scale, s, guess, b, lane);
  }
}

__global__ void q8_quantize_kernel(bool is_signed, const float* x, int64_t n, uint8_t* q, float* absmax) {
  const int64_t b = blockIdx.x;
  const int64_t i = b * kQ8Block + threadIdx.x;
  const bool live = i < n;
  const float xi = live ? x[i] : 0.0f;
  const float a = block_max(fmaxf(fabsf(xi), 0.0f));  // a NaN counts as 0, as std::max(0, NaN) in q8_quantize
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
  // The vector path (update_block_vec) reads and writes 16 bytes of bf16 or f32 rows and 8 bytes of code rows at
  // a time from each full block's start: every row's base must be 16-byte aligned (codes: 8). HLM_ADAMW8_VEC=0
  // turns it off (the scalar path for every block, for A/B timing; same bits).
  static const bool vec_allowed = [] {
    const char* e = std::getenv("HLM_ADAMW8_VEC");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  const auto aligned = [](const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; };
  // The vector path draws the random bits of 8 elements from two hashes: their tensor indices must start a group
  // of four.
  const bool vec = vec_allowed && (!sr || s.sr_first % 4 == 0) && aligned(t.param_f32, 16) &&
                   aligned(t.param_bf16, 16) && aligned(t.grad, 16) &&
                   aligned(t.grad_bf16, 16) && aligned(t.exp_avg, 16) && aligned(t.exp_avg_sq, 16) &&
                   aligned(t.q_m, 8) && aligned(t.q_v, 8);  // null pointers are aligned
  // The eight instantiations, chosen once per launch (the flags are uniform over the tensor).
  const auto launch = [&](auto q8_c, auto sr_c, auto g16_c) {
    adamw_lowmem_kernel<decltype(q8_c)::value, decltype(sr_c)::value, decltype(g16_c)::value>
        <<<grid, kThreads, 0, stream>>>(t, scale, s, guess, vec);
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
