// AdamW and the global gradient norm: CUDA (src/ops/adamw/{adamw,grad_norm}.cu) vs the CPU optimizer
// (src/train/adamw.cpp: AdamW::step, double per element, rounded once) and clip_grad_norm (src/train/grad_utils.cpp),
// with an fp64 reference of the torch formula written here (exact moments, not the fp32-rounded ones the CPU uses:
// that difference is the CPU's own error, which the harness's |cpu32 − ref64| term admits).
// Cases: odd sizes (1, 65, 127, 257, 1000, 4097, 2^20 + 3), steps 1 … 1000 (bias corrections), with and without
// weight decay, every gradient fill (large ~1e15, zeros, subnormals, NaN/±Inf), the bf16 parameter copy, clipping
// over several tensors (scale < 1 and scale = 1), and non-finite norms (the step is skipped).
// The multi-tensor launcher (adamw_multi_step_cuda) is compared BIT FOR BIT with one adamw_step_cuda per tensor
// (aligned and unaligned tensors in shared buffers, per-tensor scalars, with/without clip scale and bf16 copies, NaN and
// Inf scales, empty tensors and lists), and nothing outside the tensors may change.
// The one-launch global norm is compared BIT FOR BIT (slots, norm, clip scale) with a host emulation of its defining
// per-tensor order (exact: same fp64 operations in the same order), and each tensor's slots with a one-tensor list.
//
// Tolerances (fp32 rule, k = 1 with mag the derived bound in units of u·1; c_g = 2 when a clip scale is applied: the
// f32 scale and the product g·s are two roundings where the CPU has one):
//   m = β1·m0 + (1−β1)·g: β1, (1−β1) rounded to f32 (1 each), two products, the sum, g's c_g:
//       mag_m = (4 + c_g)·(|β1·m0| + |(1−β1)·g|).
//   v = β2·v0 + (1−β2)·g²: no cancellation (all terms ≥ 0): g² (1 + 2·c_g), coefficient roundings and products (4),
//       the sum (1): k_v = 6 + 2·c_g relative, mag_v = k_v·v.
//   p = p0·decay − U, U = step·m / D, D = sqrt(v)/bc2 + eps: decay rounding and product (2·|p0·decay|); D's relative
//       error k_D = k_v/2 + 5 (sqrtf, bc2 rounding, division, eps rounding, addition); U gets m's absolute error
//       scaled by step/D, plus (3 + k_D)·|U| (step_size rounding, product, division); the final subtraction |p|:
//       mag_p = 2·|p0·decay| + |p| + (step/D)·mag_m + (3 + k_D)·|U|.
//   The bf16 copy must be the GPU's own fp32 result rounded to nearest even (bit-exact; NaN matching NaN).
//   Norm: both sides sum exact fp64 squares with at most n + 64 additions in a chain, so
//       |gpu − cpu| ≤ 2·(n + 64)·2^-53·norm (grad_norm_cuda.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "harness.h"
#include "ops/adamw/adamw_cuda.h"
#include "ops/adamw/grad_norm_cuda.h"
#include "train/adamw.h"
#include "train/grad_utils.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

struct AdamCase {
  int64_t n;
  Fill fill;  // of the gradient
  int64_t step;
  double lr, wd;
  bool bf16_copy;
};

const std::vector<AdamCase> kCases = {
    {1, Fill::Normal, 1, 1e-3, 0.01, false},       {65, Fill::Normal, 1, 7e-5, 0.01, true},
    {4097, Fill::Normal, 1000, 2e-5, 0.01, true},  {(1 << 20) + 3, Fill::Normal, 3, 1e-3, 0.1, false},
    {257, Fill::Normal, 10, 1e-2, 0.0, false},     {127, Fill::Large, 2, 1e-3, 0.01, true},
    {65, Fill::Zeros, 1, 1e-3, 0.01, true},        {65, Fill::Zeros, 4, 1e-3, 0.01, false},
    {1000, Fill::Denormal, 5, 1e-3, 0.01, false},  {127, Fill::Special, 1, 1e-3, 0.01, true},
    {1000, Fill::Special, 7, 1e-3, 0.01, false},
};

std::string name(const AdamCase& c, const char* what) {
  return std::string("adamw.") + what + " n=" + std::to_string(c.n) + " step=" + std::to_string(c.step) +
         " lr=" + std::to_string(c.lr) + " wd=" + std::to_string(c.wd) + " " + fill_name(c.fill) +
         (c.bf16_copy ? " bf16-copy" : "");
}

Tensor host_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

