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
//
// bf16 gate and up (swiglu_forward_bf16_in_cuda, swiglu_backward_bf16_in_cuda; Bf16InputForward / Bf16InputBackward;
// and with a bf16 d_out too, swiglu_backward_bf16_all_cuda, Bf16AllInputsBackward):
// byte for byte the bits of the fp32-input bf16-output kernels above run on fp32 copies of the same bf16 values (the
// widening is exact, so any difference is the kernels' own), NaN payloads included. Lengths 1, 3 (scalar only), 5
// (one float4 and a rest), 4099, 65539 (every bf16 bit pattern as gate) and 2^27 + 2^20 + 3 (more than one grid's
// worth: 32768 blocks · 256 threads · 4 float4 · 4 elements, so both the vector and the scalar grid-stride loops go
// round more than once). Inputs: N(0, 1)·scale rounded to bf16, or edge values (±0, ±Inf, NaNs of both signs with
// payloads, ±88, ±89, ±100, ≈ ±1e4, subnormals, ±max finite) interleaved with arbitrary bit patterns. Pointers: aligned
// (vector path), 4 elements past the boundary (8-byte aligned, not 16: still the vector path for bf16) and 1 element
// past (scalar path); out aliasing gate for the forward.
#include <cuda_bf16.h>

#include <cmath>
#include <iostream>
#include <random>
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

// ---- bf16 gate and up

enum class Bf16InFill {
  Normal,    // N(0, 1) · scale, rounded to bf16
  Edge,      // every other element from kBf16InEdges, the rest arbitrary 16-bit patterns
  Patterns,  // gate: element i holds pattern (40503·i) mod 2^16, i.e. every bf16 pattern in 65536 elements; up: Edge
};

const uint16_t kBf16InEdges[] = {
    0x0000, 0x8000,                  // ±0
    0x7F80, 0xFF80,                  // ±Inf
    0x7FC0, 0xFFC1, 0x7F81, 0xFFFF,  // NaNs: quiet, negative with payload, signaling, all ones
    0x42B0, 0xC2B0, 0x42B2, 0xC2B2,  // ±88, ±89 (e^89 overflows fp32)
    0x42C8, 0xC2C8, 0x461C, 0xC61C,  // ±100, ±9984 (≈ 1e4)
    0x0001, 0x8001, 0x007F, 0x0080,  // subnormals (smallest, largest) and the smallest normal
    0x7F7F, 0xFF7F, 0x3F80, 0xBF80,  // ±max finite, ±1
};

struct Bf16InCase {
  int64_t n;
  Bf16InFill fill;
  float gate_scale = 3.0f;
};

// 2^27 + 2^20 + 3: past one grid's worth of float4 for the forward (kMaxGridBlocks · 256 threads · 4 unroll = 2^25
// float4, n / 4 > 2^25), and so for the backward (unroll 2) and the scalar path (2^23 threads).
constexpr int64_t kBf16InBeyondGrid = (int64_t{1} << 27) + (int64_t{1} << 20) + 3;

const std::vector<Bf16InCase> kBf16InCases = {
    {1, Bf16InFill::Edge},      {3, Bf16InFill::Edge},       {5, Bf16InFill::Edge},
    {5, Bf16InFill::Normal},    {4099, Bf16InFill::Normal},  {4099, Bf16InFill::Normal, 30.0f},
    {4099, Bf16InFill::Edge},   {65539, Bf16InFill::Patterns}, {kBf16InBeyondGrid, Bf16InFill::Normal},
};

std::string bf16in_name(const Bf16InCase& c, const char* what, size_t offset) {
  static const char* const fills[] = {"normal", "edge", "patterns"};
  return std::string("swiglu.") + what + " n=" + std::to_string(c.n) + " " + fills[static_cast<int>(c.fill)] +
         " gate_scale=" + std::to_string(static_cast<int>(c.gate_scale)) + " offset=" + std::to_string(offset);
}

std::vector<uint16_t> bf16in_values(size_t n, Bf16InFill fill, uint64_t stream, float scale, bool gate) {
  if (fill == Bf16InFill::Normal) return to_bf16(make_values(n, Fill::Normal, stream, scale));
  std::mt19937_64 rng(stream);
  constexpr size_t kEdges = sizeof(kBf16InEdges) / sizeof(kBf16InEdges[0]);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (fill == Bf16InFill::Patterns && gate)
      v[i] = static_cast<uint16_t>(40503u * i);  // odd multiplier: a bijection on any 2^16 consecutive i
    else
      v[i] = i % 2 == 0 ? kBf16InEdges[(i / 2 + stream) % kEdges] : static_cast<uint16_t>(rng());
  }
  return v;
}

// v after `by` zeros: upload and pass as<__nv_bfloat16>() + by.
std::vector<uint16_t> bf16in_shifted(const std::vector<uint16_t>& v, size_t by) {
  std::vector<uint16_t> s(v.size() + by, 0);
  std::copy(v.begin(), v.end(), s.begin() + static_cast<std::ptrdiff_t>(by));
  return s;
}

