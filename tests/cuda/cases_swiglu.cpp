// SwiGLU: CUDA (src/ops/swiglu/swiglu.cu) vs the CPU reference (swiglu_ref.cpp), forward and backward, f32.
// Cases: odd lengths (1, 65, 127, 1000, 1026, 4097, 2^20 + 3), every input fill, and a saturating gate (scale 30:
// |gate| up to ~150, where exp(−gate) overflows fp32 on one side and σ rounds to 1 on the other). The bf16-output
// forward and backward must give exactly the bits of rounding the fp32 outputs with core/dtype.h's f32_to_bf16.
// Paths: the kernels take float4 for the first 4·⌊n/4⌋ elements when every pointer is 16-byte aligned (the harness's
// buffers are) and a scalar loop for the n % 4 rest (n = 1: scalar only; 1000: vector only; 65, 127, 1026, 4097,
// 2^20 + 3: both, Special's Inf at n − 1 in the rest). Each case runs again on pointers one float past the boundary
// (shifted_by_one: every element on the scalar path) and must give the aligned run's bits, for all three kernels.
//
// Tolerances (fp32 rule, harness.h). CUDA's expf is within 2 ulp (≤ 4u relative); the division and the products are
// correctly rounded (nvcc's default -prec-div=true; no fast math).
//   forward silu(g)·up = g / (1 + e^-g) · up: 4u (expf; its error reaches the sum with a factor ≤ 1) + 1u (1 + e)
//       + 1u (division) + 1u (product) = 7u: k = 10, mag = |out|.
//   backward σ and 1 − σ (= σ(−g), computed without cancellation) carry 6u each; t = 1 + g·(1 − σ) adds 1u relative
//       to 1 + |g|(1 − σ); dgate = d_out·up·σ·t adds 3 products: ≈ 16u, k = 20, mag = |d_out·up·σ|·(1 + |g|(1 − σ));
//       dup = d_out·g·σ: 6u + 2 products, k = 10, mag = |dup|.
#include <cuda_bf16.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "harness.h"
#include "ops/swiglu/swiglu.h"
#include "ops/swiglu/swiglu_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct SwigluCase {
  int64_t n;
  Fill fill;
  float gate_scale = 3.0f;
};

const std::vector<SwigluCase> kCases = {
    {1, Fill::Normal},     {65, Fill::Normal},       {127, Fill::Normal},     {1000, Fill::Normal},
    {4097, Fill::Normal},  {(1 << 20) + 3, Fill::Normal}, {1000, Fill::Normal, 30.0f}, {1000, Fill::Large, 1.0f},
    {127, Fill::Zeros},    {1000, Fill::Denormal},    {1000, Fill::Special},   {1, Fill::Special},
    {1026, Fill::Special}, {1026, Fill::Normal, 30.0f},
};

std::string name(const SwigluCase& c, const char* what) {
  return std::string("swiglu.") + what + " n=" + std::to_string(c.n) + " " + fill_name(c.fill) +
         " gate_scale=" + std::to_string(static_cast<int>(c.gate_scale));
}

}  // namespace