std::vector<float> values_of(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// One tensor's optimizer inputs.
struct State {
  std::vector<float> p, g, m, v;
};
State make_state(int64_t n, Fill grad_fill, int64_t step, uint64_t stream) {
  const size_t un = static_cast<size_t>(n);
  State s{make_values(un, Fill::Normal, stream), make_values(un, grad_fill, stream + 1), std::vector<float>(un, 0.0f),
          std::vector<float>(un, 0.0f)};
  if (step > 1) {  // moments of earlier steps (torch starts them at zero at step 1)
    s.m = make_values(un, Fill::Normal, stream + 2, 0.1f);
    s.v = make_values(un, Fill::Normal, stream + 3, 0.1f);
    for (float& x : s.v) x *= x;
  }
  return s;
}

// fp64 torch formula and the GPU error bounds (header comment) for one tensor; g_scale = the clip factor (1: none).
struct Expected {
  std::vector<double> p, m, v, mag_p, mag_m, mag_v;
};
Expected expected(const State& s, double g_scale, bool clipped, int64_t step, double lr, double wd) {
  const double c_g = clipped ? 2.0 : 0.0, k_v = 6 + 2 * c_g, k_D = k_v / 2 + 5;
  const double bc1 = 1.0 - std::pow(kBeta1, static_cast<double>(step));
  const double bc2 = std::sqrt(1.0 - std::pow(kBeta2, static_cast<double>(step)));
  const double decay = 1.0 - lr * wd, step_size = lr / bc1;
  const size_t n = s.p.size();
  Expected e;
  for (auto* v : {&e.p, &e.m, &e.v, &e.mag_p, &e.mag_m, &e.mag_v}) v->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(s.g[i]) * g_scale;
    const double a_m = kBeta1 * s.m[i], b_m = (1.0 - kBeta1) * g;
    e.m[i] = a_m + b_m;
    e.v[i] = kBeta2 * s.v[i] + (1.0 - kBeta2) * g * g;
    const double D = std::sqrt(e.v[i]) / bc2 + kEps;
    const double U = step_size * e.m[i] / D;
    e.p[i] = static_cast<double>(s.p[i]) * decay - U;
    e.mag_m[i] = (4 + c_g) * (std::abs(a_m) + std::abs(b_m));
    e.mag_v[i] = k_v * e.v[i];
    e.mag_p[i] = 2 * std::abs(s.p[i] * decay) + std::abs(e.p[i]) + step_size / D * e.mag_m[i] + (3 + k_D) * std::abs(U);
  }
  return e;
}

bool bf16_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// The bf16 copy is the fp32 result rounded to nearest even, NaN matching NaN.
::testing::AssertionResult check_bf16_copy(const std::string& what, const std::vector<uint16_t>& copy,
                                           const std::vector<float>& p) {
  const std::vector<uint16_t> want = to_bf16(p);
  size_t bad = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (copy[i] != want[i] && !(bf16_nan(copy[i]) && bf16_nan(want[i]))) ++bad;
  std::cout << "[check] " << what << ": n=" << p.size() << " exact, mismatches=" << bad << "\n";
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " bf16 copies differ from round(fp32 result)";
}

AdamWCudaStep gpu_step(const AdamCase& c) { return adamw_cuda_step(c.lr, c.wd, kBeta1, kBeta2, kEps, c.step); }

// Runs the CPU optimizer on host copies: `grads` already clipped (or not) by the caller.
std::vector<State> cpu_step(const std::vector<State>& in, const std::vector<Tensor>& grads, double lr, double wd,
                            int64_t step) {
  std::vector<AdamWParam> params;
  for (size_t i = 0; i < in.size(); ++i)
    params.push_back({"w" + std::to_string(i), host_tensor(in[i].p), grads[i], 0});
  AdamW opt({{"all", lr, wd, lr}}, params, AdamWConfig{kBeta1, kBeta2, kEps});
  for (size_t i = 0; i < in.size(); ++i) opt.set_state(i, host_tensor(in[i].m), host_tensor(in[i].v));
  opt.set_step_count(step - 1);
  opt.step();
  std::vector<State> out(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    out[i] = {values_of(opt.params()[i].param), values_of(grads[i]), values_of(opt.exp_avg(i)),
              values_of(opt.exp_avg_sq(i))};
  return out;
}

}  // namespace

TEST(AdamWCuda, StepMatchesCpu) {
  HLM_REQUIRE_CUDA();
  for (const AdamCase& c : kCases) {
    const State in = make_state(c.n, c.fill, c.step, 71);
    const State cpu = cpu_step({in}, {host_tensor(in.g)}, c.lr, c.wd, c.step)[0];
    const Expected e = expected(in, 1.0, false, c.step, c.lr, c.wd);

    const size_t n = static_cast<size_t>(c.n);
    DeviceBuffer p = DeviceBuffer::from(in.p, "param"), m = DeviceBuffer::from(in.m, "exp_avg"),
                 v = DeviceBuffer::from(in.v, "exp_avg_sq"), g = DeviceBuffer::from(in.g, "grad"),
                 copy(c.bf16_copy ? n * 2 : 0, "param_bf16");
    adamw_step_cuda(p.as<float>(), m.as<float>(), v.as<float>(), c.bf16_copy ? copy.as<__nv_bfloat16>() : nullptr,
                    g.as<float>(), nullptr, c.n, gpu_step(c), ctx().stream());
    const std::vector<float> p_gpu = p.download<float>();
    EXPECT_TRUE(check_f32(name(c, "exp_avg"), m.download<float>(), cpu.m, e.m, e.mag_m, {1}));
    EXPECT_TRUE(check_f32(name(c, "exp_avg_sq"), v.download<float>(), cpu.v, e.v, e.mag_v, {1}));
    EXPECT_TRUE(check_f32(name(c, "param"), p_gpu, cpu.p, e.p, e.mag_p, {1}));
    if (c.bf16_copy) {
      EXPECT_TRUE(check_bf16_copy(name(c, "param bf16 copy"), copy.download<uint16_t>(), p_gpu));
    }
    EXPECT_TRUE(buffers_ok({&p, &m, &v, &copy}, {&g})) << name(c, "step");
  }
}

