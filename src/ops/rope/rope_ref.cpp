// RoPE reference: frequency tables as HF transformers 5.x builds them (modeling_rope_utils.py and the models'
// compute_default_rope_parameters), the rotate_half application of apply_rotary_pos_emb and its transpose (backward).
//
// HF's tensor ops run in float32 with Python scalars cast to float32 first; each helper below names the HF
// expression it replays. Python-level scalar math (correction ranges, mscale, wavelength bounds) stays in double,
// as in Python. The build is ISO C++ (-std=c++20), so GCC does not contract a*b+c into an FMA: every float
// operation rounds once, like the separate torch kernels.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/rope/rope.h"

namespace hlm {
namespace {

// `base ** (arange(0, R, 2).float() / R)` in float32: exponent by float division, pow of the float-cast base.
// torch's float pow is within 1 ulp; the double pow rounded once is the correctly rounded value.
float rope_pow_base(double base, int64_t i, int64_t R) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(R);
  return static_cast<float>(std::pow(static_cast<double>(static_cast<float>(base)), static_cast<double>(exponent)));
}

// `1.0 / (base ** (arange(0, R, 2).float() / R))`: the default table.
std::vector<float> rope_default_inv_freq(double base, int64_t R) {
  std::vector<float> inv(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i) inv[static_cast<size_t>(i)] = 1.0f / rope_pow_base(base, i, R);
  return inv;
}

// HF get_mscale: 0.1 · mscale · ln(scale) + 1 for scale > 1, else 1.
double rope_yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// HF find_correction_dim, evaluated left to right as Python does.
double rope_yarn_correction_dim(double num_rotations, int64_t R, double base, double original_max) {
  const double R_d = static_cast<double>(R);
  return (R_d * std::log(original_max / (num_rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
}

void rope_yarn_build(RopeTable& table, const RopeParams& p, int64_t R, int64_t original_max) {
  HLM_CHECK_INPUT(p.factor > 0.0, "rope yarn: factor must be > 0, got ", p.factor);
  HLM_CHECK_INPUT(original_max > 0, "rope yarn: original_max_position_embeddings must be > 0, got ", original_max);
  const double factor = p.factor;

  // attention_factor, else the mscale ratio when both mscale and mscale_all_dim are truthy, else get_mscale(factor).
  double attention_factor = 0.0;
  if (p.attention_factor) {
    attention_factor = *p.attention_factor;
  } else if (p.mscale.value_or(0.0) != 0.0 && p.mscale_all_dim.value_or(0.0) != 0.0) {
    attention_factor = rope_yarn_get_mscale(factor, *p.mscale) / rope_yarn_get_mscale(factor, *p.mscale_all_dim);
  } else {
    attention_factor = rope_yarn_get_mscale(factor, 1.0);
  }
  table.attention_scaling = static_cast<float>(attention_factor);

  // `beta_fast or 32`, `beta_slow or 1`: a zero falls back to the default, as Python's `or` does.
  const double beta_fast = p.beta_fast != 0.0 ? p.beta_fast : 32.0;
  const double beta_slow = p.beta_slow != 0.0 ? p.beta_slow : 1.0;
  const double omax = static_cast<double>(original_max);
  double low = rope_yarn_correction_dim(beta_fast, R, p.rope_theta, omax);
  double high = rope_yarn_correction_dim(beta_slow, R, p.rope_theta, omax);
  if (p.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(R - 1));
  if (low == high) high += 0.001;  // HF: "prevent singularity"
  const float ramp_min = static_cast<float>(low);
  const float ramp_den = static_cast<float>(high - low);  // Python subtracts, torch casts the result

  const float factor_f = static_cast<float>(factor);
  table.inv_freq.resize(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i) {
    const float pos_freq = rope_pow_base(p.rope_theta, i, R);
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor_f * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - ramp_min) / ramp_den, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float a = interpolation * (1.0f - extrapolation_factor);
    const float b = extrapolation * extrapolation_factor;
    table.inv_freq[static_cast<size_t>(i)] = a + b;
  }
}

void rope_llama3_build(RopeTable& table, const RopeParams& p, int64_t R, int64_t original_max) {
  HLM_CHECK_INPUT(p.factor > 0.0, "rope llama3: factor must be > 0, got ", p.factor);
  HLM_CHECK_INPUT(original_max > 0, "rope llama3: original_max_position_embeddings must be > 0, got ", original_max);
  HLM_CHECK_INPUT(p.low_freq_factor > 0.0 && p.high_freq_factor > p.low_freq_factor,
                  "rope llama3: need 0 < low_freq_factor < high_freq_factor, got ", p.low_freq_factor, " and ",
                  p.high_freq_factor);
  const double old_context = static_cast<double>(original_max);
  // Python scalars, cast to float32 where they meet a tensor.
  const float low_wavelen = static_cast<float>(old_context / p.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_context / p.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float factor_f = static_cast<float>(p.factor);
  const float low_f = static_cast<float>(p.low_freq_factor);
  const float old_f = static_cast<float>(old_context);
  const float smooth_den = static_cast<float>(p.high_freq_factor - p.low_freq_factor);

  table.inv_freq = rope_default_inv_freq(p.rope_theta, R);
  for (float& inv : table.inv_freq) {
    // `scalar / tensor` is reciprocal(tensor) * scalar in torch.
    const float wavelen = (1.0f / inv) * two_pi;
    const float llama = wavelen > low_wavelen ? inv / factor_f : inv;
    const float smooth = ((1.0f / wavelen) * old_f - low_f) / smooth_den;
    const float smoothed = ((1.0f - smooth) * llama) / factor_f + smooth * llama;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    inv = medium ? smoothed : llama;
  }
}

}  // namespace

RopeTable rope_table_build(const RopeParams& params, int64_t head_dim, int64_t max_position_embeddings) {
  HLM_CHECK_INPUT(head_dim > 0, "rope: head_dim must be > 0, got ", head_dim);
  HLM_CHECK_INPUT(params.rope_theta > 0.0, "rope: rope_theta must be > 0, got ", params.rope_theta);
  HLM_CHECK_INPUT(params.partial_rotary_factor > 0.0 && params.partial_rotary_factor <= 1.0,
                  "rope: partial_rotary_factor must be in (0, 1], got ", params.partial_rotary_factor);
  // HF: dim = int(head_dim * partial_rotary_factor).
  const auto R = static_cast<int64_t>(static_cast<double>(head_dim) * params.partial_rotary_factor);
  HLM_CHECK_INPUT(R >= 2 && R % 2 == 0, "rope: rotary dimension ", R, " (head_dim ", head_dim,
                  " x partial_rotary_factor ", params.partial_rotary_factor, ") must be even and >= 2");

  RopeTable table;
  table.head_dim = head_dim;
  table.rotary_dim = R;
  table.interleaved = params.interleaved;
  const std::string& type = params.rope_type;
  const int64_t original_max = params.original_max_position_embeddings.value_or(max_position_embeddings);
  if (type == "default") {
    table.inv_freq = rope_default_inv_freq(params.rope_theta, R);
  } else if (type == "linear") {
    HLM_CHECK_INPUT(params.factor > 0.0, "rope linear: factor must be > 0, got ", params.factor);
    table.inv_freq = rope_default_inv_freq(params.rope_theta, R);
    const float factor_f = static_cast<float>(params.factor);
    for (float& inv : table.inv_freq) inv /= factor_f;  // `inv_freq /= factor`
  } else if (type == "dynamic") {
    HLM_CHECK_INPUT(params.factor > 0.0, "rope dynamic: factor must be > 0, got ", params.factor);
    HLM_CHECK_INPUT(R > 2, "rope dynamic: rotary dimension must be > 2 (HF divides by R - 2)");
    HLM_CHECK_INPUT(max_position_embeddings > 0, "rope dynamic: max_position_embeddings must be > 0");
    // At init HF uses seq_len = max_position_embeddings, so the NTK base stretch is 1 (up to rounding, replayed).
    const double seq = static_cast<double>(max_position_embeddings);
    const double stretch = (params.factor * seq / seq) - (params.factor - 1.0);
    const double R_d = static_cast<double>(R);
    const double base = params.rope_theta * std::pow(stretch, R_d / (R_d - 2.0));
    table.inv_freq = rope_default_inv_freq(base, R);
    table.max_position = max_position_embeddings;
  } else if (type == "yarn") {
    rope_yarn_build(table, params, R, original_max);
  } else if (type == "llama3") {
    rope_llama3_build(table, params, R, original_max);
  } else {
    throw_input_error("rope: unsupported rope_type '", type, "' (supported: default, linear, dynamic, yarn, llama3)");
  }
  return table;
}

namespace {

void rope_check(const int32_t* positions, int64_t n, const RopeTable& table) {
  HLM_CHECK(static_cast<int64_t>(table.inv_freq.size()) == table.rotary_dim / 2 && table.rotary_dim <= table.head_dim,
            "rope: bad table");
  for (int64_t t = 0; t < n; ++t) {
    HLM_CHECK_INPUT(positions[t] >= 0, "rope: negative position ", positions[t], " at token ", t);
    HLM_CHECK_INPUT(table.max_position == 0 || positions[t] < table.max_position, "rope: position ", positions[t],
                    " >= ", table.max_position, " needs the dynamic-NTK recompute, which is not supported");
  }
}

// cos/sin of token position `pos` for every rotary pair, times attention_scaling.
// HF: freqs = position.float() @ inv_freq (one float product), cos/sin in float32, then × attention_scaling.
template <typename T>
void rope_cos_sin(std::vector<T>& cos_t, std::vector<T>& sin_t, int32_t position, const RopeTable& table) {
  const size_t half = table.inv_freq.size();
  cos_t.resize(half);
  sin_t.resize(half);
  const auto pos = static_cast<float>(position);
  for (size_t i = 0; i < half; ++i) {
    const float angle = pos * table.inv_freq[i];
    cos_t[i] = static_cast<T>(std::cos(static_cast<double>(angle))) * static_cast<T>(table.attention_scaling);
    sin_t[i] = static_cast<T>(std::sin(static_cast<double>(angle))) * static_cast<T>(table.attention_scaling);
  }
}

// Rotates every head of every token: (x1, x2) -> (x1·c − x2·s·sign, x2·c + x1·s·sign); sign = +1 forward (rotate
// by +angle), −1 backward (the transpose).
template <typename T>
void rope_apply(T* x, const int32_t* positions, int64_t n, int64_t H, const RopeTable& table, bool transpose) {
  rope_check(positions, n, table);
  const int64_t D = table.head_dim;
  const int64_t half = table.rotary_dim / 2;
#pragma omp parallel for if (n * H * D > 32768)
  for (int64_t t = 0; t < n; ++t) {
    std::vector<T> cos_t, sin_t;
    rope_cos_sin(cos_t, sin_t, positions[t], table);
    for (int64_t h = 0; h < H; ++h) {
      T* v = x + (t * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        // q·cos + rotate_half(q)·sin, rotate_half(q) = cat(-q2, q1): two products, one sum, each rounded. The
        // interleaved convention pairs (2i, 2i+1) with the same arithmetic.
        const int64_t a = table.interleaved ? 2 * i : i, b = table.interleaved ? 2 * i + 1 : i + half;
        const T x1 = v[a];
        const T x2 = v[b];
        const T c = cos_t[static_cast<size_t>(i)];
        const T s = transpose ? -sin_t[static_cast<size_t>(i)] : sin_t[static_cast<size_t>(i)];
        const T lo_a = x1 * c, lo_b = -x2 * s;
        const T hi_a = x2 * c, hi_b = x1 * s;
        v[a] = lo_a + lo_b;
        v[b] = hi_a + hi_b;
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* x, const int32_t* positions, int64_t n, int64_t H, const RopeTable& table) {
  rope_apply(x, positions, n, H, table, false);
}

template <typename T>
void rope_backward(T* d, const int32_t* positions, int64_t n, int64_t H, const RopeTable& table) {
  rope_apply(d, positions, n, H, table, true);
}

void rope_forward(float* x, const int32_t* positions, int64_t T, int64_t H, const RopeTable& table) {
  rope_forward<float>(x, positions, T, H, table);
}

template void rope_forward<float>(float*, const int32_t*, int64_t, int64_t, const RopeTable&);
template void rope_forward<double>(double*, const int32_t*, int64_t, int64_t, const RopeTable&);
template void rope_backward<float>(float*, const int32_t*, int64_t, int64_t, const RopeTable&);
template void rope_backward<double>(double*, const int32_t*, int64_t, int64_t, const RopeTable&);

}  // namespace hlm
