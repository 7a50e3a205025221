// Low-memory AdamW storage (issue #28): 8-bit block-wise quantized moments and bf16 master weights with stochastic
// rounding. The CPU reference of the element update and of the quantization; the CUDA kernel
// (adamw_lowmem_cuda.h) gives the same bits (tests/cuda/cases_adamw_lowmem.cpp).
//
// 8-bit moments ("q8"): each tensor's m and v are cut into blocks of kQ8Block consecutive elements (the last one
// shorter). A block stores one fp32 absmax (max |x| over the block's non-NaN values, 0 if none) and one byte per
// element, the index of the code nearest to x / absmax in a fixed 256-entry table:
//   m (signed):   code[i] = sign(k)·(|k| / 127)³, k = i − 127, i = 0 … 254 (index 255 unused)  → ±1 … ±4.9e-7, 0
//   v (unsigned): code[i] = (i / 255)⁴, i = 0 … 255                                            → 1 … 2.4e-10, 0
// The power laws spend the codes where Adam's moments sit: most elements of a block are small next to its absmax
// (the bitsandbytes "dynamic" code has the same aim with an exponent/fraction layout; this is our own simpler
// table). Nearest = the count of midpoints (fp32, built in double and rounded once) below x, by binary search, so
// quantizing is comparisons only and bit-exact everywhere; dequantize = code[q]·absmax (one fp32 product).
// An all-zero block stores absmax 0 and the zero code. Memory: 2 bytes + 8 / kQ8Block bytes per parameter for m and
// v together (fp32 moments: 8 bytes).
//
// Element update (one fp32 rounding per operation, in this order; the CUDA kernel uses the _rn intrinsics):
//   g = grad·scale (when scaled); m₀, v₀ = stored (fp32) or dequantized (q8) moments; p₀ = param (fp32, or bf16
//   widened exactly)
//   m = β1·m₀ + (1−β1)·g ; v = β2·v₀ + (1−β2)·(g·g) ; D = sqrt(v)/bc2 + eps ; p = p₀·decay − (step_size·m)/D
//   stored: m, v as fp32, or each block re-quantized from the new m, v (absmax of the new values);
//   p as fp32, or as bf16 rounded STOCHASTICALLY: bits(p) + r, r = 16 random bits, then the low 16 bits dropped
//   (P(up) = the fraction of the gap, so E[bf16(p)] = p: updates far below a bf16 ulp still move the weight on
//   average; Kahan compensation would need a second bf16 tensor per weight, 2 more bytes each). NaN/Inf round to
//   nearest. r = adamw_sr_bits(sr_base, j) for the element's index j = sr_first + i in its whole tensor: the
//   (j mod 4)-th 16-bit piece, from the low end, of splitmix64(sr_base + ⌊j / 4⌋) — one hash per four elements
//   (until session 54 one per element, its top 16 bits: by a count of its 64-bit operations ~19 of the GPU kernel's
//   171 instructions per element, the ncu figure of session 22). sr_base = adamw_sr_base(seed, step, name): a pure
//   function of the run's seed, the step number and the parameter's HF name, so a resumed run draws the same bits;
//   sr_first is 0 for a whole tensor and a piece's offset for a ZeRO-1 shard's piece, so a sharded step draws the
//   one-rank step's bits.
// These are exactly the operations of the fp32 CUDA AdamW (adamw_cuda.h), so with fp32 moments and an fp32 parameter
// the update has that kernel's bits.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace hlm {

inline constexpr int64_t kQ8Block = 256;

enum class AdamWStateFormat : uint8_t { F32, Q8 };   // moments: fp32, or 8-bit block-wise
enum class MasterFormat : uint8_t { F32, Bf16Sr };   // master weights: fp32, or bf16 with stochastic rounding
const char* adamw_state_format_name(AdamWStateFormat f);  // "f32" / "q8"
const char* master_format_name(MasterFormat f);           // "f32" / "bf16-sr"