// clip_grad_norm + AdamW over several tensors: the norm, the clip scale applied inside the AdamW kernel, and the
// updated parameters; once with clipping (max_norm = 0.3 · norm: an inexact f32 scale) and once without
// (max_norm = 2 · norm: scale 1, the gradients pass unchanged).
TEST(AdamWCuda, GlobalNormClipAndStepOverManyTensors) {
  HLM_REQUIRE_CUDA();
  const std::vector<int64_t> sizes = {1, 65, 4097, 70001, (1 << 20) + 3};
  const int64_t step = 3;
  const double lr = 1e-3, wd = 0.01;
  std::vector<State> in;
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.push_back(make_state(sizes[i], Fill::Normal, step, 80 + 4 * i));
    total += sizes[i];
  }
  std::vector<Tensor> grads0;
  for (const State& s : in) grads0.push_back(host_tensor(s.g));
  const double norm_cpu = grad_global_norm(grads0);

  for (const double factor : {0.3, 2.0}) {
    const double max_norm = factor * norm_cpu;
    const bool clipped = factor < 1.0;
    const std::string what = std::string("adamw.clip max_norm=") + (clipped ? "0.3·norm" : "2·norm");
    std::vector<Tensor> grads;
    for (const State& s : in) grads.push_back(host_tensor(s.g));
    clip_grad_norm(grads, max_norm);  // in place when clipped; returns the norm computed above
    const std::vector<State> cpu = cpu_step(in, grads, lr, wd, step);

    std::vector<DeviceBuffer> p, m, v, g;
    std::vector<GradNormCudaTensor> table;
    for (size_t i = 0; i < in.size(); ++i) {
      p.push_back(DeviceBuffer::from(in[i].p, "param"));
      m.push_back(DeviceBuffer::from(in[i].m, "exp_avg"));
      v.push_back(DeviceBuffer::from(in[i].v, "exp_avg_sq"));
      g.push_back(DeviceBuffer::from(in[i].g, "grad"));
      table.push_back({g.back().as<float>(), sizes[i]});
    }
    DeviceBuffer norm(8, "norm"), scale(4, "clip_scale");
    DeviceBuffer ws(grad_norm_cuda_workspace_bytes(table.data(), table.size()), "workspace");
    std::vector<unsigned char> staging(grad_norm_cuda_staging_bytes(table.size()));
    grad_global_norm_cuda(norm.as<double>(), scale.as<float>(), table.data(), table.size(), max_norm, ws.as<void>(),
                          ws.bytes(), staging.data(), ctx().stream());
    const AdamWCudaStep s = adamw_cuda_step(lr, wd, kBeta1, kBeta2, kEps, step);
    for (size_t i = 0; i < in.size(); ++i)
      adamw_step_cuda(p[i].as<float>(), m[i].as<float>(), v[i].as<float>(), nullptr, g[i].as<float>(),
                      scale.as<float>(), sizes[i], s, ctx().stream());

    const double norm_gpu = norm.download<double>()[0];
    const double norm_bound = 2.0 * static_cast<double>(total + 64) * 0x1p-53 * norm_cpu;
    std::cout << "[check] " << what << " norm: gpu " << norm_gpu << " cpu " << norm_cpu << " |diff| "
              << std::abs(norm_gpu - norm_cpu) << " bound " << norm_bound << "\n";
    EXPECT_LE(std::abs(norm_gpu - norm_cpu), norm_bound) << what;
    const float scale_gpu = scale.download<float>()[0];
    if (clipped) {
      EXPECT_NEAR(scale_gpu, max_norm / norm_cpu, 2 * kU * (max_norm / norm_cpu)) << what;  // f32 rounding + norm
    } else {
      EXPECT_EQ(scale_gpu, 1.0f) << what;
    }

    for (size_t i = 0; i < in.size(); ++i) {
      const Expected e = expected(in[i], clipped ? max_norm / norm_cpu : 1.0, clipped, step, lr, wd);
      const std::string t = what + " tensor n=" + std::to_string(sizes[i]);
      EXPECT_TRUE(check_f32(t + " exp_avg", m[i].download<float>(), cpu[i].m, e.m, e.mag_m, {1}));
      EXPECT_TRUE(check_f32(t + " exp_avg_sq", v[i].download<float>(), cpu[i].v, e.v, e.mag_v, {1}));
      EXPECT_TRUE(check_f32(t + " param", p[i].download<float>(), cpu[i].p, e.p, e.mag_p, {1}));
      EXPECT_TRUE(buffers_ok({&p[i], &m[i], &v[i]}, {&g[i]})) << t;
    }
    EXPECT_TRUE(buffers_ok({&norm, &scale, &ws}, {})) << what;
  }
}

