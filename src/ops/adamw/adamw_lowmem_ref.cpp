// CPU reference of the low-memory AdamW storage (contract: adamw_lowmem.h): code tables, block quantization,
// stochastic rounding and the element update in fp32, one rounding per operation (the CUDA kernel's order).
// x86-64 without -mfma has no fused multiply-add, so the compiler cannot contract a·b + c here.
#include "ops/adamw/adamw_lowmem.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace hlm {

const char* adamw_state_format_name(AdamWStateFormat f) { return f == AdamWStateFormat::Q8 ? "q8" : "f32"; }
const char* master_format_name(MasterFormat f) { return f == MasterFormat::Bf16Sr ? "bf16-sr" : "f32"; }

namespace {

Q8Codebook build_codebook(bool is_signed) {
  Q8Codebook b{};
  b.code.fill(0.0f);
  b.mid.fill(0.0f);
  std::array<double, 256> exact{};
  if (is_signed) {
    b.used = 255;
    for (int i = 0; i < 255; ++i) {
      const int k = i - 127;
      const double a = std::abs(k) / 127.0;
      exact[static_cast<size_t>(i)] = (k < 0 ? -1.0 : 1.0) * a * a * a;
    }
    b.zero = 127;
  } else {
    b.used = 256;
    for (int i = 0; i < 256; ++i) {
      const double a = i / 255.0;
      exact[static_cast<size_t>(i)] = a * a * a * a;
    }
    b.zero = 0;
  }
  for (int i = 0; i < b.used; ++i) b.code[static_cast<size_t>(i)] = static_cast<float>(exact[static_cast<size_t>(i)]);
  for (int i = 0; i + 1 < b.used; ++i)
    b.mid[static_cast<size_t>(i)] =
        static_cast<float>((exact[static_cast<size_t>(i)] + exact[static_cast<size_t>(i) + 1]) / 2.0);
  return b;
}

}  // namespace

const Q8Codebook& q8_codebook_signed() {
  static const Q8Codebook book = build_codebook(true);
  return book;
}
const Q8Codebook& q8_codebook_unsigned() {
  static const Q8Codebook book = build_codebook(false);
  return book;
}

uint8_t q8_quantize_value(const Q8Codebook& book, float x) {
  // Count of midpoints strictly below x: a lower bound over mid[0, used − 1).
  int lo = 0, hi = book.used - 1;
  while (lo < hi) {
    const int m = (lo + hi) / 2;
    if (book.mid[static_cast<size_t>(m)] < x)
      lo = m + 1;
    else
      hi = m;
  }
  return static_cast<uint8_t>(lo);
}

namespace {

// Re-quantizes one block of new values x[0, len) into q and *absmax.
void quantize_block(const Q8Codebook& book, const float* x, int64_t len, uint8_t* q, float* absmax) {
  float a = 0.0f;
  for (int64_t j = 0; j < len; ++j) a = std::max(a, std::fabs(x[j]));
  *absmax = a;
  for (int64_t j = 0; j < len; ++j) q[j] = a > 0.0f ? q8_quantize_value(book, x[j] / a) : book.zero;
}

}  // namespace

void q8_quantize(const Q8Codebook& book, const float* x, int64_t n, uint8_t* q, float* absmax) {
  for (int64_t b = 0; b < q8_blocks(n); ++b) {
    const int64_t begin = b * kQ8Block, len = std::min(kQ8Block, n - begin);
    quantize_block(book, x + begin, len, q + begin, absmax + b);
  }
}

void q8_dequantize(const Q8Codebook& book, const uint8_t* q, const float* absmax, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = book.code[q[i]] * absmax[i / kQ8Block];
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t adamw_sr_base(uint64_t seed, int64_t step, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return splitmix64(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(step))) ^ h);
}

uint16_t bf16_round_stochastic(float x, uint32_t r) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7F800000u) == 0x7F800000u) {  // NaN / Inf: nearest (keeps Inf; NaN keeps sign and payload's top)
    if ((bits & 0x007FFFFFu) != 0) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
    return static_cast<uint16_t>(bits >> 16);
  }
  return static_cast<uint16_t>((bits + (r & 0xFFFFu)) >> 16);
}

