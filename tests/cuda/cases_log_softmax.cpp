// Log-softmax: CUDA (src/ops/log_softmax/log_softmax.cu) vs the CPU reference (log_softmax_ref.cpp, f32 only) and an
// fp64 reference written here (log-softmax of the same float inputs in double). The backward has no CPU reference
// yet: it is checked against dx = d_out − exp(out) · Σ d_out in double (cpu32 = that value rounded to f32).
// Cases: odd vocabularies (1, 65, 127, 257, 1000, 4097, a real-size 151936), several rows, every input fill (large
// magnitudes ~1e15, zeros, subnormals, NaN/±Inf), a row of all −inf, aliasing (out = x, dx = d_out).
//
// Tolerances (fp32; harness.h has the rules). Per row m = max x, log_sum = log Σ exp(x − m), p = softmax(x).
//   out = (x − m) − log_sum: the GPU rounds x − m (≤ u·|x − m|), log_sum to f32 (≤ u·|log_sum|, from an fp64 sum
//     whose different order may move it to the neighbouring float) and the difference (≤ u·|out|); the float x − m
//     inside exp moves log_sum by ≤ u·Σ_v p_v·|x_v − m|. mag = the sum of those four magnitudes, k = 2 (each term is
//     at most one rounding; 2 leaves room for the fp64 sum, ~1e-13 relative, tipping a rounding the other way).
//   lse = m + log_sum: same reasoning with |m| in place of |x − m| and |out|: k = 2.
//   backward: fp64 throughout and rounded once; the only difference from the reference is the fp64 sum order
//     (≤ (V/256 + 13)·2^-53 relative to Σ|d_out|, about 1e-12 u), so k = 1 with mag = |d_out| + exp(out)·Σ|d_out|.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/log_softmax/log_softmax.h"
#include "ops/log_softmax/log_softmax_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct LsCase {
  int64_t R, V;
  Fill fill;
  bool neg_inf_row = false;  // row 0 is all −inf (max −inf: NaN out, −inf lse)
};

const std::vector<LsCase> kCases = {
    {1, 1, Fill::Normal},     {3, 65, Fill::Normal},     {5, 127, Fill::Normal},   {2, 1000, Fill::Normal},
    {4, 4097, Fill::Normal},  {2, 151936, Fill::Normal}, {300, 257, Fill::Normal}, {7, 257, Fill::Large},
    {3, 65, Fill::Zeros},     {3, 1000, Fill::Denormal}, {7, 127, Fill::Special},  {1, 1, Fill::Special},
    {3, 33, Fill::Normal, true},
};

std::string name(const LsCase& c, const char* what) {
  return std::string("log_softmax.") + what + " R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) + " " +
         fill_name(c.fill) + (c.neg_inf_row ? " -inf-row" : "");
}

std::vector<float> make_x(const LsCase& c) {
  // Scale 4: logits spread over ~±16, so the softmax is far from uniform.
  std::vector<float> x = make_values(static_cast<size_t>(c.R * c.V), c.fill, 61, 4.0f);
  if (c.neg_inf_row) std::fill(x.begin(), x.begin() + c.V, -std::numeric_limits<float>::infinity());
  return x;
}

// fp64 reference of one row's statistics on the float inputs.
struct RowRef {
  double max = 0, log_sum = 0, spread = 0;  // spread = Σ_v p_v·|x_v − m|
};
RowRef row_ref(const float* x, int64_t V) {
  RowRef r;
  r.max = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) r.max = std::max(r.max, static_cast<double>(x[v]));
  double sum = 0, spread = 0;
  for (int64_t v = 0; v < V; ++v) {
    const double e = std::exp(static_cast<double>(x[v]) - r.max);
    sum += e;
    if (e > 0) spread += e * std::abs(static_cast<double>(x[v]) - r.max);  // a −inf entry adds 0, not 0·inf
  }
  r.log_sum = std::log(sum);
  r.spread = spread / sum;
  return r;
}

}  // namespace