// A NaN (or, without NaN, an infinite) gradient gives a NaN (inf) norm, as the CPU, and a NaN clip scale with which
// the AdamW kernel changes nothing (a skipped step).
TEST(AdamWCuda, NonFiniteNormSkipsTheStep) {
  HLM_REQUIRE_CUDA();
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    State s = make_state(1000, Fill::Normal, 2, 90);
    s.g[123] = bad;
    std::vector<Tensor> grads = {host_tensor(s.g)};
    const double norm_cpu = clip_grad_norm(grads, 1.0);

    DeviceBuffer p = DeviceBuffer::from(s.p, "param"), m = DeviceBuffer::from(s.m, "exp_avg"),
                 v = DeviceBuffer::from(s.v, "exp_avg_sq"), g = DeviceBuffer::from(s.g, "grad"),
                 copy(s.p.size() * 2, "param_bf16"), norm(8, "norm"), scale(4, "clip_scale");
    const GradNormCudaTensor table[] = {{g.as<float>(), 1000}};
    DeviceBuffer ws(grad_norm_cuda_workspace_bytes(table, 1), "workspace");
    std::vector<unsigned char> staging(grad_norm_cuda_staging_bytes(1));
    grad_global_norm_cuda(norm.as<double>(), scale.as<float>(), table, 1, 1.0, ws.as<void>(), ws.bytes(),
                          staging.data(), ctx().stream());
    adamw_step_cuda(p.as<float>(), m.as<float>(), v.as<float>(), copy.as<__nv_bfloat16>(), g.as<float>(),
                    scale.as<float>(), 1000, adamw_cuda_step(1e-3, 0.01, kBeta1, kBeta2, kEps, 2), ctx().stream());
    const double norm_gpu = norm.download<double>()[0];
    const std::string what = std::string("adamw.skip grad=") + (std::isnan(bad) ? "nan" : "-inf");
    std::cout << "[check] " << what << ": norm gpu " << norm_gpu << " cpu " << norm_cpu << "\n";
    EXPECT_EQ(std::isnan(norm_gpu), std::isnan(norm_cpu)) << what;
    EXPECT_EQ(std::isinf(norm_gpu), std::isinf(norm_cpu)) << what;
    EXPECT_TRUE(std::isnan(scale.download<float>()[0])) << what;
    EXPECT_TRUE(buffers_ok({&copy, &norm, &scale, &ws}, {&p, &m, &v, &g})) << what;  // p, m, v untouched
    const std::vector<uint8_t> untouched = copy.download_bytes();
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](uint8_t b) { return b == 0xFF; }))
        << what << ": the bf16 copy was written";
  }
}

// Norm edge cases: no tensors or only empty ones (0), large values (squares ~1e30, fine in fp64).
TEST(AdamWCuda, GlobalNormEdgeCases) {
  HLM_REQUIRE_CUDA();
  {
    DeviceBuffer norm(8, "norm"), scale(4, "clip_scale"), ws(grad_norm_cuda_workspace_bytes(nullptr, 0), "workspace");
    std::vector<unsigned char> staging(grad_norm_cuda_staging_bytes(0));
    grad_global_norm_cuda(norm.as<double>(), scale.as<float>(), nullptr, 0, 1.0, ws.as<void>(), ws.bytes(),
                          staging.data(), ctx().stream());
    EXPECT_EQ(norm.download<double>()[0], 0.0);
    EXPECT_EQ(scale.download<float>()[0], 1.0f);
    const GradNormCudaTensor empty[] = {{nullptr, 0}, {nullptr, 0}};
    DeviceBuffer norm2(8, "norm"), ws2(grad_norm_cuda_workspace_bytes(empty, 2), "workspace");
    staging.assign(grad_norm_cuda_staging_bytes(2), 0);
    grad_global_norm_cuda(norm2.as<double>(), nullptr, empty, 2, 0.0, ws2.as<void>(), ws2.bytes(), staging.data(),
                          ctx().stream());
    EXPECT_EQ(norm2.download<double>()[0], 0.0);
  }
  const std::vector<float> big = make_values(4097, Fill::Large, 95);
  std::vector<Tensor> grads = {host_tensor(big)};
  const double norm_cpu = grad_global_norm(grads);
  DeviceBuffer g = DeviceBuffer::from(big, "grad"), norm(8, "norm");
  const GradNormCudaTensor table[] = {{g.as<float>(), 4097}};
  DeviceBuffer ws(grad_norm_cuda_workspace_bytes(table, 1), "workspace");
  std::vector<unsigned char> staging(grad_norm_cuda_staging_bytes(1));
  grad_global_norm_cuda(norm.as<double>(), nullptr, table, 1, 0.0, ws.as<void>(), ws.bytes(), staging.data(),
                        ctx().stream());
  const double norm_gpu = norm.download<double>()[0];
  const double bound = 2.0 * (4097 + 64) * 0x1p-53 * norm_cpu;
  std::cout << "[check] grad_norm large: gpu " << norm_gpu << " cpu " << norm_cpu << " bound " << bound << "\n";
  EXPECT_LE(std::abs(norm_gpu - norm_cpu), bound);
  EXPECT_TRUE(buffers_ok({&norm, &ws}, {&g}));
}

// ---- Multi-tensor launcher (adamw_multi_step_cuda) vs one adamw_step_cuda per tensor, BIT FOR BIT.
// All tensors of a list live in one guarded buffer per array (param, m, v, grad, bf16 copy) at offsets with gaps
// between them; the gaps hold known values that must survive. Layouts: "aligned" (every tensor 16-byte aligned: the
// float4 path) and "mixed" (odd tensors one float past alignment: the scalar path; some bf16 copies 4-byte but not
// 8-byte aligned, so f32-aligned tensors take the scalar path too). Sizes around the chunk (kAdamWMultiChunk = 16384)
// and odd tails; every tensor has its own lr, weight decay and step number.

