// Gated RMSNorm: CUDA (src/ops/gated_rmsnorm/gated_rmsnorm.cu) vs the CPU reference (gated_rmsnorm_ref.cpp), forward
// and backward, f32. Cases: both kernel paths (gated_rmsnorm_cuda.h): the warp-per-row path (D ≤
// gated_rmsnorm_cuda_warp_max_dim(); float4 loads for the GDN value-head sizes 40, 64, 72, 128 and 100, 1000, 1024;
// scalar for 1, 37, 65, 127, and for misaligned pointers) and the block-per-row path (1025, 1500); row counts that
// are not multiples of the 8 rows of a warp-path block; the fused dw sum's edges (gated_rmsnorm_cuda_dw_plan): one
// row, fewer rows than the 8 warps of a group (1, 3, 5), a partial last group (13, 301, 1003), more groups than the
// finish's 128 slices (4099 rows: 257 groups), more than 2 rows per warp (70001 rows: 3 per warp, 2917 groups);
// eps 1e-5 (OLMo) and 1e-6; every fill of x (large, ±0, subnormal, NaN/±Inf); z is N(0, 3²), so the gate spans
// saturated and linear regions; y aliasing x and z. The bf16-output launchers (last test) against the fp32 ones'
// outputs cast to bf16, bit for bit.
//
// Tolerances (fp32 rule, harness.h). L = the longest chain of roundings in a row sum (the order
// gated_rmsnorm_cuda.h states):
//   warp path (D ≤ gated_rmsnorm_cuda_warp_max_dim()): a lane sums with FMA, in order, at most 4·ceil(D/128)
//       terms when the pointers are 16-byte aligned and D % 4 == 0 (the float4 order), else ceil(D/32) (the scalar
//       fallback); then the xor-shuffle tree adds log2(32) = 5: L = 4·ceil(D/128) + 5 or ceil(D/32) + 5.
//   block path: T = gated_rmsnorm_cuda_threads(); each thread sums ceil(D/T) terms with FMA, block_sum adds
//       log2(32) + T/32: L = ceil(D/T) + 5 + T/32.
// expf ≤ 2 ulp (4u).
//   r = 1/sqrt(Σx²/D + eps): (L + 2)/2 through the square root, +1 sqrt, +1 division: k_r = (L + 2)/2 + 2.
//   silu(z) = z/(1 + e^-z) and σ(z): 4u + u + u = 6u each.
//   forward y = ((x·r)·w)·silu(z): k_r + 3 products + 6: k = k_r + 9, mag = |y|.
//   dz = (dy·w)·n·σ(z)·(1 + z·σ(−z)), n = x·r: (k_r + 1) + 6 (σ) + (6 + 1 + 1) (the bracket, relative to
//       1 + |z|σ(−z)) + 4 products: k = k_r + 19, mag = |dy·w·n·σ(z)|·(1 + |z|σ(−z)).
//   dx = r·(gn − n·m), gn = dy·w·silu(z) (8u), m = (Σ gn·x)·r/D: the dot carries L + 8 relative to Σ|gn·x|, m adds
//       k_r + 2, n·m adds k_r + 2, the difference 1, ·r k_r + 1: k = L + 3·k_r + 16,
//       mag = r·(|gn| + |x|·r·r·Σ|gn·x|/D) (the same expression on absolute values).
//   dw = Σ_rows dy·x·r·silu(z): terms carry k_r + 9 (on the warp path the last product is fused into the lane's
//       fma, which P counts too: conservative by one there), the sum P = gated_rmsnorm_cuda_dw_chain roundings
//       (gated_rmsnorm_cuda.h; warp path: a lane's fmas over its rows + the block's adds of its warps + the finish
//       slice's adds + the finish tree's levels, only additions of two non-empty operands counted, dw overwritten,
//       e.g. 15 for 1003 × 128 and 39 for 70001 × 37, where the former column sum had 65 and 1085; block path:
//       column_sum_path_length, unchanged): k = P + k_r + 9, mag = Σ_rows |term|.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
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
    // warp path: row counts not multiples of 8, odd and vector-multiple lengths, the largest warp-path row
    {1003, 128, Fill::Normal}, {301, 37, Fill::Normal},  {13, 100, Fill::Normal, 1e-6f}, {9, 1024, Fill::Normal},
    {37, 128, Fill::Large},    {11, 128, Fill::Special}, {3, 128, Fill::Zeros},
    // just past the warp path: one block per row
    {5, 1025, Fill::Normal},   {3, 1500, Fill::Normal},  {3, 1025, Fill::Special},
    // fused dw: more groups than finish slices; more than 2 rows per warp
    {4099, 64, Fill::Normal},  {70001, 37, Fill::Normal},
};

