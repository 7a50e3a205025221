// Gated RMSNorm: CUDA (src/ops/gated_rmsnorm/gated_rmsnorm.cu) vs the CPU reference (gated_rmsnorm_ref.cpp), forward
// and backward, f32. Cases: GDN value-head sizes (40, 64, 72, 128) and odd ones (1, 65, 1000), enough rows for a
// multi-chunk dw sum (300, 1000), eps 1e-5 (OLMo) and 1e-6, every fill of x (large, ±0, subnormal, NaN/±Inf); z is
// N(0, 3²), so the gate spans saturated and linear regions.
//
// Tolerances (fp32 rule, harness.h). T = gated_rmsnorm_cuda_threads(); each thread sums ceil(D/T) terms with FMA,
// block_sum adds log2(32) + T/32: L = ceil(D/T) + 5 + T/32. expf ≤ 2 ulp (4u).
//   r = 1/sqrt(Σx²/D + eps): (L + 2)/2 through the square root, +1 sqrt, +1 division: k_r = (L + 2)/2 + 2.
//   silu(z) = z/(1 + e^-z) and σ(z): 4u + u + u = 6u each.
//   forward y = ((x·r)·w)·silu(z): k_r + 3 products + 6: k = k_r + 9, mag = |y|.
//   dz = (dy·w)·n·σ(z)·(1 + z·σ(−z)), n = x·r: (k_r + 1) + 6 (σ) + (6 + 1 + 1) (the bracket, relative to
//       1 + |z|σ(−z)) + 4 products: k = k_r + 19, mag = |dy·w·n·σ(z)|·(1 + |z|σ(−z)).
//   dx = r·(gn − n·m), gn = dy·w·silu(z) (8u), m = (Σ gn·x)·r/D: the dot carries L + 8 relative to Σ|gn·x|, m adds
//       k_r + 2, n·m adds k_r + 2, the difference 1, ·r k_r + 1: k = L + 3·k_r + 16,
//       mag = r·(|gn| + |x|·r·r·Σ|gn·x|/D) (the same expression on absolute values).
//   dw = Σ_rows dy·x·r·silu(z): terms carry k_r + 9, the column sum P = column_sum_path_length roundings:
//       k = P + k_r + 9, mag = Σ_rows |term|.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/column_sum.h"
#include "harness.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/gated_rmsnorm/gated_rmsnorm_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct GrnCase {
  int64_t R, D;
  Fill fill;  // of x
  float eps = 1e-5f;
};

const std::vector<GrnCase> kCases = {
    {1, 1, Fill::Normal},      {3, 65, Fill::Normal},    {300, 128, Fill::Normal, 1e-6f}, {1000, 72, Fill::Normal},
    {5, 40, Fill::Normal},     {2, 1000, Fill::Normal},  {4, 127, Fill::Large},           {3, 65, Fill::Zeros},
    {3, 128, Fill::Denormal},  {7, 127, Fill::Special},  {1, 1, Fill::Special},
};

std::string name(const GrnCase& c, const char* what) {
  return std::string("gated_rmsnorm.") + what + " R=" + std::to_string(c.R) + " D=" + std::to_string(c.D) + " " +
         fill_name(c.fill) + " eps=" + (c.eps == 1e-5f ? "1e-5" : "1e-6");
}

struct Bounds {
  double k_fwd, k_dz, k_dx, k_dw;
};
Bounds bounds(const GrnCase& c) {
  const int T = gated_rmsnorm_cuda_threads();
  const double L = std::ceil(static_cast<double>(c.D) / T) + 5 + T / 32;
  const double k_r = (L + 2) / 2 + 2;
  const double P = static_cast<double>(column_sum_path_length(column_sum_plan(c.R, c.D, ~size_t{0} / 2)));
  return {k_r + 9, k_r + 19, L + 3 * k_r + 16, P + k_r + 9};
}

struct Inputs {
  std::vector<float> x, z, w, dy;
};
Inputs make_inputs(const GrnCase& c) {
  const size_t n = static_cast<size_t>(c.R * c.D);
  return {make_values(n, c.fill, 31), make_values(n, Fill::Normal, 32, 3.0f),
          make_values(static_cast<size_t>(c.D), Fill::Normal, 33), make_values(n, Fill::Normal, 34)};
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

struct Magnitudes {
  std::vector<double> dx, dz, dw;
};
Magnitudes backward_magnitudes(const GrnCase& c, const Inputs& in) {
  const int64_t R = c.R, D = c.D;
  Magnitudes m{std::vector<double>(in.x.size()), std::vector<double>(in.x.size()),
               std::vector<double>(static_cast<size_t>(D), 0.0)};
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0, gx = 0;
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = static_cast<size_t>(r * D + d);
      const double x = in.x[i], z = in.z[i];
      ss += x * x;
      gx += std::abs(static_cast<double>(in.dy[i]) * in.w[static_cast<size_t>(d)] * z * sigmoid(z) * x);
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + c.eps);
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = static_cast<size_t>(r * D + d);
      const double x = in.x[i], z = in.z[i];
      const double dyw = std::abs(static_cast<double>(in.dy[i]) * in.w[static_cast<size_t>(d)]);
      const double n = std::abs(x) * inv, s = sigmoid(z);
      m.dx[i] = inv * (dyw * std::abs(z) * s + n * inv * gx / static_cast<double>(D));
      m.dz[i] = dyw * n * s * (1.0 + std::abs(z) * (1.0 - s));
      m.dw[static_cast<size_t>(d)] += std::abs(static_cast<double>(in.dy[i]) * x * inv * z * s);
    }
  }
  return m;
}

}  // namespace