namespace {

const std::vector<int64_t> kMultiSizes = {0, 1, 3, 1000, 4097, 8192, 16384, 16385, 0, 65537, (1 << 20) + 3, 5};

struct MultiLayout {
  std::vector<int64_t> f32_off, bf16_off;  // element offsets of each tensor
  int64_t f32_total = 0, bf16_total = 0;
};

int64_t round_up4(int64_t x) { return (x + 3) / 4 * 4; }

MultiLayout multi_layout(const std::vector<int64_t>& sizes, bool mixed) {
  MultiLayout l;
  int64_t f = 4, b = 4;  // a leading gap
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t fs = mixed && i % 2 == 1 ? 1 : 0;  // one float past 16-byte alignment
    const int64_t bs = mixed && i % 4 == 2 ? 2 : 0;  // two bf16 past 8-byte alignment (f32 stays aligned)
    l.f32_off.push_back(f + fs);
    l.bf16_off.push_back(b + bs);
    f = round_up4(f + fs + sizes[i]) + 4;  // a gap of at least 4 elements
    b = round_up4(b + bs + sizes[i]) + 4;
  }
  l.f32_total = f;
  l.bf16_total = b;
  return l;
}

// Per-tensor scalars: lr, weight decay and step number differ.
AdamWCudaStep multi_coeffs(size_t i) {
  const double lr = 1e-3 * (1.0 + 0.37 * static_cast<double>(i));
  const double wd = i % 3 == 0 ? 0.0 : 0.01 * static_cast<double>(i);
  return adamw_cuda_step(lr, wd, kBeta1, kBeta2, kEps, 1 + static_cast<int64_t>(i % 5) * 7);
}

struct MultiBuffers {
  DeviceBuffer p, m, v, g, copy;
};

// Whole-buffer inputs: random values everywhere (gaps included); moments positive for v; tensor 4's gradient has
// NaN/±Inf, tensor 6's subnormals. The bf16 buffer stays at its 0xFF poison.
MultiBuffers multi_buffers(const MultiLayout& l, const std::vector<int64_t>& sizes) {
  const size_t n = static_cast<size_t>(l.f32_total);
  std::vector<float> p = make_values(n, Fill::Normal, 301), m = make_values(n, Fill::Normal, 302, 0.1f),
                     v = make_values(n, Fill::Normal, 303, 0.1f), g = make_values(n, Fill::Normal, 304);
  for (float& x : v) x *= x;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Fill fill = i == 4 ? Fill::Special : i == 6 ? Fill::Denormal : Fill::Normal;
    if (fill == Fill::Normal || sizes[i] == 0) continue;
    const std::vector<float> special = make_values(static_cast<size_t>(sizes[i]), fill, 305 + i);
    std::copy(special.begin(), special.end(), g.begin() + l.f32_off[i]);
  }
  return {DeviceBuffer::from(p, "param"), DeviceBuffer::from(m, "exp_avg"), DeviceBuffer::from(v, "exp_avg_sq"),
          DeviceBuffer::from(g, "grad"), DeviceBuffer(static_cast<size_t>(l.bf16_total) * 2, "param_bf16")};
}

std::vector<AdamWCudaTensor> multi_list(const MultiLayout& l, const std::vector<int64_t>& sizes, MultiBuffers& b,
                                        bool bf16) {
  std::vector<AdamWCudaTensor> list;
  for (size_t i = 0; i < sizes.size(); ++i) {
    AdamWCudaTensor t;
    t.param = b.p.as<float>() + l.f32_off[i];
    t.exp_avg = b.m.as<float>() + l.f32_off[i];
    t.exp_avg_sq = b.v.as<float>() + l.f32_off[i];
    t.grad = b.g.as<float>() + l.f32_off[i];
    t.param_bf16 = bf16 && i % 3 != 1 ? b.copy.as<__nv_bfloat16>() + l.bf16_off[i] : nullptr;  // some without
    t.n = sizes[i];
    t.step = multi_coeffs(i);
    list.push_back(t);
  }
  return list;
}

// Byte-for-byte equality of two downloads, reporting the first differing element (of `elem` bytes).
::testing::AssertionResult same_bytes(const std::string& what, const std::vector<uint8_t>& a,
                                      const std::vector<uint8_t>& b, size_t elem) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i + elem <= a.size() && i + elem <= b.size(); i += elem)
    if (std::memcmp(&a[i], &b[i], elem) != 0 && bad++ == 0) first = i / elem;
  std::cout << "[check] " << what << ": " << a.size() / elem << " elements, bit-exact, mismatches=" << bad << "\n";
  if (bad == 0 && a.size() == b.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " elements differ (first at element " << first
                                       << ")";
}