// The two code tables and their midpoints (built once; the same fp32 values on every platform).
struct Q8Codebook {
  std::array<float, 256> code;   // sorted ascending over the used entries
  std::array<float, 255> mid;    // mid[i] = (code[i] + code[i+1]) / 2 rounded once (used: used − 1 entries)
  int used = 0;                  // 255 (signed) or 256 (unsigned)
  uint8_t zero = 0;              // index of the code 0
};
const Q8Codebook& q8_codebook_signed();
const Q8Codebook& q8_codebook_unsigned();

// Index of the nearest code to x ∈ [−1, 1] (ties: the lower code), by the count of midpoints strictly below x.
uint8_t q8_quantize_value(const Q8Codebook& book, float x);

// Quantizes x[0, n) block by block into q[n] and absmax[ceil(n / kQ8Block)]; dequantizes back.
void q8_quantize(const Q8Codebook& book, const float* x, int64_t n, uint8_t* q, float* absmax);
void q8_dequantize(const Q8Codebook& book, const uint8_t* q, const float* absmax, int64_t n, float* x);
inline int64_t q8_blocks(int64_t n) { return (n + kQ8Block - 1) / kQ8Block; }

// 8-bit moments of one tensor held on the host: codes [n] and absmax [q8_blocks(n)] for m and for v.
struct AdamWQ8State {
  std::vector<uint8_t> q_m, q_v;
  std::vector<float> absmax_m, absmax_v;
};

// The step's scalars (as AdamWCudaStep: computed in double, rounded to fp32 once).
struct AdamWLowmemStep {
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0, eps = 0;
  float decay = 1, step_size = 0, bias_correction2_sqrt = 1;
  uint64_t sr_base = 0;   // stochastic rounding stream of this tensor at this step
  uint64_t sr_first = 0;  // the tensor index of element 0 (a ZeRO-1 piece's offset; 0 for a whole tensor)
};
AdamWLowmemStep adamw_lowmem_step(double lr, double weight_decay, double beta1, double beta2, double eps, int64_t step,
                                  uint64_t sr_base);

// The stream of random bits of parameter `name` at step `step` of a run seeded `seed`.
uint64_t adamw_sr_base(uint64_t seed, int64_t step, const std::string& name);
uint64_t splitmix64(uint64_t x);
// The 16 random bits of the element at index j of its tensor (see above; the CUDA kernel draws the same).
inline uint32_t adamw_sr_bits(uint64_t sr_base, uint64_t j) {
  return static_cast<uint32_t>(splitmix64(sr_base + (j >> 2)) >> (16 * (j & 3))) & 0xFFFFu;
}
// Stochastic rounding of x to a bf16 value (returned as its 16 bits) with the random bits `r` (low 16 used).
uint16_t bf16_round_stochastic(float x, uint32_t r);

// One tensor's storage for the reference step. Exactly one of param_f32 / param_bf16; m, v fp32 (exp_avg,
// exp_avg_sq) for F32, or q_m, q_v, absmax_m, absmax_v for Q8; exactly one of grad / grad_bf16.
// param_f32 with f32_holds_bf16: an f32 tensor whose values are bf16 values (a bf16 master kept in f32 storage, e.g.
// the norms and the embedding under the lean plan on the GPU): the update is rounded stochastically as for
// param_bf16 (same random bits) and stored widened (exact), so the values equal those of a param_bf16 step.
// grad_bf16: a gradient stored in bf16 (the linears' gradients under the lean plan on the GPU), widened exactly.
struct AdamWLowmemTensor {
  float* param_f32 = nullptr;
  uint16_t* param_bf16 = nullptr;
  bool f32_holds_bf16 = false;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  uint8_t* q_m = nullptr;
  uint8_t* q_v = nullptr;
  float* absmax_m = nullptr;
  float* absmax_v = nullptr;
  const float* grad = nullptr;
  const uint16_t* grad_bf16 = nullptr;
  int64_t n = 0;
};

// One update of every element (see above). scale: nullptr = no clip scale; a non-finite *scale skips the step.
void adamw_lowmem_step_ref(const AdamWLowmemTensor& t, const float* scale, const AdamWLowmemStep& s);

}  // namespace hlm
