// Residual add: CUDA (src/ops/residual/residual.cu) vs the CPU reference (residual_ref.cpp), f32, bit-identical
// (one rounded product and one rounded sum per element on both sides; the CPU build does not contract to FMA and the
// kernel uses __fmul_rn/__fadd_rn). Cases: odd lengths (1, 65, 127, 1000, 2^20 + 3), scales 1 (most models),
// 0.22 (Granite's residual_multiplier) and −3, every fill.
#include <string>
#include <vector>

#include "harness.h"
#include "ops/residual/residual.h"
#include "ops/residual/residual_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct ResidualCase {
  int64_t n;
  Fill fill;
  float scale;
};

const std::vector<ResidualCase> kCases = {
    {1, Fill::Normal, 1.0f},        {65, Fill::Normal, 0.22f},       {127, Fill::Normal, -3.0f},
    {1000, Fill::Normal, 0.22f},    {(1 << 20) + 3, Fill::Normal, 1.0f}, {1000, Fill::Large, 0.22f},
    {127, Fill::Zeros, 1.0f},       {1000, Fill::Denormal, 0.22f},   {1000, Fill::Special, 1.0f},
    {1, Fill::Special, -3.0f},
};

}  // namespace

TEST(ResidualCuda, AddForward) {
  HLM_REQUIRE_CUDA();
  for (const ResidualCase& c : kCases) {
    const std::string what = "residual.add n=" + std::to_string(c.n) + " " + fill_name(c.fill) +
                             " scale=" + std::to_string(c.scale);
    const auto n = static_cast<size_t>(c.n);
    const auto x0 = make_values(n, c.fill, 21), delta = make_values(n, c.fill, 22);
    std::vector<float> cpu = x0;
    residual_add_forward(cpu.data(), delta.data(), c.scale, c.n);

    DeviceBuffer x = DeviceBuffer::from(x0, "x"), d = DeviceBuffer::from(delta, "delta");
    residual_add_forward_cuda(x.as<float>(), d.as<float>(), c.scale, c.n, ctx().stream());
    EXPECT_TRUE(check_exact(what, x.download<float>(), cpu));
    EXPECT_TRUE(buffers_ok({&x}, {&d})) << what;
  }
}