// The bytes outside every tensor (`elem`-byte elements, tensors at `off` of `sizes`) still equal `before`.
::testing::AssertionResult gaps_unchanged(const std::string& what, const std::vector<uint8_t>& after,
                                          const std::vector<uint8_t>& before, const std::vector<int64_t>& off,
                                          const std::vector<int64_t>& sizes, const std::vector<bool>& written,
                                          size_t elem) {
  std::vector<bool> inside(after.size() / elem, false);
  for (size_t i = 0; i < sizes.size(); ++i)
    if (written[i])
      for (int64_t k = 0; k < sizes[i]; ++k) inside[static_cast<size_t>(off[i] + k)] = true;
  size_t bad = 0;
  for (size_t e = 0; e < inside.size(); ++e)
    if (!inside[e] && std::memcmp(&after[e * elem], &before[e * elem], elem) != 0) ++bad;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " elements outside the tensors were written";
}

}  // namespace

TEST(AdamWCuda, MultiTensorMatchesPerTensorLaunches) {
  HLM_REQUIRE_CUDA();
  const std::vector<int64_t>& sizes = kMultiSizes;
  struct Config {
    bool mixed, bf16;
    float scale;  // 0: no grad_scale (nullptr)
  };
  const Config configs[] = {{false, true, 0.0f}, {true, true, 0.0f},   {false, true, 0.37f},
                            {true, false, 0.37f}, {false, false, 1.0f}, {true, true, 0.61f}};
  for (const Config& c : configs) {
    const std::string what = std::string("adamw.multi ") + (c.mixed ? "mixed" : "aligned") +
                             (c.bf16 ? " bf16" : "") + (c.scale > 0 ? " scale=" + std::to_string(c.scale) : "");
    const MultiLayout l = multi_layout(sizes, c.mixed);
    MultiBuffers multi = multi_buffers(l, sizes), ref = multi_buffers(l, sizes);
    DeviceBuffer scale = DeviceBuffer::from(std::vector<float>{c.scale}, "grad_scale");
    const float* s = c.scale > 0 ? scale.as<float>() : nullptr;

    const std::vector<AdamWCudaTensor> list = multi_list(l, sizes, multi, c.bf16);
    const size_t bytes = adamw_multi_step_cuda_workspace_bytes(list.size());
    DeviceBuffer ws(bytes, "workspace");
    std::vector<unsigned char> staging(bytes);
    adamw_multi_step_cuda(list.data(), list.size(), s, ws.as<void>(), ws.bytes(), staging.data(), ctx().stream());
    for (const AdamWCudaTensor& t : multi_list(l, sizes, ref, c.bf16))
      adamw_step_cuda(t.param, t.exp_avg, t.exp_avg_sq, t.param_bf16, t.grad, s, t.n, t.step, ctx().stream());

    EXPECT_TRUE(same_bytes(what + " param", multi.p.download_bytes(), ref.p.download_bytes(), 4));
    EXPECT_TRUE(same_bytes(what + " exp_avg", multi.m.download_bytes(), ref.m.download_bytes(), 4));
    EXPECT_TRUE(same_bytes(what + " exp_avg_sq", multi.v.download_bytes(), ref.v.download_bytes(), 4));
    EXPECT_TRUE(same_bytes(what + " bf16 copy", multi.copy.download_bytes(), ref.copy.download_bytes(), 2));
    EXPECT_TRUE(buffers_ok({&multi.p, &multi.m, &multi.v, &multi.copy, &ws}, {&multi.g, &scale})) << what;

    // Outside the tensors nothing changed: the f32 gaps hold their uploads, the bf16 gaps (and the copies of the
    // tensors without one) the 0xFF poison. Inside, something was written (a nonempty tensor's param changed).
    const std::vector<bool> all(sizes.size(), true);
    std::vector<bool> with_copy(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) with_copy[i] = list[i].param_bf16 != nullptr;
    const MultiBuffers fresh = multi_buffers(l, sizes);
    const std::vector<uint8_t> p_after = multi.p.download_bytes(), p_before = fresh.p.download_bytes();
    EXPECT_TRUE(gaps_unchanged(what + " param", p_after, p_before, l.f32_off, sizes, all, 4));
    EXPECT_TRUE(gaps_unchanged(what + " exp_avg", multi.m.download_bytes(), fresh.m.download_bytes(), l.f32_off,
                               sizes, all, 4));
    EXPECT_TRUE(gaps_unchanged(what + " exp_avg_sq", multi.v.download_bytes(), fresh.v.download_bytes(), l.f32_off,
                               sizes, all, 4));
    EXPECT_TRUE(gaps_unchanged(what + " bf16 copy", multi.copy.download_bytes(), fresh.copy.download_bytes(),
                               l.bf16_off, sizes, with_copy, 2));
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 0) continue;
      const size_t last = static_cast<size_t>(l.f32_off[i] + sizes[i] - 1) * 4;
      EXPECT_NE(std::memcmp(&p_after[last], &p_before[last], 4), 0) << what << ": tensor " << i << " not updated";
    }
    // The copies are the updated fp32 parameters rounded as core/dtype.h (refresh_bf16's bits, NaN included).
    if (c.bf16) {
      const std::vector<uint16_t> copy = multi.copy.download<uint16_t>();
      const std::vector<float> p = multi.p.download<float>();
      size_t bad = 0;
      for (size_t i = 0; i < sizes.size(); ++i)
        if (with_copy[i])
          for (int64_t k = 0; k < sizes[i]; ++k)
            bad += copy[static_cast<size_t>(l.bf16_off[i] + k)] != f32_to_bf16(p[static_cast<size_t>(l.f32_off[i] + k)]);
      EXPECT_EQ(bad, 0u) << what << ": bf16 copies differ from core/dtype.h's rounding of the fp32 result";
    }
  }
}