AdamWLowmemStep adamw_lowmem_step(double lr, double weight_decay, double beta1, double beta2, double eps, int64_t step,
                                  uint64_t sr_base) {
  HLM_CHECK_INPUT(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0, "AdamW betas must lie in [0, 1), got (",
                  beta1, ", ", beta2, ")");
  HLM_CHECK_INPUT(eps >= 0.0, "AdamW eps must be non-negative, got ", eps);
  HLM_CHECK_INPUT(step >= 1, "AdamW step number must be at least 1, got ", step);
  AdamWLowmemStep s;
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(eps);
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, static_cast<double>(step))));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step))));
  s.sr_base = sr_base;
  return s;
}

void adamw_lowmem_step_ref(const AdamWLowmemTensor& t, const float* scale_ptr, const AdamWLowmemStep& s) {
  HLM_CHECK((t.param_f32 != nullptr) != (t.param_bf16 != nullptr), "adamw_lowmem_step_ref: one parameter storage");
  HLM_CHECK((t.grad != nullptr) != (t.grad_bf16 != nullptr), "adamw_lowmem_step_ref: one gradient storage");
  HLM_CHECK(!t.f32_holds_bf16 || t.param_f32 != nullptr, "adamw_lowmem_step_ref: f32_holds_bf16 needs param_f32");
  const auto widen = [](uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float x = 0.0f;
    std::memcpy(&x, &bits, 4);
    return x;
  };
  const bool q8 = t.q_m != nullptr;
  HLM_CHECK(q8 ? (t.q_v && t.absmax_m && t.absmax_v) : (t.exp_avg && t.exp_avg_sq),
            "adamw_lowmem_step_ref: incomplete moment storage");
  const bool scaled = scale_ptr != nullptr;
  const float scale = scaled ? *scale_ptr : 1.0f;
  if (!std::isfinite(scale)) return;
  const Q8Codebook& bm = q8_codebook_signed();
  const Q8Codebook& bv = q8_codebook_unsigned();
  std::vector<float> m_new(static_cast<size_t>(kQ8Block)), v_new(static_cast<size_t>(kQ8Block));
  for (int64_t b = 0; b < q8_blocks(t.n); ++b) {
    const int64_t begin = b * kQ8Block, len = std::min(kQ8Block, t.n - begin);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = begin + j;
      const float g0 = t.grad != nullptr ? t.grad[i] : widen(t.grad_bf16[i]);
      const float g = scaled ? g0 * scale : g0;
      const float m0 = q8 ? bm.code[t.q_m[i]] * t.absmax_m[b] : t.exp_avg[i];
      const float v0 = q8 ? bv.code[t.q_v[i]] * t.absmax_v[b] : t.exp_avg_sq[i];
      const float m1 = s.beta1 * m0, m2 = s.one_minus_beta1 * g;
      const float m = m1 + m2;
      const float gg = g * g;
      const float v1 = s.beta2 * v0, v2 = s.one_minus_beta2 * gg;
      const float v = v1 + v2;
      const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
      float p0 = 0.0f;
      if (t.param_f32 != nullptr) {
        p0 = t.param_f32[i];
      } else {
        const uint32_t bits = static_cast<uint32_t>(t.param_bf16[i]) << 16;
        std::memcpy(&p0, &bits, 4);
      }
      const float pd = p0 * s.decay, u = s.step_size * m;
      const float p = pd - u / denom;
      const auto sr = [&] {
        return bf16_round_stochastic(p, adamw_sr_bits(s.sr_base, s.sr_first + static_cast<uint64_t>(i)));
      };
      if (t.param_f32 == nullptr)
        t.param_bf16[i] = sr();
      else
        t.param_f32[i] = t.f32_holds_bf16 ? widen(sr()) : p;
      if (q8) {
        m_new[static_cast<size_t>(j)] = m;
        v_new[static_cast<size_t>(j)] = v;
      } else {
        t.exp_avg[i] = m;
        t.exp_avg_sq[i] = v;
      }
    }
    if (q8) {
      quantize_block(bm, m_new.data(), len, t.q_m + begin, t.absmax_m + b);
      quantize_block(bv, v_new.data(), len, t.q_v + begin, t.absmax_v + b);
    }
  }
}

}  // namespace hlm