TEST(LogSoftmaxCuda, ForwardAndLogsumexp) {
  HLM_REQUIRE_CUDA();
  for (const LsCase& c : kCases) {
    const std::vector<float> x = make_x(c);
    const size_t n = x.size();
    std::vector<float> cpu(n), cpu_lse(static_cast<size_t>(c.R));
    log_softmax_forward(cpu.data(), x.data(), c.R, c.V);
    logsumexp_forward(cpu_lse.data(), x.data(), c.R, c.V);
    std::vector<double> ref(n), mag(n), ref_lse(static_cast<size_t>(c.R)), mag_lse(static_cast<size_t>(c.R));
    for (int64_t r = 0; r < c.R; ++r) {
      const float* xr = x.data() + r * c.V;
      const RowRef s = row_ref(xr, c.V);
      ref_lse[static_cast<size_t>(r)] = s.max + s.log_sum;
      mag_lse[static_cast<size_t>(r)] = std::abs(s.max) + std::abs(s.log_sum) + s.spread;
      for (int64_t v = 0; v < c.V; ++v) {
        const size_t i = static_cast<size_t>(r * c.V + v);
        ref[i] = static_cast<double>(xr[v]) - s.max - s.log_sum;
        mag[i] = std::abs(static_cast<double>(xr[v]) - s.max) + std::abs(s.log_sum) + std::abs(ref[i]) + s.spread;
      }
    }

    const LogSoftmaxCudaParams p{c.R, c.V};
    DeviceBuffer xb = DeviceBuffer::from(x, "x"), out(n * 4, "out"), lse(static_cast<size_t>(c.R) * 4, "lse");
    log_softmax_forward_cuda(out.as<float>(), xb.as<float>(), p, ctx().stream());
    logsumexp_forward_cuda(lse.as<float>(), xb.as<float>(), p, ctx().stream());
    const std::vector<float> gpu = out.download<float>();
    EXPECT_TRUE(check_f32(name(c, "fwd"), gpu, cpu, ref, mag, {2}));
    EXPECT_TRUE(check_f32(name(c, "logsumexp"), lse.download<float>(), cpu_lse, ref_lse, mag_lse, {2}));
    EXPECT_TRUE(buffers_ok({&out, &lse}, {&xb})) << name(c, "fwd");

    // In place (out aliases x) gives the same bits.
    log_softmax_forward_cuda(xb.as<float>(), xb.as<float>(), p, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd in-place"), xb.download<float>(), gpu));
    EXPECT_TRUE(xb.guards_intact());
  }
}

TEST(LogSoftmaxCuda, Backward) {
  HLM_REQUIRE_CUDA();
  for (const LsCase& c : kCases) {
    // Saved log-probabilities from the CPU forward of finite logits; the fill goes into d_out.
    const LsCase logits_case{c.R, c.V, Fill::Normal};
    const std::vector<float> x = make_x(logits_case);
    const size_t n = x.size();
    std::vector<float> out(n);
    log_softmax_forward(out.data(), x.data(), c.R, c.V);
    std::vector<float> dy = make_values(n, c.fill, 62);
    if (c.neg_inf_row) std::fill(dy.begin(), dy.begin() + c.V, 0.0f);  // a row with no gradient

    std::vector<double> ref(n), mag(n);
    for (int64_t r = 0; r < c.R; ++r) {
      double sum = 0, abs_sum = 0;
      for (int64_t v = 0; v < c.V; ++v) {
        sum += static_cast<double>(dy[static_cast<size_t>(r * c.V + v)]);
        abs_sum += std::abs(static_cast<double>(dy[static_cast<size_t>(r * c.V + v)]));
      }
      for (int64_t v = 0; v < c.V; ++v) {
        const size_t i = static_cast<size_t>(r * c.V + v);
        const double p = std::exp(static_cast<double>(out[i]));
        ref[i] = static_cast<double>(dy[i]) - p * sum;
        mag[i] = std::abs(static_cast<double>(dy[i])) + p * abs_sum;
      }
    }
    const std::vector<float> cpu = to_f32(ref);  // no CPU float backward: the fp64 value rounded once

    const LogSoftmaxCudaParams p{c.R, c.V};
    DeviceBuffer ob = DeviceBuffer::from(out, "out"), dyb = DeviceBuffer::from(dy, "d_out"), dx(n * 4, "dx");
    log_softmax_backward_cuda(dx.as<float>(), dyb.as<float>(), ob.as<float>(), p, ctx().stream());
    const std::vector<float> gpu = dx.download<float>();
    EXPECT_TRUE(check_f32(name(c, "bwd"), gpu, cpu, ref, mag, {1}));
    EXPECT_TRUE(buffers_ok({&dx}, {&ob, &dyb})) << name(c, "bwd");

    // dx aliasing d_out gives the same bits.
    log_softmax_backward_cuda(dyb.as<float>(), dyb.as<float>(), ob.as<float>(), p, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd in-place"), dyb.download<float>(), gpu));
    EXPECT_TRUE(dyb.guards_intact());
  }
}