// Elements of `got` (after `offset` leading ones that must still hold the 0xFFFF poison) whose bits differ from `want`.
size_t bf16in_mismatches(const std::vector<uint16_t>& got, size_t offset, const std::vector<uint16_t>& want) {
  size_t bad = 0;
  for (size_t i = 0; i < offset; ++i) bad += got[i] != 0xFFFFu ? 1 : 0;
  for (size_t i = 0; i < want.size(); ++i) bad += got[i + offset] != want[i] ? 1 : 0;
  return bad;
}

size_t bf16in_nans(const std::vector<uint16_t>& v) {
  size_t k = 0;
  for (const uint16_t b : v) k += (b & 0x7FFFu) > 0x7F80u ? 1 : 0;
  return k;
}

// Offsets in elements: 0 (vector path), 4 (8 bytes: bf16 vector path on pointers that are not 16-byte aligned), 1
// (scalar path).
constexpr size_t kBf16InOffsets[] = {0, 4, 1};

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

TEST(SwigluCuda, Bf16InputForward) {
  HLM_REQUIRE_CUDA();
  for (const Bf16InCase& c : kBf16InCases) {
    const auto n = static_cast<size_t>(c.n);
    const auto gate = bf16in_values(n, c.fill, 21, c.gate_scale, true), up = bf16in_values(n, c.fill, 22, 1.0f, false);
    // The reference: the fp32-input kernel on the widened values.
    std::vector<uint16_t> want;
    {
      DeviceBuffer g32 = DeviceBuffer::from(bf16_to_f32(gate), "gate f32"),
                   u32 = DeviceBuffer::from(bf16_to_f32(up), "up f32"), ref(n * 2, "out ref");
      swiglu_forward_bf16_cuda(ref.as<__nv_bfloat16>(), g32.as<float>(), u32.as<float>(), c.n, ctx().stream());
      want = ref.download<uint16_t>();
    }
    for (const size_t off : kBf16InOffsets) {
      DeviceBuffer g = DeviceBuffer::from(bf16in_shifted(gate, off), "gate bf16"),
                   u = DeviceBuffer::from(bf16in_shifted(up, off), "up bf16"), out((n + off) * 2, "out bf16");
      swiglu_forward_bf16_in_cuda(out.as<__nv_bfloat16>() + off, g.as<__nv_bfloat16>() + off,
                                  u.as<__nv_bfloat16>() + off, c.n, ctx().stream());
      const size_t bad = bf16in_mismatches(out.download<uint16_t>(), off, want);
      std::cout << "[check] " << bf16in_name(c, "fwd bf16 in vs fp32 in", off) << ": exact, NaNs=" << bf16in_nans(want)
                << " mismatches=" << bad << "\n";
      EXPECT_EQ(bad, 0u) << bf16in_name(c, "fwd bf16 in vs fp32 in", off);
      EXPECT_TRUE(buffers_ok({&out}, {&g, &u})) << bf16in_name(c, "fwd bf16 in", off);

      // out aliasing gate: the same bits.
      swiglu_forward_bf16_in_cuda(g.as<__nv_bfloat16>() + off, g.as<__nv_bfloat16>() + off,
                                  u.as<__nv_bfloat16>() + off, c.n, ctx().stream());
      const auto in_place = g.download<uint16_t>();
      size_t bad_in_place = 0;
      for (size_t i = 0; i < n; ++i) bad_in_place += in_place[i + off] != want[i] ? 1 : 0;
      EXPECT_EQ(bad_in_place, 0u) << bf16in_name(c, "fwd bf16 in, out aliasing gate", off);
    }
  }
}