TEST(SwigluCuda, Forward) {
  HLM_REQUIRE_CUDA();
  for (const SwigluCase& c : kCases) {
    const auto n = static_cast<size_t>(c.n);
    const auto gate = make_values(n, c.fill, 11, c.gate_scale), up = make_values(n, c.fill, 12);
    std::vector<float> cpu(n);
    swiglu_forward(cpu.data(), gate.data(), up.data(), c.n);
    const auto g64 = to_f64(gate), u64 = to_f64(up);
    std::vector<double> ref(n);
    swiglu_forward<double>(ref.data(), g64.data(), u64.data(), c.n);

    DeviceBuffer g = DeviceBuffer::from(gate, "gate"), u = DeviceBuffer::from(up, "up"), out(n * 4, "out");
    swiglu_forward_cuda(out.as<float>(), g.as<float>(), u.as<float>(), c.n, ctx().stream());
    const auto gpu = out.download<float>();
    EXPECT_TRUE(check_f32(name(c, "fwd"), gpu, cpu, ref, abs_of(ref), {10}));
    EXPECT_TRUE(buffers_ok({&out}, {&g, &u})) << name(c, "fwd");

    // bf16 output: the bits of casting this fp32 output (core/dtype.h's rounding, NaN payloads included).
    DeviceBuffer out16(n * 2, "out bf16");
    swiglu_forward_bf16_cuda(out16.as<__nv_bfloat16>(), g.as<float>(), u.as<float>(), c.n, ctx().stream());
    const auto bits = out16.download<uint16_t>();
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) mismatches += bits[i] != f32_to_bf16(gpu[i]) ? 1 : 0;
    EXPECT_EQ(mismatches, 0u) << name(c, "fwd bf16 out vs cast of the fp32 out");
    EXPECT_TRUE(buffers_ok({&out16}, {&g, &u})) << name(c, "fwd bf16");

    // Misaligned pointers (one element past the boundary): the scalar path for every element, the same bits.
    DeviceBuffer gs = DeviceBuffer::from(shifted_by_one(gate), "gate+1"),
                 us = DeviceBuffer::from(shifted_by_one(up), "up+1"), outs((n + 1) * 4, "out+1"),
                 out16s((n + 1) * 2, "out bf16+1");
    swiglu_forward_cuda(outs.as<float>() + 1, gs.as<float>() + 1, us.as<float>() + 1, c.n, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd misaligned vs aligned"), body_after_one(outs), gpu));
    EXPECT_TRUE(first_unwritten(outs)) << name(c, "fwd misaligned");
    swiglu_forward_bf16_cuda(out16s.as<__nv_bfloat16>() + 1, gs.as<float>() + 1, us.as<float>() + 1, c.n,
                             ctx().stream());
    const auto bits_s = out16s.download<uint16_t>();
    size_t mismatches_s = bits_s[0] != 0xFFFFu ? 1 : 0;  // nothing written before the data
    for (size_t i = 0; i < n; ++i) mismatches_s += bits_s[i + 1] != bits[i] ? 1 : 0;
    EXPECT_EQ(mismatches_s, 0u) << name(c, "fwd bf16 misaligned vs aligned");
    EXPECT_TRUE(buffers_ok({&outs, &out16s}, {&gs, &us})) << name(c, "fwd misaligned");

    // out aliasing gate: same bits.
    swiglu_forward_cuda(g.as<float>(), g.as<float>(), u.as<float>(), c.n, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd in-place"), g.download<float>(), gpu));
  }
}

TEST(SwigluCuda, Backward) {
  HLM_REQUIRE_CUDA();
  for (const SwigluCase& c : kCases) {
    const auto n = static_cast<size_t>(c.n);
    const auto gate = make_values(n, c.fill, 11, c.gate_scale), up = make_values(n, c.fill, 12),
               dy = make_values(n, Fill::Normal, 13);
    std::vector<float> dg_cpu(n), du_cpu(n);
    swiglu_backward<float>(dg_cpu.data(), du_cpu.data(), dy.data(), gate.data(), up.data(), c.n);
    const auto g64 = to_f64(gate), u64 = to_f64(up), dy64 = to_f64(dy);
    std::vector<double> dg_ref(n), du_ref(n), mag_dg(n);
    swiglu_backward<double>(dg_ref.data(), du_ref.data(), dy64.data(), g64.data(), u64.data(), c.n);
    for (size_t i = 0; i < n; ++i) {
      const double sig = 1.0 / (1.0 + std::exp(-g64[i])), one_minus = 1.0 / (1.0 + std::exp(g64[i]));
      mag_dg[i] = std::abs(dy64[i] * u64[i] * sig) * (1.0 + std::abs(g64[i]) * one_minus);
    }

    DeviceBuffer g = DeviceBuffer::from(gate, "gate"), u = DeviceBuffer::from(up, "up"),
                 d = DeviceBuffer::from(dy, "d_out"), dg(n * 4, "dgate"), du(n * 4, "dup");
    swiglu_backward_cuda(dg.as<float>(), du.as<float>(), d.as<float>(), g.as<float>(), u.as<float>(), c.n,
                         ctx().stream());
    const auto dg_gpu = dg.download<float>(), du_gpu = du.download<float>();
    EXPECT_TRUE(check_f32(name(c, "bwd dgate"), dg_gpu, dg_cpu, dg_ref, mag_dg, {20}));
    EXPECT_TRUE(check_f32(name(c, "bwd dup"), du_gpu, du_cpu, du_ref, abs_of(du_ref), {10}));
    EXPECT_TRUE(buffers_ok({&dg, &du}, {&g, &u, &d})) << name(c, "bwd");

    // Misaligned pointers (one element past the boundary): the scalar path for every element, the same bits.
    DeviceBuffer gs = DeviceBuffer::from(shifted_by_one(gate), "gate+1"),
                 us = DeviceBuffer::from(shifted_by_one(up), "up+1"),
                 ds = DeviceBuffer::from(shifted_by_one(dy), "d_out+1"), dgs((n + 1) * 4, "dgate+1"),
                 dus((n + 1) * 4, "dup+1");
    swiglu_backward_cuda(dgs.as<float>() + 1, dus.as<float>() + 1, ds.as<float>() + 1, gs.as<float>() + 1,
                         us.as<float>() + 1, c.n, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dgate misaligned vs aligned"), body_after_one(dgs), dg_gpu));
    EXPECT_TRUE(check_exact(name(c, "bwd dup misaligned vs aligned"), body_after_one(dus), du_gpu));
    EXPECT_TRUE(first_unwritten(dgs) && first_unwritten(dus)) << name(c, "bwd misaligned");
    EXPECT_TRUE(buffers_ok({&dgs, &dus}, {&gs, &us, &ds})) << name(c, "bwd misaligned");

    // bf16 outputs: the bits of casting the fp32 dgate and dup (core/dtype.h's rounding), aligned (vector path) and
    // one element past the boundary (scalar path for every element).
    DeviceBuffer dg16(n * 2, "dgate bf16"), du16(n * 2, "dup bf16"), dg16s((n + 1) * 2, "dgate bf16+1"),
        du16s((n + 1) * 2, "dup bf16+1");
    swiglu_backward_bf16_cuda(dg16.as<__nv_bfloat16>(), du16.as<__nv_bfloat16>(), d.as<float>(), g.as<float>(),
                              u.as<float>(), c.n, ctx().stream());
    swiglu_backward_bf16_cuda(dg16s.as<__nv_bfloat16>() + 1, du16s.as<__nv_bfloat16>() + 1, ds.as<float>() + 1,
                              gs.as<float>() + 1, us.as<float>() + 1, c.n, ctx().stream());
    const auto dg_bits = dg16.download<uint16_t>(), du_bits = du16.download<uint16_t>();
    const auto dg_bits_s = dg16s.download<uint16_t>(), du_bits_s = du16s.download<uint16_t>();
    size_t bf16_mismatches = dg_bits_s[0] != 0xFFFFu || du_bits_s[0] != 0xFFFFu ? 1 : 0;  // nothing before the data
    for (size_t i = 0; i < n; ++i) {
      bf16_mismatches += dg_bits[i] != f32_to_bf16(dg_gpu[i]) || du_bits[i] != f32_to_bf16(du_gpu[i]) ? 1 : 0;
      bf16_mismatches += dg_bits_s[i + 1] != dg_bits[i] || du_bits_s[i + 1] != du_bits[i] ? 1 : 0;
    }
    std::cout << "[check] " << name(c, "bwd bf16 out vs cast of the fp32 out") << ": n=" << n
              << " exact, mismatches=" << bf16_mismatches << "\n";
    EXPECT_EQ(bf16_mismatches, 0u) << name(c, "bwd bf16 out vs cast of the fp32 out (aligned and misaligned)");
    EXPECT_TRUE(buffers_ok({&dg16, &du16, &dg16s, &du16s}, {&g, &u, &d, &gs, &us, &ds})) << name(c, "bwd bf16");

    // dgate aliasing d_out and dup aliasing up (the contract allows both): same bits.
    swiglu_backward_cuda(d.as<float>(), u.as<float>(), d.as<float>(), g.as<float>(), u.as<float>(), c.n,
                         ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dgate aliasing d_out"), d.download<float>(), dg_gpu));
    EXPECT_TRUE(check_exact(name(c, "bwd dup aliasing up"), u.download<float>(), du_gpu));
  }
}