// A non-finite grad_scale (NaN, +Inf): nothing is written, as adamw_step_cuda.
TEST(AdamWCuda, MultiTensorNonFiniteScaleWritesNothing) {
  HLM_REQUIRE_CUDA();
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const std::string what = std::string("adamw.multi skip scale=") + (std::isnan(bad) ? "nan" : "inf");
    const MultiLayout l = multi_layout(kMultiSizes, true);
    MultiBuffers b = multi_buffers(l, kMultiSizes);
    DeviceBuffer scale = DeviceBuffer::from(std::vector<float>{bad}, "grad_scale");
    const std::vector<AdamWCudaTensor> list = multi_list(l, kMultiSizes, b, true);
    const size_t bytes = adamw_multi_step_cuda_workspace_bytes(list.size());
    DeviceBuffer ws(bytes, "workspace");
    std::vector<unsigned char> staging(bytes);
    adamw_multi_step_cuda(list.data(), list.size(), scale.as<float>(), ws.as<void>(), ws.bytes(), staging.data(),
                          ctx().stream());
    EXPECT_TRUE(buffers_ok({&ws}, {&b.p, &b.m, &b.v, &b.g, &b.copy, &scale})) << what;  // all untouched
    std::cout << "[check] " << what << ": param, m, v and bf16 copies untouched\n";
  }
}

// Empty lists and lists of empty tensors queue nothing (no workspace is touched; null pointers are fine).
TEST(AdamWCuda, MultiTensorEmpty) {
  HLM_REQUIRE_CUDA();
  EXPECT_GT(adamw_multi_step_cuda_workspace_bytes(0), 0u);
  adamw_multi_step_cuda(nullptr, 0, nullptr, nullptr, 0, nullptr, ctx().stream());
  const std::vector<AdamWCudaTensor> empties(3);  // n = 0, null pointers
  const size_t bytes = adamw_multi_step_cuda_workspace_bytes(empties.size());
  DeviceBuffer ws(bytes, "workspace");
  std::vector<unsigned char> staging(bytes);
  adamw_multi_step_cuda(empties.data(), empties.size(), nullptr, ws.as<void>(), ws.bytes(), staging.data(),
                        ctx().stream());
  EXPECT_TRUE(buffers_ok({}, {&ws})) << "adamw.multi empty: the workspace was written";
  ctx().synchronize();
}

// ---- The one-launch gradient norm BIT FOR BIT against its defining order (grad_norm_cuda.h): the earlier launcher
// ran pass 1 once per tensor into consecutive slots; that order is emulated exactly on the host here (every square is
// exact in fp64 and every fp64 addition is IEEE-rounded on both sides, in the same order and the same tree), so
// the slots, the norm and the clip scale must match to the bit. Also each tensor's slots must equal those of a
// one-tensor list (the block → (tensor, piece) mapping). Sizes: empty tensors (also first and last), tails, two
// tensors at the 1024-block cap (16–17 and 35–36 grid-stride steps per thread: across the 8-step unroll), and 120
// small tensors (a multi-round block → tensor search).

namespace {

constexpr int kNormThreads = 256;  // grad_norm.cu's pass-1 and finish block
constexpr int64_t kNormBlockElements = 16 * kNormThreads, kNormMaxBlocks = 1024;

int64_t norm_blocks(int64_t n) {
  return n <= 0 ? 0 : std::min((n + kNormBlockElements - 1) / kNormBlockElements, kNormMaxBlocks);
}

// cuda::block_sum<256, double>: in each warp an xor butterfly (offsets 16 … 1, lane l adds lane l ^ offset), lane 0's
// value per warp; then 0 + warp 0 + warp 1 + … + warp 7.
double emulate_block_sum(const std::vector<double>& v) {
  double total = 0.0;
  for (int w = 0; w < kNormThreads / 32; ++w) {
    double lane[32], next[32];
    for (int l = 0; l < 32; ++l) lane[l] = v[static_cast<size_t>(w * 32 + l)];
    for (int offset = 16; offset > 0; offset >>= 1) {
      for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ offset];
      std::memcpy(lane, next, sizeof(lane));
    }
    total += lane[0];
  }
  return total;
}

// Pass 1 of one tensor: block j's slot, thread k summing x[i]² for i = j·256 + k, + B·256, ...
void emulate_sum_squares(const std::vector<float>& x, std::vector<double>& slots) {
  const int64_t n = static_cast<int64_t>(x.size()), blocks = norm_blocks(n), stride = blocks * kNormThreads;
  std::vector<double> acc(kNormThreads);
  for (int64_t j = 0; j < blocks; ++j) {
    for (int k = 0; k < kNormThreads; ++k) {
      double a = 0.0;
      for (int64_t i = j * kNormThreads + k; i < n; i += stride) {
        const double d = x[static_cast<size_t>(i)];
        a += d * d;
      }
      acc[static_cast<size_t>(k)] = a;
    }
    slots.push_back(emulate_block_sum(acc));
  }
}

