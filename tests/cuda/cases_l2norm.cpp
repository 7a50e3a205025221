// L2 normalisation: CUDA (src/ops/l2norm/l2norm.cu) vs the CPU reference (l2norm_ref.cpp), forward and backward, f32.
// Cases: the GDN head sizes (40, 64, 72, 128) and odd ones (1, 65, 1000), many rows, every input fill (large
// magnitudes, ±0, subnormals, NaN/±Inf), in place (y aliasing x, dx aliasing dy).
//
// Tolerances (fp32 rule, harness.h). T = l2norm_cuda_threads(): each thread sums ceil(D/T) terms with FMA, then
// block_sum adds log2(32) + T/32 roundings: L = ceil(D/T) + 5 + T/32 for Σx² (positive terms: relative error ≤ L·u).
//   r = 1/sqrt(Σx² + eps): (L + 1)/2 through the square root (sum and +eps), +1 sqrt, +1 division: k_r = (L+1)/2 + 2.
//   forward y = x·r: k = k_r + 1, mag = |y|.
//   backward dx = r·(dy − (x·r)·(r·Σx·dy)): the dot carries L roundings relative to Σ|x·dy|; the products and the
//       difference add k_r + L + 1 (r·dot), k_r + 1 (x·r), 1 (product), 1 (difference), k_r + 1 (·r):
//       k = 3·k_r + L + 5, mag = r·(|dy| + |x|·r²·Σ|x·dy|) (the same expression on absolute values).
#include <cmath>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/l2norm/l2norm.h"
#include "ops/l2norm/l2norm_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct L2Case {
  int64_t R, D;
  Fill fill;
};

const std::vector<L2Case> kCases = {
    {1, 1, Fill::Normal},     {3, 65, Fill::Normal},   {7, 128, Fill::Normal},  {5, 40, Fill::Normal},
    {300, 72, Fill::Normal},  {2, 1000, Fill::Normal}, {1000, 64, Fill::Normal}, {4, 127, Fill::Large},
    {3, 65, Fill::Zeros},     {3, 1000, Fill::Denormal}, {7, 127, Fill::Special}, {1, 1, Fill::Special},
};
constexpr float kEps = static_cast<float>(kL2NormEps);

std::string name(const L2Case& c, const char* what) {
  return std::string("l2norm.") + what + " R=" + std::to_string(c.R) + " D=" + std::to_string(c.D) + " " +
         fill_name(c.fill);
}

struct Bounds {
  double k_fwd, k_dx;
};
Bounds bounds(const L2Case& c) {
  const int T = l2norm_cuda_threads();
  const double L = std::ceil(static_cast<double>(c.D) / T) + 5 + T / 32;
  const double k_r = (L + 1) / 2 + 2;
  return {k_r + 1, 3 * k_r + L + 5};
}

// mag of dx (header comment), in double.
std::vector<double> dx_magnitude(const L2Case& c, const std::vector<float>& x, const std::vector<float>& dy) {
  std::vector<double> mag(x.size());
  for (int64_t r = 0; r < c.R; ++r) {
    double ss = 0, xg = 0;
    for (int64_t d = 0; d < c.D; ++d) {
      const double xv = x[static_cast<size_t>(r * c.D + d)];
      ss += xv * xv;
      xg += std::abs(xv * dy[static_cast<size_t>(r * c.D + d)]);
    }
    const double inv = 1.0 / std::sqrt(ss + kL2NormEps);
    for (int64_t d = 0; d < c.D; ++d) {
      const size_t i = static_cast<size_t>(r * c.D + d);
      mag[i] = inv * (std::abs(static_cast<double>(dy[i])) + std::abs(static_cast<double>(x[i])) * inv * inv * xg);
    }
  }
  return mag;
}

}  // namespace

TEST(L2normCuda, ForwardF32) {
  HLM_REQUIRE_CUDA();
  for (const L2Case& c : kCases) {
    const size_t n = static_cast<size_t>(c.R * c.D);
    const std::vector<float> xh = make_values(n, c.fill, 11);
    std::vector<float> cpu(n);
    l2norm_forward<float>(cpu.data(), xh.data(), c.R, c.D);
    std::vector<double> ref(n);
    const auto x64 = to_f64(xh);
    l2norm_forward<double>(ref.data(), x64.data(), c.R, c.D);

    DeviceBuffer x = DeviceBuffer::from(xh, "x"), y(n * 4, "y");
    l2norm_forward_cuda(y.as<float>(), x.as<float>(), {c.R, c.D, kEps}, ctx().stream());
    const std::vector<float> gpu = y.download<float>();
    EXPECT_TRUE(check_f32(name(c, "fwd f32"), gpu, cpu, ref, abs_of(ref), {bounds(c).k_fwd}));
    EXPECT_TRUE(buffers_ok({&y}, {&x})) << name(c, "fwd f32");

    // In place (y aliases x) gives the same bits.
    l2norm_forward_cuda(x.as<float>(), x.as<float>(), {c.R, c.D, kEps}, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd f32 in-place"), x.download<float>(), gpu));
    EXPECT_TRUE(x.guards_intact());
  }
}

TEST(L2normCuda, BackwardF32) {
  HLM_REQUIRE_CUDA();
  for (const L2Case& c : kCases) {
    const size_t n = static_cast<size_t>(c.R * c.D);
    const std::vector<float> xh = make_values(n, c.fill, 12), dyh = make_values(n, Fill::Normal, 13);
    std::vector<float> cpu(n);
    l2norm_backward<float>(cpu.data(), dyh.data(), xh.data(), c.R, c.D);
    std::vector<double> ref(n);
    const auto x64 = to_f64(xh), dy64 = to_f64(dyh);
    l2norm_backward<double>(ref.data(), dy64.data(), x64.data(), c.R, c.D);

    DeviceBuffer x = DeviceBuffer::from(xh, "x"), dy = DeviceBuffer::from(dyh, "dy"), dx(n * 4, "dx");
    l2norm_backward_cuda(dx.as<float>(), dy.as<float>(), x.as<float>(), {c.R, c.D, kEps}, ctx().stream());
    const std::vector<float> gpu = dx.download<float>();
    EXPECT_TRUE(check_f32(name(c, "bwd dx f32"), gpu, cpu, ref, dx_magnitude(c, xh, dyh), {bounds(c).k_dx}));
    EXPECT_TRUE(buffers_ok({&dx}, {&x, &dy})) << name(c, "bwd f32");

    // dx aliasing dy gives the same bits.
    l2norm_backward_cuda(dy.as<float>(), dy.as<float>(), x.as<float>(), {c.R, c.D, kEps}, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dx f32 in-place"), dy.download<float>(), gpu));
    EXPECT_TRUE(dy.guards_intact());
  }
}