std::string name(const GrnCase& c, const char* what) {
  return std::string("gated_rmsnorm.") + what + " R=" + std::to_string(c.R) + " D=" + std::to_string(c.D) + " " +
         fill_name(c.fill) + " eps=" + (c.eps == 1e-5f ? "1e-5" : "1e-6");
}

struct Bounds {
  double k_fwd, k_dz, k_dx, k_dw;
};
// Longest chain of roundings in a row sum (header comment); `aligned`: every pointer 16-byte aligned (DeviceBuffer
// bodies are; the misaligned test offsets them).
double sum_chain(int64_t D, bool aligned) {
  if (D <= gated_rmsnorm_cuda_warp_max_dim()) {
    if (aligned && D % 4 == 0) return static_cast<double>(4 * ((D + 127) / 128)) + 5;
    return static_cast<double>((D + 31) / 32) + 5;
  }
  const int T = gated_rmsnorm_cuda_threads();
  return std::ceil(static_cast<double>(D) / T) + 5 + T / 32;
}

Bounds bounds(const GrnCase& c, bool aligned = true) {
  const double L = sum_chain(c.D, aligned);
  const double k_r = (L + 2) / 2 + 2;
  const double P = static_cast<double>(gated_rmsnorm_cuda_dw_chain(c.R, c.D));
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

// The fused dw plan (host only): every row in exactly one group, the caps hold, and the chain of the sizes the
// bounds above rely on.
TEST(GatedRmsnormCuda, DwPlan) {
  const int64_t W = gated_rmsnorm_cuda_warp_rows();
  for (int64_t D : {1, 37, 64, 128, 1000, 1024})
    for (int64_t R : {1, 3, 8, 9, 16, 17, 1003, 4099, 70001, 131072, 1000000}) {
      const GatedRmsnormCudaDwPlan p = gated_rmsnorm_cuda_dw_plan(R, D);
      EXPECT_GE(p.rows_per_warp, 2);
      EXPECT_GE(p.groups * W * p.rows_per_warp, R) << R << " x " << D;
      EXPECT_LT((p.groups - 1) * W * p.rows_per_warp, R) << R << " x " << D;
      EXPECT_LE(p.groups, 4096);
      EXPECT_LE(p.groups * D, std::max<int64_t>(int64_t{1} << 20, 1024 * D));
    }
  EXPECT_EQ(gated_rmsnorm_cuda_dw_plan(0, 128).groups, 0);
  EXPECT_EQ(gated_rmsnorm_cuda_dw_chain(1, 1), 1);                 // one fma, dw overwritten
  EXPECT_EQ(gated_rmsnorm_cuda_dw_chain(3, 65), 1 + 2);
  EXPECT_EQ(gated_rmsnorm_cuda_dw_chain(1003, 128), 2 + 7 + 6);     // 63 groups: tree of 6 levels
  EXPECT_EQ(gated_rmsnorm_cuda_dw_chain(4099, 64), 2 + 7 + 2 + 7);  // 257 groups: 3 per slice
  EXPECT_EQ(gated_rmsnorm_cuda_dw_chain(70001, 37), 3 + 7 + 22 + 7);
  EXPECT_EQ(gated_rmsnorm_cuda_dw_chain(5, 1025),
            column_sum_path_length(column_sum_plan(5, 1025, ~size_t{0} / 2)));  // block path
}

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

// Pointers one float past a 16-byte boundary: the warp path falls back to scalar loads (D is a multiple of 4, so only
// the alignment rules the vectors out), with the scalar order's bounds; the element before each output stays
// unwritten.
TEST(GatedRmsnormCuda, MisalignedF32) {
  HLM_REQUIRE_CUDA();
  for (const GrnCase& c : {GrnCase{37, 128, Fill::Normal}, GrnCase{5, 1000, Fill::Normal}}) {
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), nd = static_cast<size_t>(c.D);
    const GatedRmsnormCudaParams p{c.R, c.D, c.eps};
    const Bounds b = bounds(c, /*aligned=*/false);
    DeviceBuffer x = DeviceBuffer::from(shifted_by_one(in.x), "x+1"),
                 z = DeviceBuffer::from(shifted_by_one(in.z), "z+1"),
                 w = DeviceBuffer::from(shifted_by_one(in.w), "w+1"),
                 dy = DeviceBuffer::from(shifted_by_one(in.dy), "dy+1"),
                 y((n + 1) * 4, "y+1"), dx((n + 1) * 4, "dx+1"), dz((n + 1) * 4, "dz+1"), dw(nd * 4, "dw");
    DeviceBuffer ws(gated_rmsnorm_backward_cuda_workspace_bytes(p), "workspace");
    const auto x64 = to_f64(in.x), z64 = to_f64(in.z), w64 = to_f64(in.w), dy64 = to_f64(in.dy);

    std::vector<float> cpu(n);
    gated_rmsnorm_forward<float>(cpu.data(), in.x.data(), in.z.data(), in.w.data(), c.R, c.D, c.eps);
    std::vector<double> ref(n);
    gated_rmsnorm_forward<double>(ref.data(), x64.data(), z64.data(), w64.data(), c.R, c.D, c.eps);
    gated_rmsnorm_forward_cuda(y.as<float>() + 1, x.as<float>() + 1, z.as<float>() + 1, w.as<float>() + 1, p,
                               ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "fwd f32 misaligned"), body_after_one(y), cpu, ref, abs_of(ref), {b.k_fwd}));
    EXPECT_TRUE(first_unwritten(y)) << name(c, "fwd f32 misaligned");

    std::vector<float> dx32(n), dz32(n), dw32(nd);
    gated_rmsnorm_backward<float>(dx32.data(), dz32.data(), dw32.data(), in.dy.data(), in.x.data(), in.z.data(),
                                  in.w.data(), c.R, c.D, c.eps);
    std::vector<double> dx64(n), dz64(n), dw64(nd);
    gated_rmsnorm_backward<double>(dx64.data(), dz64.data(), dw64.data(), dy64.data(), x64.data(), z64.data(),
                                   w64.data(), c.R, c.D, c.eps);
    const Magnitudes mag = backward_magnitudes(c, in);
    gated_rmsnorm_backward_cuda(dx.as<float>() + 1, dz.as<float>() + 1, dw.as<float>(), dy.as<float>() + 1,
                                x.as<float>() + 1, z.as<float>() + 1, w.as<float>() + 1, p, ws.as<void>(), ws.bytes(),
                                ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "bwd dx misaligned"), body_after_one(dx), dx32, dx64, mag.dx, {b.k_dx}));
    EXPECT_TRUE(check_f32(name(c, "bwd dz misaligned"), body_after_one(dz), dz32, dz64, mag.dz, {b.k_dz}));
    EXPECT_TRUE(check_f32(name(c, "bwd dw misaligned"), dw.download<float>(), dw32, dw64, mag.dw, {b.k_dw}));
    EXPECT_TRUE(first_unwritten(dx) && first_unwritten(dz)) << name(c, "bwd misaligned");
    EXPECT_TRUE(buffers_ok({&y, &dx, &dz, &dw, &ws}, {&x, &z, &w, &dy})) << name(c, "misaligned");
  }
}