// Pass 2: thread k sums slots k, k + 256, ... in order, then the block tree.
double emulate_finish(const std::vector<double>& slots) {
  std::vector<double> acc(kNormThreads, 0.0);
  for (size_t s = 0; s < slots.size(); ++s) acc[s % kNormThreads] += slots[s];
  return std::sqrt(emulate_block_sum(acc));
}

}  // namespace

TEST(AdamWCuda, GlobalNormOneLaunchMatchesPerTensorOrder) {
  HLM_REQUIRE_CUDA();
  // 4194309 and 9175047: 1024 blocks (the cap), 16–17 and 35–36 grid-stride steps per thread.
  std::vector<int64_t> sizes = {0, 1, 3, 4097, 0, 255, 257, 4096, 65537, (1 << 20) + 3, 4194309, 9175047, 70001};
  for (int64_t i = 0; i < 120; ++i) sizes.push_back(i % 11 == 0 ? 0 : (i * 977 + 13) % 9001);
  sizes.push_back(0);
  std::vector<std::vector<float>> values;
  std::vector<DeviceBuffer> g;
  std::vector<GradNormCudaTensor> table;
  std::vector<double> want_slots;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Fill fill = i == 3 ? Fill::Large : i == 7 ? Fill::Denormal : Fill::Normal;
    values.push_back(make_values(static_cast<size_t>(sizes[i]), fill, 600 + i));
    g.push_back(DeviceBuffer::from(values.back(), "grad"));
    table.push_back({sizes[i] > 0 ? g.back().as<float>() : nullptr, sizes[i]});
    emulate_sum_squares(values.back(), want_slots);
  }
  const double want_norm = emulate_finish(want_slots);
  const double max_norm = 0.37 * want_norm;  // clipped: an inexact scale
  const float want_scale = static_cast<float>(max_norm / want_norm);

  const size_t count = table.size(), table_bytes = grad_norm_cuda_staging_bytes(count);
  DeviceBuffer norm(8, "norm"), scale(4, "clip_scale");
  DeviceBuffer ws(grad_norm_cuda_workspace_bytes(table.data(), count), "workspace");
  std::vector<unsigned char> staging(table_bytes);
  grad_global_norm_cuda(norm.as<double>(), scale.as<float>(), table.data(), count, max_norm, ws.as<void>(),
                        ws.bytes(), staging.data(), ctx().stream());
  staging.assign(staging.size(), 0xAB);  // pageable staging: reusable once the call returned

  const std::vector<uint8_t> ws_bytes = ws.download_bytes();
  ASSERT_EQ(ws_bytes.size(), table_bytes + want_slots.size() * sizeof(double));
  const std::vector<uint8_t> want_bytes(reinterpret_cast<const uint8_t*>(want_slots.data()),
                                        reinterpret_cast<const uint8_t*>(want_slots.data() + want_slots.size()));
  EXPECT_TRUE(same_bytes("grad_norm.one-launch slots vs emulated per-tensor order",
                         std::vector<uint8_t>(ws_bytes.begin() + static_cast<std::ptrdiff_t>(table_bytes),
                                              ws_bytes.end()),
                         want_bytes, sizeof(double)));
  const double got_norm = norm.download<double>()[0];
  const float got_scale = scale.download<float>()[0];
  std::cout << "[check] grad_norm.one-launch " << count << " tensors, " << want_slots.size()
            << " slots: norm gpu " << got_norm << " emulated " << want_norm << ", scale gpu " << got_scale
            << " emulated " << want_scale << "\n";
  EXPECT_EQ(std::memcmp(&got_norm, &want_norm, sizeof(double)), 0) << "norm bits differ";
  EXPECT_EQ(std::memcmp(&got_scale, &want_scale, sizeof(float)), 0) << "clip scale bits differ";
  EXPECT_TRUE(buffers_ok({&norm, &scale, &ws}, {})) << "grad_norm.one-launch";
  for (const DeviceBuffer& b : g) EXPECT_TRUE(buffers_ok({}, {&b})) << "grad_norm.one-launch: a gradient changed";

  // Each tensor alone (a one-tensor list): its slots are the same bits as its range of the list's slots.
  size_t first = 0, bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t blocks = static_cast<size_t>(norm_blocks(sizes[i]));
    DeviceBuffer one_norm(8, "norm"), one_ws(grad_norm_cuda_workspace_bytes(&table[i], 1), "workspace");
    std::vector<unsigned char> one_staging(grad_norm_cuda_staging_bytes(1));
    grad_global_norm_cuda(one_norm.as<double>(), nullptr, &table[i], 1, 0.0, one_ws.as<void>(), one_ws.bytes(),
                          one_staging.data(), ctx().stream());
    const std::vector<uint8_t> one = one_ws.download_bytes();
    const size_t off = grad_norm_cuda_staging_bytes(1);
    if (blocks > 0 &&
        std::memcmp(one.data() + off, ws_bytes.data() + table_bytes + first * sizeof(double), blocks * 8) != 0)
      ++bad;
    first += blocks;
  }
  std::cout << "[check] grad_norm.one-launch vs one-tensor lists: " << count << " tensors, mismatches=" << bad << "\n";
  EXPECT_EQ(bad, 0u) << "a tensor's slots differ between the list and a one-tensor list";
}
