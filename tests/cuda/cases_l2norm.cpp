// L2 normalisation: CUDA (src/ops/l2norm/l2norm.cu) vs the CPU reference (l2norm_ref.cpp), forward and backward, f32.
// Cases: both kernel paths (l2norm_cuda.h): the warp-per-row path (D ≤ l2norm_cuda_warp_max_dim(); float4 loads for
// the GDN head sizes 40, 64, 72, 128 and 100, 1000, 1024; scalar for 1, 37, 65, 127, and for misaligned pointers) and
// the block-per-row path (1025, 1500); row counts that are not multiples of the 8 rows of a warp-path block; every
// input fill (large magnitudes, ±0, subnormals, NaN/±Inf); in place (y aliasing x, dx aliasing dy).
//
// Tolerances (fp32 rule, harness.h). L = the longest chain of roundings in Σx² (the order l2norm_cuda.h states;
// positive terms: relative error ≤ L·u):
//   warp path (D ≤ l2norm_cuda_warp_max_dim()): a lane sums with FMA, in order, at most 4·ceil(D/128)
//       terms when the pointers are 16-byte aligned and D % 4 == 0 (the float4 order), else ceil(D/32) (the scalar
//       fallback); then the xor-shuffle tree adds log2(32) = 5: L = 4·ceil(D/128) + 5 or ceil(D/32) + 5.
//   block path: T = l2norm_cuda_threads(): each thread sums ceil(D/T) terms with FMA, then block_sum adds
//       log2(32) + T/32 roundings: L = ceil(D/T) + 5 + T/32.
//   r = 1/sqrt(Σx² + eps): (L + 1)/2 through the square root (sum and +eps), +1 sqrt, +1 division: k_r = (L+1)/2 + 2.
//   forward y = x·r: k = k_r + 1, mag = |y|.
//   backward dx = r·(dy − (x·r)·(r·Σx·dy)): the dot carries L roundings relative to Σ|x·dy|; the products and the
//       difference add k_r + L + 1 (r·dot), k_r + 1 (x·r), 1 (product), 1 (difference), k_r + 1 (·r):
//       k = 3·k_r + L + 5, mag = r·(|dy| + |x|·r²·Σ|x·dy|) (the same expression on absolute values).
#include <algorithm>
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
    // warp path: row counts not multiples of 8, odd and vector-multiple lengths, the largest warp-path row
    {1003, 128, Fill::Normal}, {301, 37, Fill::Normal}, {13, 100, Fill::Normal}, {9, 1024, Fill::Normal},
    {37, 128, Fill::Large},    {11, 128, Fill::Special}, {5, 128, Fill::Denormal}, {3, 128, Fill::Zeros},
    // just past the warp path: one block per row
    {5, 1025, Fill::Normal},   {3, 1500, Fill::Normal},  {3, 1025, Fill::Special},
};
constexpr float kEps = static_cast<float>(kL2NormEps);

std::string name(const L2Case& c, const char* what) {
  return std::string("l2norm.") + what + " R=" + std::to_string(c.R) + " D=" + std::to_string(c.D) + " " +
         fill_name(c.fill);
}

struct Bounds {
  double k_fwd, k_dx;
};
// Longest chain of roundings in a row sum (header comment); `aligned`: every pointer 16-byte aligned (DeviceBuffer
// bodies are; the misaligned test offsets them).
double sum_chain(int64_t D, bool aligned) {
  if (D <= l2norm_cuda_warp_max_dim()) {
    if (aligned && D % 4 == 0) return static_cast<double>(4 * ((D + 127) / 128)) + 5;
    return static_cast<double>((D + 31) / 32) + 5;
  }
  const int T = l2norm_cuda_threads();
  return std::ceil(static_cast<double>(D) / T) + 5 + T / 32;
}

Bounds bounds(const L2Case& c, bool aligned = true) {
  const double L = sum_chain(c.D, aligned);
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

// Pointers one float past a 16-byte boundary: the warp path falls back to scalar loads (D is a multiple of 4, so only
// the alignment rules the vectors out), with the scalar order's bounds; the element before each output stays
// unwritten.
TEST(L2normCuda, MisalignedF32) {
  HLM_REQUIRE_CUDA();
  for (const L2Case& c : {L2Case{37, 128, Fill::Normal}, L2Case{5, 1000, Fill::Normal}}) {
    const size_t n = static_cast<size_t>(c.R * c.D);
    const std::vector<float> xh = make_values(n, c.fill, 14), dyh = make_values(n, Fill::Normal, 15);
    DeviceBuffer x = DeviceBuffer::from(shifted_by_one(xh), "x+1"),
                 dy = DeviceBuffer::from(shifted_by_one(dyh), "dy+1"),
                 y((n + 1) * 4, "y+1"), dx((n + 1) * 4, "dx+1");
    const auto x64 = to_f64(xh), dy64 = to_f64(dyh);

    std::vector<float> cpu(n);
    l2norm_forward<float>(cpu.data(), xh.data(), c.R, c.D);
    std::vector<double> ref(n);
    l2norm_forward<double>(ref.data(), x64.data(), c.R, c.D);
    l2norm_forward_cuda(y.as<float>() + 1, x.as<float>() + 1, {c.R, c.D, kEps}, ctx().stream());
    EXPECT_TRUE(
        check_f32(name(c, "fwd f32 misaligned"), body_after_one(y), cpu, ref, abs_of(ref), {bounds(c, false).k_fwd}));
    EXPECT_TRUE(first_unwritten(y)) << name(c, "fwd f32 misaligned");

    l2norm_backward<float>(cpu.data(), dyh.data(), xh.data(), c.R, c.D);
    l2norm_backward<double>(ref.data(), dy64.data(), x64.data(), c.R, c.D);
    l2norm_backward_cuda(dx.as<float>() + 1, dy.as<float>() + 1, x.as<float>() + 1, {c.R, c.D, kEps},
                         ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "bwd dx f32 misaligned"), body_after_one(dx), cpu, ref, dx_magnitude(c, xh, dyh),
                          {bounds(c, false).k_dx}));
    EXPECT_TRUE(first_unwritten(dx)) << name(c, "bwd f32 misaligned");
    EXPECT_TRUE(buffers_ok({&y, &dx}, {&x, &dy})) << name(c, "misaligned f32");
  }
}