// The bf16-output launchers (gated_rmsnorm_forward_bf16_cuda's y, gated_rmsnorm_backward_bf16_dz_cuda's dz; the GDN
// layer's bf16 compute mode): every case above, with 16-byte-aligned pointers (the vector order) and with every
// pointer one element off (the scalar order; the fp32 run shifted alike): y and dz are exactly core/dtype.h's
// rounding of the fp32 launchers' outputs on the same inputs (NaN payloads included), dx and dw exactly their bits;
// nothing is written before a shifted output.
TEST(GatedRmsnormCuda, Bf16OutputsAreTheCastOfTheF32Ones) {
  HLM_REQUIRE_CUDA();
  for (const GrnCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), nd = static_cast<size_t>(c.D);
    const GatedRmsnormCudaParams p{c.R, c.D, c.eps};
    for (const size_t off : {size_t{0}, size_t{1}}) {
      const auto shift = [off](const std::vector<float>& v) { return off == 0 ? v : shifted_by_one(v); };
      const std::string at = off == 0 ? " aligned" : " misaligned";
      DeviceBuffer x = DeviceBuffer::from(shift(in.x), "x"), z = DeviceBuffer::from(shift(in.z), "z"),
                   w = DeviceBuffer::from(shift(in.w), "w"), dy = DeviceBuffer::from(shift(in.dy), "dy");
      DeviceBuffer y32((n + off) * 4, "y"), y16((n + off) * 2, "y bf16"), dx32((n + off) * 4, "dx"),
          dz32((n + off) * 4, "dz"), dw32(nd * 4, "dw"), dx16((n + off) * 4, "dx (bf16 dz)"),
          dz16((n + off) * 2, "dz bf16"), dw16(nd * 4, "dw (bf16 dz)");
      DeviceBuffer ws(gated_rmsnorm_backward_cuda_workspace_bytes(p), "workspace");
      const float *xp = x.as<float>() + off, *zp = z.as<float>() + off, *wp = w.as<float>() + off,
                  *dyp = dy.as<float>() + off;
      const cudaStream_t s = ctx().stream();
      gated_rmsnorm_forward_cuda(y32.as<float>() + off, xp, zp, wp, p, s);
      gated_rmsnorm_forward_bf16_cuda(y16.as<__nv_bfloat16>() + off, xp, zp, wp, p, s);
      gated_rmsnorm_backward_cuda(dx32.as<float>() + off, dz32.as<float>() + off, dw32.as<float>(), dyp, xp, zp, wp,
                                  p, ws.as<void>(), ws.bytes(), s);
      gated_rmsnorm_backward_bf16_dz_cuda(dx16.as<float>() + off, dz16.as<__nv_bfloat16>() + off, dw16.as<float>(),
                                          dyp, xp, zp, wp, p, ws.as<void>(), ws.bytes(), s);
      const std::vector<float> y = y32.download<float>(), dz = dz32.download<float>();
      const std::vector<uint16_t> y_bits = y16.download<uint16_t>(), dz_bits = dz16.download<uint16_t>();
      size_t y_mismatches = 0, dz_mismatches = 0;
      for (size_t i = off; i < n + off; ++i) {
        y_mismatches += y_bits[i] != f32_to_bf16(y[i]) ? 1 : 0;
        dz_mismatches += dz_bits[i] != f32_to_bf16(dz[i]) ? 1 : 0;
      }
      EXPECT_EQ(y_mismatches, 0u) << name(c, "fwd bf16 y vs cast of the fp32 y") << at;
      EXPECT_EQ(dz_mismatches, 0u) << name(c, "bwd bf16 dz vs cast of the fp32 dz") << at;
      EXPECT_TRUE(dx16.download_bytes() == dx32.download_bytes()) << name(c, "bwd dx (bf16 dz)") << at;
      EXPECT_TRUE(dw16.download_bytes() == dw32.download_bytes()) << name(c, "bwd dw (bf16 dz)") << at;
      if (off == 1) {
        EXPECT_TRUE(y_bits[0] == 0xFFFFu && dz_bits[0] == 0xFFFFu) << name(c, "bf16 outputs") << at;
      }
      EXPECT_TRUE(buffers_ok({&y32, &y16, &dx32, &dz32, &dw32, &dx16, &dz16, &dw16, &ws}, {&x, &z, &w, &dy}))
          << name(c, "bf16 outputs") << at;
    }
  }
}
