// AdamW and the global gradient norm: CUDA (src/ops/adamw/{adamw,grad_norm}.cu) vs the CPU optimizer
// (src/train/adamw.cpp: AdamW::step, double per element, rounded once) and clip_grad_norm (src/train/grad_utils.cpp),
// with an fp64 reference of the torch formula written here (exact moments, not the fp32-rounded ones the CPU uses:
// that difference is the CPU's own error, which the harness's |cpu32 − ref64| term admits).
// Cases: odd sizes (1, 65, 127, 257, 1000, 4097, 2^20 + 3), steps 1 … 1000 (bias corrections), with and without
// weight decay, every gradient fill (large ~1e15, zeros, subnormals, NaN/±Inf), the bf16 parameter copy, clipping
// over several tensors (scale < 1 and scale = 1), and non-finite norms (the step is skipped).
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
    grad_global_norm_cuda(norm.as<double>(), scale.as<float>(), table.data(), table.size(), max_norm, ws.as<void>(),
                          ws.bytes(), ctx().stream());
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
    grad_global_norm_cuda(norm.as<double>(), scale.as<float>(), table, 1, 1.0, ws.as<void>(), ws.bytes(),
                          ctx().stream());
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
    DeviceBuffer norm(8, "norm"), ws(grad_norm_cuda_workspace_bytes(nullptr, 0), "workspace");
    const GradNormCudaTensor empty[] = {{nullptr, 0}};
    grad_global_norm_cuda(norm.as<double>(), nullptr, empty, 1, 0.0, ws.as<void>(), ws.bytes(), ctx().stream());
    EXPECT_EQ(norm.download<double>()[0], 0.0);
  }
  const std::vector<float> big = make_values(4097, Fill::Large, 95);
  std::vector<Tensor> grads = {host_tensor(big)};
  const double norm_cpu = grad_global_norm(grads);
  DeviceBuffer g = DeviceBuffer::from(big, "grad"), norm(8, "norm");
  const GradNormCudaTensor table[] = {{g.as<float>(), 4097}};
  DeviceBuffer ws(grad_norm_cuda_workspace_bytes(table, 1), "workspace");
  grad_global_norm_cuda(norm.as<double>(), nullptr, table, 1, 0.0, ws.as<void>(), ws.bytes(), ctx().stream());
  const double norm_gpu = norm.download<double>()[0];
  const double bound = 2.0 * (4097 + 64) * 0x1p-53 * norm_cpu;
  std::cout << "[check] grad_norm large: gpu " << norm_gpu << " cpu " << norm_cpu << " bound " << bound << "\n";
  EXPECT_LE(std::abs(norm_gpu - norm_cpu), bound);
  EXPECT_TRUE(buffers_ok({&norm, &ws}, {&g}));
}