TEST(SwigluCuda, Bf16InputBackward) {
  HLM_REQUIRE_CUDA();
  for (const Bf16InCase& c : kBf16InCases) {
    const auto n = static_cast<size_t>(c.n);
    const auto gate = bf16in_values(n, c.fill, 31, c.gate_scale, true), up = bf16in_values(n, c.fill, 32, 1.0f, false);
    const auto dy = make_values(n, c.fill == Bf16InFill::Normal ? Fill::Normal : Fill::Special, 33);
    std::vector<uint16_t> want_dg, want_du;
    {
      DeviceBuffer g32 = DeviceBuffer::from(bf16_to_f32(gate), "gate f32"),
                   u32 = DeviceBuffer::from(bf16_to_f32(up), "up f32"), d = DeviceBuffer::from(dy, "d_out"),
                   dg(n * 2, "dgate ref"), du(n * 2, "dup ref");
      swiglu_backward_bf16_cuda(dg.as<__nv_bfloat16>(), du.as<__nv_bfloat16>(), d.as<float>(), g32.as<float>(),
                                u32.as<float>(), c.n, ctx().stream());
      want_dg = dg.download<uint16_t>();
      want_du = du.download<uint16_t>();
    }
    for (const size_t off : kBf16InOffsets) {
      // d_out shifted too for offset 1 (every pointer misaligned); kept 16-byte aligned for offset 4.
      const size_t d_off = off == 1 ? 1 : 0;
      DeviceBuffer g = DeviceBuffer::from(bf16in_shifted(gate, off), "gate bf16"),
                   u = DeviceBuffer::from(bf16in_shifted(up, off), "up bf16"),
                   d = DeviceBuffer::from(d_off == 1 ? shifted_by_one(dy) : dy, "d_out"),
                   dg((n + off) * 2, "dgate bf16"), du((n + off) * 2, "dup bf16");
      swiglu_backward_bf16_in_cuda(dg.as<__nv_bfloat16>() + off, du.as<__nv_bfloat16>() + off, d.as<float>() + d_off,
                                   g.as<__nv_bfloat16>() + off, u.as<__nv_bfloat16>() + off, c.n, ctx().stream());
      const size_t bad = bf16in_mismatches(dg.download<uint16_t>(), off, want_dg) +
                         bf16in_mismatches(du.download<uint16_t>(), off, want_du);
      std::cout << "[check] " << bf16in_name(c, "bwd bf16 in vs fp32 in", off)
                << ": exact, NaNs dgate=" << bf16in_nans(want_dg) << " dup=" << bf16in_nans(want_du)
                << " mismatches=" << bad << "\n";
      EXPECT_EQ(bad, 0u) << bf16in_name(c, "bwd bf16 in vs fp32 in", off);
      EXPECT_TRUE(buffers_ok({&dg, &du}, {&g, &u, &d})) << bf16in_name(c, "bwd bf16 in", off);
    }
  }
}

// d_out in bf16 too (swiglu_backward_bf16_all_cuda, the MLP backward's bf16 dh): byte for byte the bits of the
// fp32-input bf16-output kernel on fp32 copies of all three inputs, at every offset of the Bf16Input cases (d_out
// shifted with gate and up), except that the case beyond one grid runs at offset 0 only (its vector grid-stride loop):
// each of its offsets costs ~15 s of host work, and the scalar loop past one grid is the same load template that
// Bf16InputBackward runs there for gate and up.
TEST(SwigluCuda, Bf16AllInputsBackward) {
  HLM_REQUIRE_CUDA();
  for (const Bf16InCase& c : kBf16InCases) {
    const auto n = static_cast<size_t>(c.n);
    const auto gate = bf16in_values(n, c.fill, 41, c.gate_scale, true), up = bf16in_values(n, c.fill, 42, 1.0f, false),
               dy = bf16in_values(n, c.fill, 43, 1.0f, false);
    std::vector<uint16_t> want_dg, want_du;
    {
      DeviceBuffer g32 = DeviceBuffer::from(bf16_to_f32(gate), "gate f32"),
                   u32 = DeviceBuffer::from(bf16_to_f32(up), "up f32"), d32 = DeviceBuffer::from(bf16_to_f32(dy), "d_out f32"),
                   dg(n * 2, "dgate ref"), du(n * 2, "dup ref");
      swiglu_backward_bf16_cuda(dg.as<__nv_bfloat16>(), du.as<__nv_bfloat16>(), d32.as<float>(), g32.as<float>(),
                                u32.as<float>(), c.n, ctx().stream());
      want_dg = dg.download<uint16_t>();
      want_du = du.download<uint16_t>();
    }
    for (const size_t off : kBf16InOffsets) {
      if (c.n == kBf16InBeyondGrid && off != 0) continue;
      DeviceBuffer g = DeviceBuffer::from(bf16in_shifted(gate, off), "gate bf16"),
                   u = DeviceBuffer::from(bf16in_shifted(up, off), "up bf16"),
                   d = DeviceBuffer::from(bf16in_shifted(dy, off), "d_out bf16"), dg((n + off) * 2, "dgate bf16"),
                   du((n + off) * 2, "dup bf16");
      swiglu_backward_bf16_all_cuda(dg.as<__nv_bfloat16>() + off, du.as<__nv_bfloat16>() + off,
                                    d.as<__nv_bfloat16>() + off, g.as<__nv_bfloat16>() + off,
                                    u.as<__nv_bfloat16>() + off, c.n, ctx().stream());
      const size_t bad = bf16in_mismatches(dg.download<uint16_t>(), off, want_dg) +
                         bf16in_mismatches(du.download<uint16_t>(), off, want_du);
      std::cout << "[check] " << bf16in_name(c, "bwd bf16 d_out vs fp32 in", off)
                << ": exact, NaNs dgate=" << bf16in_nans(want_dg) << " dup=" << bf16in_nans(want_du)
                << " mismatches=" << bad << "\n";
      EXPECT_EQ(bad, 0u) << bf16in_name(c, "bwd bf16 d_out vs fp32 in", off);
      EXPECT_TRUE(buffers_ok({&dg, &du}, {&g, &u, &d})) << bf16in_name(c, "bwd bf16 d_out", off);
    }
  }
}