TEST(GatedRmsnormCuda, ForwardF32) {
  HLM_REQUIRE_CUDA();
  for (const GrnCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size();
    std::vector<float> cpu(n);
    gated_rmsnorm_forward<float>(cpu.data(), in.x.data(), in.z.data(), in.w.data(), c.R, c.D, c.eps);
    std::vector<double> ref(n);
    const auto x64 = to_f64(in.x), z64 = to_f64(in.z), w64 = to_f64(in.w);
    gated_rmsnorm_forward<double>(ref.data(), x64.data(), z64.data(), w64.data(), c.R, c.D, c.eps);

    const GatedRmsnormCudaParams p{c.R, c.D, c.eps};
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), z = DeviceBuffer::from(in.z, "z"),
                 w = DeviceBuffer::from(in.w, "w"),
                 y(n * 4, "y");
    gated_rmsnorm_forward_cuda(y.as<float>(), x.as<float>(), z.as<float>(), w.as<float>(), p, ctx().stream());
    const std::vector<float> gpu = y.download<float>();
    EXPECT_TRUE(check_f32(name(c, "fwd f32"), gpu, cpu, ref, abs_of(ref), {bounds(c).k_fwd}));
    EXPECT_TRUE(buffers_ok({&y}, {&x, &z, &w})) << name(c, "fwd f32");

    // y aliasing x, then y aliasing z: the same bits.
    DeviceBuffer x2 = DeviceBuffer::from(in.x, "x (in place)"), z2 = DeviceBuffer::from(in.z, "z (in place)");
    gated_rmsnorm_forward_cuda(x2.as<float>(), x2.as<float>(), z.as<float>(), w.as<float>(), p, ctx().stream());
    gated_rmsnorm_forward_cuda(z2.as<float>(), x.as<float>(), z2.as<float>(), w.as<float>(), p, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd f32 y=x"), x2.download<float>(), gpu));
    EXPECT_TRUE(check_exact(name(c, "fwd f32 y=z"), z2.download<float>(), gpu));
    EXPECT_TRUE(buffers_ok({&x2, &z2}, {}));
  }
}

TEST(GatedRmsnormCuda, BackwardF32) {
  HLM_REQUIRE_CUDA();
  for (const GrnCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), nd = static_cast<size_t>(c.D);
    std::vector<float> dx32(n), dz32(n), dw32(nd);
    gated_rmsnorm_backward<float>(dx32.data(), dz32.data(), dw32.data(), in.dy.data(), in.x.data(), in.z.data(),
                                  in.w.data(), c.R, c.D, c.eps);
    const auto x64 = to_f64(in.x), z64 = to_f64(in.z), w64 = to_f64(in.w), dy64 = to_f64(in.dy);
    std::vector<double> dx64(n), dz64(n), dw64(nd);
    gated_rmsnorm_backward<double>(dx64.data(), dz64.data(), dw64.data(), dy64.data(), x64.data(), z64.data(),
                                   w64.data(), c.R, c.D, c.eps);
    const Magnitudes mag = backward_magnitudes(c, in);
    const Bounds b = bounds(c);

    const GatedRmsnormCudaParams p{c.R, c.D, c.eps};
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), z = DeviceBuffer::from(in.z, "z"),
                 w = DeviceBuffer::from(in.w, "w"),
                 dy = DeviceBuffer::from(in.dy, "dy"), dx(n * 4, "dx"), dz(n * 4, "dz"), dw(nd * 4, "dw");
    DeviceBuffer ws(gated_rmsnorm_backward_cuda_workspace_bytes(p), "workspace");
    gated_rmsnorm_backward_cuda(dx.as<float>(), dz.as<float>(), dw.as<float>(), dy.as<float>(), x.as<float>(),
                                z.as<float>(), w.as<float>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
    const std::vector<float> dx_gpu = dx.download<float>(), dz_gpu = dz.download<float>();
    EXPECT_TRUE(check_f32(name(c, "bwd dx"), dx_gpu, dx32, dx64, mag.dx, {b.k_dx}));
    EXPECT_TRUE(check_f32(name(c, "bwd dz"), dz_gpu, dz32, dz64, mag.dz, {b.k_dz}));
    EXPECT_TRUE(check_f32(name(c, "bwd dw"), dw.download<float>(), dw32, dw64, mag.dw, {b.k_dw}));
    EXPECT_TRUE(buffers_ok({&dx, &dz, &dw, &ws}, {&x, &z, &w, &dy})) << name(c, "bwd");

    // dw not wanted: dx and dz keep their bits.
    DeviceBuffer dx2(n * 4, "dx (no dw)"), dz2(n * 4, "dz (no dw)");
    gated_rmsnorm_backward_cuda(dx2.as<float>(), dz2.as<float>(), nullptr, dy.as<float>(), x.as<float>(),
                                z.as<float>(), w.as<float>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dx (no dw)"), dx2.download<float>(), dx_gpu));
    EXPECT_TRUE(check_exact(name(c, "bwd dz (no dw)"), dz2.download<float>(), dz_gpu));
  }
}
