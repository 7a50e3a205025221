// RMSNorm: CUDA (src/ops/rmsnorm/rmsnorm.cu) vs the CPU reference (rmsnorm_ref.cpp), forward and backward, f32 and
// bf16 storage. Cases: both kernel paths (rmsnorm_cuda.h): the warp-per-row path (D ≤ rmsnorm_cuda_warp_max_dim(),
// vectorized when D is a multiple of the vector: 100, 128, 1000, 1024; scalar: 1, 37, 65, 127, 257; and the scalar
// fallback for misaligned pointers) and the block-per-row path (1025, 4096; its backward fused with the row in
// registers up to 4096, the former three passes beyond: 4100); row counts that are not multiples of the
// 8 rows of a warp-path block (37, 301, 1003); the fused dweight sum's edges (rmsnorm_cuda_dweight_plan): one row,
// fewer rows than the 8 warps of a group (1, 3, 5), a partial last group (13, 301, 1003), more groups than the
// finish's 128 slices (2053 rows, D = 1024: 129 groups), more than 2 rows per warp (70001 rows: 3 per warp, 2917
// groups); a multi-chunk column sum on the block path (64 × 4096: 2 chunks); every input fill (large magnitudes,
// zeros, subnormals, NaN/±Inf); in place (out aliasing x; dx aliasing d_out, with and without dweight, where the
// dweight partials must be taken from d_out before dx overwrites it).
//
// Tolerances (fp32; harness.h has the rules). L = the longest chain of roundings in Σx² (the order rmsnorm_cuda.h
// states; all terms positive, so the relative error of the sum is at most L·u):
//   warp path (D ≤ rmsnorm_cuda_warp_max_dim()): a lane sums with FMA, in order, at most V·ceil(D/32V) terms when
//       the pointers are 16-byte aligned and D % V == 0 (V = 16 bytes / element size: 4 f32, 8 bf16; the vectorized
//       order), else ceil(D/32) (the scalar fallback); then the xor-shuffle tree adds log2(32) = 5:
//       L = V·ceil(D/32V) + 5 or ceil(D/32) + 5.
//   block path: T = rmsnorm_cuda_threads() threads per row; each sums ceil(D/T) elements with FMA, then block_sum
//       adds log2(32) + T/32 more roundings: L = ceil(D/T) + 5 + T/32.
//   r = 1/sqrt(Σ/D + eps): (L + 2)/2 from the sum, /D and +eps through the square root, +1 sqrt, +1 division:
//       k_r = (L + 2)/2 + 2.
//   forward out = w·(x·r): k = k_r + 2, mag = |out|.
//   backward dx = r·(g − x·r·m), g = d_out·w, m = (Σ g·x)·r/D: the dot has L + 1 roundings relative to Σ|g||x|, so
//       k = L + 2·k_r + 8 with mag = r·(|g| + |x|·r·Σ|g||x|/D) (the same expression on absolute values).
//   dweight += Σ_rows d_out·x·r: terms carry k_r + 2 (the products d_out·x and ·r; on the warp path the second is
//       fused into the lane's fma, which P counts too, so this is conservative by one there), the sum
//       P = rmsnorm_cuda_dweight_chain roundings (rmsnorm_cuda.h; warp path: a lane's fmas over its rows + the
//       block's adds of its warps + the finish slice's adds + the finish tree's levels + the add into dweight, only
//       additions of two non-empty operands counted, e.g. 18 for 2053 × 1024, 50 for 131072 × 128, where the former
//       column sum had 98 and 1153; block path up to 4096: the same with W = 1, a thread's fmas over its group's
//       rows; longer rows: column_sum_path_length): k = P + k_r + 3,
//       mag = Σ_rows |d_out·x·r| + |dweight before|.
// bf16: the flash-attention rule on out and dx (with the fp32 allowance k·u·mag above: with D = 1, dx = r·g·eps/(x² +
// eps) is a cancellation the CPU does in double); dweight (fp32) by the fp32 rule on the bf16-rounded inputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "harness.h"
#include "ops/cast/cast_cuda.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/residual/residual_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct RmsCase {
  int64_t R, D;
  Fill fill;
};

const std::vector<RmsCase> kCases = {
    {1, 1, Fill::Normal},      {1, 65, Fill::Normal},    {3, 127, Fill::Normal},   {5, 1000, Fill::Normal},
    {2, 4096, Fill::Normal},   {300, 257, Fill::Normal}, {1000, 65, Fill::Normal}, {4, 127, Fill::Large},
    {3, 65, Fill::Zeros},      {3, 1000, Fill::Denormal}, {7, 127, Fill::Special}, {1, 1, Fill::Special},
    {64, 4096, Fill::Large},
    // per-head q/k norm shapes on the warp path, row counts not multiples of 8, odd and vector-multiple lengths
    {1003, 128, Fill::Normal}, {301, 37, Fill::Normal},  {13, 100, Fill::Normal},  {9, 1024, Fill::Normal},
    {37, 128, Fill::Large},    {11, 128, Fill::Special}, {5, 128, Fill::Denormal}, {3, 128, Fill::Zeros},
    // just past the warp path: one block per row
    {5, 1025, Fill::Normal},   {3, 1025, Fill::Special},
    // rows held in registers (8 or 16 per thread: Qwen3-4B's hidden size), and just past them (the loop kernel)
    {1, 2560, Fill::Normal},   {2, 2049, Fill::Special}, {3, 4100, Fill::Normal},
    // fused dweight: more groups than finish slices; more than 2 rows per warp
    {2053, 1024, Fill::Normal}, {70001, 37, Fill::Normal},
    // the block path's fused backward (one row in flight per block, rows_per_group rows per block): a partial last
    // group (301 rows: 151 groups of 2, more than the finish's 128 slices), 3 rows per group (3001 × 1100: 1001
    // groups), 12 and 16 registers per thread, large values and specials with many rows
    {301, 2560, Fill::Normal}, {3001, 1100, Fill::Normal}, {257, 3000, Fill::Large}, {65, 4096, Fill::Special},
};
constexpr float kEps = 1e-6f;

// Rows whose backward has two forms (HLM_RMSNORM_FUSED_BACKWARD): the block path up to rmsnorm_cuda_regs_max_dim().
bool has_two_backwards(const RmsCase& c) {
  return c.D > rmsnorm_cuda_warp_max_dim() && c.D <= rmsnorm_cuda_regs_max_dim();
}

// The backward tests run those rows in both forms (1: fused, 0: three passes), the others once (-1: the environment).
std::vector<int> backward_forms(const RmsCase& c) {
  return has_two_backwards(c) ? std::vector<int>{1, 0} : std::vector<int>{-1};
}

std::string name(const RmsCase& c, const char* what) {
  std::string n = std::string("rmsnorm.") + what + " R=" + std::to_string(c.R) + " D=" + std::to_string(c.D) + " " +
                  fill_name(c.fill);
  if (std::string(what).rfind("bwd", 0) == 0 && has_two_backwards(c))
    n += rmsnorm_cuda_fused_backward() ? " (fused)" : " (three passes)";
  return n;
}

struct Bounds {
  double k_fwd, k_dx, k_dw;
};
// Longest chain of roundings in a row sum (header comment), for storage elements of `elem_bytes` bytes; `aligned`:
// every pointer 16-byte aligned (DeviceBuffer bodies are; the misaligned test offsets them).
double sum_chain(int64_t D, int64_t elem_bytes, bool aligned) {
  if (D <= rmsnorm_cuda_warp_max_dim()) {
    const int64_t V = 16 / elem_bytes;
    if (aligned && D % V == 0) return static_cast<double>(V * ((D + 32 * V - 1) / (32 * V))) + 5;
    return static_cast<double>((D + 31) / 32) + 5;
  }
  const int T = rmsnorm_cuda_threads();
  return std::ceil(static_cast<double>(D) / T) + 5 + T / 32;
}

Bounds bounds(const RmsCase& c, int64_t elem_bytes, bool aligned = true) {
  const double L = sum_chain(c.D, elem_bytes, aligned);
  const double k_r = (L + 2) / 2 + 2;
  const double P = static_cast<double>(rmsnorm_cuda_dweight_chain(c.R, c.D, rmsnorm_cuda_fused_backward()));
  return {k_r + 2, L + 2 * k_r + 8, P + k_r + 3};
}

struct Inputs {
  std::vector<float> x, w, dy, dw0;
};
Inputs make_inputs(const RmsCase& c, bool bf16) {
  Inputs in{make_values(static_cast<size_t>(c.R * c.D), c.fill, 1), make_values(static_cast<size_t>(c.D), Fill::Normal, 2),
            make_values(static_cast<size_t>(c.R * c.D), Fill::Normal, 3),
            make_values(static_cast<size_t>(c.D), Fill::Normal, 4)};
  if (bf16) {  // the values bf16 storage can hold (dw0 stays fp32: dweight is an fp32 master gradient)
    in.x = round_bf16(in.x);
    in.w = round_bf16(in.w);
    in.dy = round_bf16(in.dy);
  }
  return in;
}

// Magnitudes of the backward outputs (see the header comment), in double.
void backward_magnitudes(const RmsCase& c, const Inputs& in, std::vector<double>& mag_dx, std::vector<double>& mag_dw) {
  const int64_t R = c.R, D = c.D;
  mag_dx.assign(static_cast<size_t>(R * D), 0.0);
  mag_dw.assign(static_cast<size_t>(D), 0.0);
  for (int64_t d = 0; d < D; ++d) mag_dw[static_cast<size_t>(d)] = std::abs(static_cast<double>(in.dw0[static_cast<size_t>(d)]));
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0, gx = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double x = in.x[static_cast<size_t>(r * D + d)];
      ss += x * x;
      gx += std::abs(static_cast<double>(in.dy[static_cast<size_t>(r * D + d)]) * in.w[static_cast<size_t>(d)] * x);
    }
    const double ir = 1.0 / std::sqrt(ss / static_cast<double>(D) + kEps);
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = static_cast<size_t>(r * D + d);
      const double g = std::abs(static_cast<double>(in.dy[i]) * in.w[static_cast<size_t>(d)]);
      mag_dx[i] = ir * (g + std::abs(static_cast<double>(in.x[i])) * ir * gx / static_cast<double>(D));
      mag_dw[static_cast<size_t>(d)] += std::abs(static_cast<double>(in.dy[i]) * in.x[i]) * ir;
    }
  }
}

}  // namespace

// The fused dweight plan (host only): every row in exactly one group, the caps hold, and the chain of the sizes the
// bounds above rely on.
TEST(RmsnormCuda, DweightPlan) {
  const int64_t W = rmsnorm_cuda_warp_rows();
  for (int64_t D : {1, 37, 128, 1000, 1024})
    for (int64_t R : {1, 3, 8, 9, 16, 17, 1003, 2053, 70001, 131072, 1000000}) {
      const RmsnormCudaDweightPlan p = rmsnorm_cuda_dweight_plan(R, D);
      EXPECT_GE(p.rows_per_warp, 2);
      EXPECT_GE(p.groups * W * p.rows_per_warp, R) << R << " x " << D;
      EXPECT_LT((p.groups - 1) * W * p.rows_per_warp, R) << R << " x " << D;
      EXPECT_LE(p.groups, 4096);
      EXPECT_LE(p.groups * D, std::max<int64_t>(int64_t{1} << 20, 1024 * D));
    }
  EXPECT_EQ(rmsnorm_cuda_dweight_plan(0, 128).groups, 0);
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(1, 65, true), 2);      // one fma, one add into dweight
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(3, 127, true), 1 + 2 + 1);
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(13, 100, true), 2 + 7 + 1);
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(1003, 128, true), 2 + 7 + 6 + 1);        // 63 groups: tree of 6 levels
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(2053, 1024, true), 2 + 7 + 1 + 7 + 1);   // 129 groups: 2 per slice
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(131072, 128, true), 4 + 7 + 31 + 7 + 1); // 4096 groups of 32 rows
  // The block path up to 16 · 256 elements: one row in flight per block (W = 1), groups capped at 1024.
  for (int64_t D : {1025, 2560, 4096})
    for (int64_t R : {1, 2, 3, 301, 2049, 8192, 70001}) {
      const RmsnormCudaDweightPlan p = rmsnorm_cuda_dweight_plan(R, D);
      EXPECT_GE(p.rows_per_warp, 2);
      EXPECT_GE(p.groups * p.rows_per_warp, R) << R << " x " << D;
      EXPECT_LT((p.groups - 1) * p.rows_per_warp, R) << R << " x " << D;
      EXPECT_LE(p.groups, 1024);
    }
  EXPECT_EQ(rmsnorm_cuda_dweight_plan(8192, 2560).rows_per_warp, 8);  // the 4B step's [8192, 2560]: 1024 groups
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(64, 4096, true), 2 + 5 + 1);     // 32 groups of 2 rows: tree of 5 levels
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(301, 2560, true), 2 + 1 + 7 + 1);  // 151 groups: ≤ 2 per slice, 7 levels
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(64, 4100, true),
            column_sum_path_length(column_sum_plan(64, 4100, ~size_t{0} / 2)));  // longer rows: the column sum
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(64, 4096, false),
            column_sum_path_length(column_sum_plan(64, 4096, ~size_t{0} / 2)));  // the three passes
  EXPECT_EQ(rmsnorm_cuda_dweight_chain(2053, 1024, false), rmsnorm_cuda_dweight_chain(2053, 1024, true));  // warp
}

TEST(RmsnormCuda, ForwardF32) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : kCases) {
    const Inputs in = make_inputs(c, false);
    const size_t n = static_cast<size_t>(c.R * c.D);
    std::vector<float> cpu(n);
    rmsnorm_forward(cpu.data(), in.x.data(), in.w.data(), c.R, c.D, kEps);
    std::vector<double> ref(n);
    const auto x64 = to_f64(in.x), w64 = to_f64(in.w);
    rmsnorm_forward<double>(ref.data(), x64.data(), w64.data(), c.R, c.D, kEps);

    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "weight"), out(n * 4, "out");
    rmsnorm_forward_cuda(out.as<float>(), x.as<float>(), w.as<float>(), {c.R, c.D, kEps}, ctx().stream());
    const std::vector<float> gpu = out.download<float>();
    EXPECT_TRUE(check_f32(name(c, "fwd f32"), gpu, cpu, ref, abs_of(ref), {bounds(c, 4).k_fwd}));
    EXPECT_TRUE(buffers_ok({&out}, {&x, &w})) << name(c, "fwd f32");

    // In place (out aliases x) gives the same bits.
    rmsnorm_forward_cuda(x.as<float>(), x.as<float>(), w.as<float>(), {c.R, c.D, kEps}, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd f32 in-place"), x.download<float>(), gpu));
    EXPECT_TRUE(x.guards_intact());
  }
}

TEST(RmsnormCuda, BackwardF32) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : kCases)
  for (const int form : backward_forms(c)) {
    rmsnorm_cuda_set_fused_backward(form);
    const Inputs in = make_inputs(c, false);
    const size_t n = static_cast<size_t>(c.R * c.D);
    std::vector<float> dx_cpu(n), dw_cpu = in.dw0;
    rmsnorm_backward<float>(dx_cpu.data(), dw_cpu.data(), in.dy.data(), in.x.data(), in.w.data(), c.R, c.D, kEps);
    const auto x64 = to_f64(in.x), w64 = to_f64(in.w), dy64 = to_f64(in.dy);
    std::vector<double> dx_ref(n), dw_ref = to_f64(in.dw0);
    rmsnorm_backward<double>(dx_ref.data(), dw_ref.data(), dy64.data(), x64.data(), w64.data(), c.R, c.D, kEps);
    std::vector<double> mag_dx, mag_dw;
    backward_magnitudes(c, in, mag_dx, mag_dw);

    const RmsnormCudaParams p{c.R, c.D, kEps};
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "weight"),
                 dy = DeviceBuffer::from(in.dy, "d_out"), dx(n * 4, "dx"), dw = DeviceBuffer::from(in.dw0, "dweight");
    DeviceBuffer ws(rmsnorm_backward_cuda_workspace_bytes(p), "workspace");
    rmsnorm_backward_cuda(dx.as<float>(), dw.as<float>(), dy.as<float>(), x.as<float>(), w.as<float>(), p,
                          ws.as<void>(), ws.bytes(), ctx().stream());
    const Bounds b = bounds(c, 4);
    const std::vector<float> dx_gpu = dx.download<float>(), dw_gpu = dw.download<float>();
    EXPECT_TRUE(check_f32(name(c, "bwd dx f32"), dx_gpu, dx_cpu, dx_ref, mag_dx, {b.k_dx}));
    EXPECT_TRUE(check_f32(name(c, "bwd dweight f32"), dw_gpu, dw_cpu, dw_ref, mag_dw, {b.k_dw}));
    EXPECT_TRUE(buffers_ok({&dx, &dw, &ws}, {&x, &w, &dy})) << name(c, "bwd f32");

    // dx aliasing d_out, dweight not wanted: same dx bits.
    rmsnorm_backward_cuda(dy.as<float>(), nullptr, dy.as<float>(), x.as<float>(), w.as<float>(), p, ws.as<void>(),
                          ws.bytes(), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dx f32 in-place"), dy.download<float>(), dx_gpu));

    // dx aliasing d_out with dweight wanted: dweight must sum d_out before dx overwrites it; same bits for both.
    DeviceBuffer dy2 = DeviceBuffer::from(in.dy, "d_out = dx"), dw2 = DeviceBuffer::from(in.dw0, "dweight (in place)");
    rmsnorm_backward_cuda(dy2.as<float>(), dw2.as<float>(), dy2.as<float>(), x.as<float>(), w.as<float>(), p,
                          ws.as<void>(), ws.bytes(), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dx f32 in-place + dweight"), dy2.download<float>(), dx_gpu));
    EXPECT_TRUE(check_exact(name(c, "bwd dweight f32 in-place"), dw2.download<float>(), dw_gpu));
    EXPECT_TRUE(buffers_ok({&dy2, &dw2, &ws}, {&x, &w})) << name(c, "bwd f32 in-place");
  }
  rmsnorm_cuda_set_fused_backward(-1);
}

// Pointers one float past a 16-byte boundary: the warp path falls back to scalar loads (D is a multiple of 4, so
// only the alignment rules the vectors out), with the scalar order's bounds; the element before each output stays
// unwritten.
TEST(RmsnormCuda, MisalignedF32) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : {RmsCase{37, 128, Fill::Normal}, RmsCase{5, 1000, Fill::Normal}}) {
    const Inputs in = make_inputs(c, false);
    const size_t n = static_cast<size_t>(c.R * c.D);
    const Bounds b = bounds(c, 4, /*aligned=*/false);
    const RmsnormCudaParams p{c.R, c.D, kEps};
    DeviceBuffer x = DeviceBuffer::from(shifted_by_one(in.x), "x+1"),
                 w = DeviceBuffer::from(shifted_by_one(in.w), "weight+1"),
                 dy = DeviceBuffer::from(shifted_by_one(in.dy), "d_out+1"), out((n + 1) * 4, "out+1"),
                 dx((n + 1) * 4, "dx+1"), dw = DeviceBuffer::from(in.dw0, "dweight");
    DeviceBuffer ws(rmsnorm_backward_cuda_workspace_bytes(p), "workspace");

    std::vector<float> cpu(n);
    rmsnorm_forward(cpu.data(), in.x.data(), in.w.data(), c.R, c.D, kEps);
    std::vector<double> ref(n);
    const auto x64 = to_f64(in.x), w64 = to_f64(in.w), dy64 = to_f64(in.dy);
    rmsnorm_forward<double>(ref.data(), x64.data(), w64.data(), c.R, c.D, kEps);
    rmsnorm_forward_cuda(out.as<float>() + 1, x.as<float>() + 1, w.as<float>() + 1, p, ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "fwd f32 misaligned"), body_after_one(out), cpu, ref, abs_of(ref), {b.k_fwd}));
    EXPECT_TRUE(first_unwritten(out)) << name(c, "fwd f32 misaligned");

    std::vector<float> dx_cpu(n), dw_cpu = in.dw0;
    rmsnorm_backward<float>(dx_cpu.data(), dw_cpu.data(), in.dy.data(), in.x.data(), in.w.data(), c.R, c.D, kEps);
    std::vector<double> dx_ref(n), dw_ref = to_f64(in.dw0);
    rmsnorm_backward<double>(dx_ref.data(), dw_ref.data(), dy64.data(), x64.data(), w64.data(), c.R, c.D, kEps);
    std::vector<double> mag_dx, mag_dw;
    backward_magnitudes(c, in, mag_dx, mag_dw);
    rmsnorm_backward_cuda(dx.as<float>() + 1, dw.as<float>(), dy.as<float>() + 1, x.as<float>() + 1,
                          w.as<float>() + 1, p, ws.as<void>(), ws.bytes(), ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "bwd dx f32 misaligned"), body_after_one(dx), dx_cpu, dx_ref, mag_dx, {b.k_dx}));
    EXPECT_TRUE(check_f32(name(c, "bwd dweight f32 misaligned"), dw.download<float>(), dw_cpu, dw_ref, mag_dw,
                          {b.k_dw}));
    EXPECT_TRUE(first_unwritten(dx)) << name(c, "bwd f32 misaligned");
    EXPECT_TRUE(buffers_ok({&out, &dx, &dw, &ws}, {&x, &w, &dy})) << name(c, "misaligned f32");
  }
}

TEST(RmsnormCuda, ForwardBf16) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : kCases) {
    const Inputs in = make_inputs(c, true);
    const size_t n = static_cast<size_t>(c.R * c.D);
    std::vector<float> cpu32(n);
    rmsnorm_forward(cpu32.data(), in.x.data(), in.w.data(), c.R, c.D, kEps);
    std::vector<double> ref(n);
    const auto x64 = to_f64(in.x), w64 = to_f64(in.w);
    rmsnorm_forward<double>(ref.data(), x64.data(), w64.data(), c.R, c.D, kEps);

    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "weight"),
                 out(n * 2, "out");
    rmsnorm_forward_cuda(out.as<__nv_bfloat16>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), {c.R, c.D, kEps},
                         ctx().stream());
    const std::vector<double> mag = abs_of(ref);
    EXPECT_TRUE(
        check_bf16(name(c, "fwd bf16"), out.download<uint16_t>(), to_bf16(cpu32), ref, &mag, bounds(c, 2).k_fwd));
    EXPECT_TRUE(buffers_ok({&out}, {&x, &w})) << name(c, "fwd bf16");
  }
}

TEST(RmsnormCuda, BackwardBf16) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : kCases)
  for (const int form : backward_forms(c)) {
    rmsnorm_cuda_set_fused_backward(form);
    const Inputs in = make_inputs(c, true);
    const size_t n = static_cast<size_t>(c.R * c.D);
    std::vector<float> dx_cpu(n), dw_cpu = in.dw0;
    rmsnorm_backward<float>(dx_cpu.data(), dw_cpu.data(), in.dy.data(), in.x.data(), in.w.data(), c.R, c.D, kEps);
    const auto x64 = to_f64(in.x), w64 = to_f64(in.w), dy64 = to_f64(in.dy);
    std::vector<double> dx_ref(n), dw_ref = to_f64(in.dw0);
    rmsnorm_backward<double>(dx_ref.data(), dw_ref.data(), dy64.data(), x64.data(), w64.data(), c.R, c.D, kEps);
    std::vector<double> mag_dx, mag_dw;
    backward_magnitudes(c, in, mag_dx, mag_dw);

    const RmsnormCudaParams p{c.R, c.D, kEps};
    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "weight"),
                 dy = DeviceBuffer::from(to_bf16(in.dy), "d_out"), dx(n * 2, "dx"),
                 dw = DeviceBuffer::from(in.dw0, "dweight");
    DeviceBuffer ws(rmsnorm_backward_cuda_workspace_bytes(p), "workspace");
    rmsnorm_backward_cuda(dx.as<__nv_bfloat16>(), dw.as<float>(), dy.as<__nv_bfloat16>(), x.as<__nv_bfloat16>(),
                          w.as<__nv_bfloat16>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
    const std::vector<uint16_t> dx_gpu = dx.download<uint16_t>();
    const std::vector<float> dw_gpu = dw.download<float>();
    EXPECT_TRUE(check_bf16(name(c, "bwd dx bf16"), dx_gpu, to_bf16(dx_cpu), dx_ref, &mag_dx, bounds(c, 2).k_dx));
    EXPECT_TRUE(
        check_f32(name(c, "bwd dweight (bf16 inputs)"), dw_gpu, dw_cpu, dw_ref, mag_dw, {bounds(c, 2).k_dw}));
    EXPECT_TRUE(buffers_ok({&dx, &dw, &ws}, {&x, &w, &dy})) << name(c, "bwd bf16");

    // dx aliasing d_out with dweight wanted: same bits for both.
    DeviceBuffer dy2 = DeviceBuffer::from(to_bf16(in.dy), "d_out = dx"),
                 dw2 = DeviceBuffer::from(in.dw0, "dweight (in place)");
    rmsnorm_backward_cuda(dy2.as<__nv_bfloat16>(), dw2.as<float>(), dy2.as<__nv_bfloat16>(), x.as<__nv_bfloat16>(),
                          w.as<__nv_bfloat16>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
    EXPECT_TRUE(dy2.download<uint16_t>() == dx_gpu) << name(c, "bwd dx bf16 in-place + dweight") << ": bits differ";
    EXPECT_TRUE(check_exact(name(c, "bwd dweight bf16 in-place"), dw2.download<float>(), dw_gpu));
    EXPECT_TRUE(buffers_ok({&dy2, &dw2, &ws}, {&x, &w})) << name(c, "bwd bf16 in-place");
  }
  rmsnorm_cuda_set_fused_backward(-1);
}

// The shapes of the fused residual forwards' tests (ResidualFused, PostResidualFused): the warp path up to 1024
// (vector and scalar slices, row counts that are not multiples of a block's 8 rows), the register paths 1025–4096
// (E 8 and 16; one row of 4096 as at batch-1 decode of a 7B model) and beyond them (4100: two launches inside).
const RmsCase kFusedResidualShapes[] = {
    {1, 4096, Fill::Normal}, {1, 2560, Fill::Normal},   {3, 1025, Fill::Normal},  {2, 4096, Fill::Large},
    {5, 1000, Fill::Normal}, {2, 4100, Fill::Normal},   {7, 2049, Fill::Special}, {4, 3000, Fill::Denormal},
    {9, 1024, Fill::Normal}, {301, 128, Fill::Large},   {13, 65, Fill::Special},  {3, 37, Fill::Denormal},
    {1, 1, Fill::Normal}};

// The fused residual + norm of a pre-norm block against the two launches it replaces, bit for bit: x after the add
// and the norm's output, on kFusedResidualShapes.
TEST(RmsnormCuda, ResidualFused) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : kFusedResidualShapes) {
    for (const float scale : {1.0f, 0.22f}) {
      const Inputs in = make_inputs(c, false);
      const size_t n = static_cast<size_t>(c.R * c.D);
      const std::vector<float> delta = make_values(n, Fill::Normal, 9);
      DeviceBuffer x_two = DeviceBuffer::from(in.x, "x"), x_one = DeviceBuffer::from(in.x, "x fused"),
                   d = DeviceBuffer::from(delta, "delta"), d_alias = DeviceBuffer::from(delta, "delta = out"),
                   x_alias = DeviceBuffer::from(in.x, "x (out = delta)"), w = DeviceBuffer::from(in.w, "weight"),
                   out_two(n * 4, "out"), out_one(n * 4, "out fused");
      residual_add_forward_cuda(x_two.as<float>(), d.as<float>(), scale, static_cast<int64_t>(n), ctx().stream());
      rmsnorm_forward_cuda(out_two.as<float>(), x_two.as<float>(), w.as<float>(), {c.R, c.D, kEps}, ctx().stream());
      rmsnorm_residual_forward_cuda(out_one.as<float>(), x_one.as<float>(), d.as<float>(), scale, w.as<float>(),
                                    {c.R, c.D, kEps}, ctx().stream());
      rmsnorm_residual_forward_cuda(d_alias.as<float>(), x_alias.as<float>(), d_alias.as<float>(), scale,
                                    w.as<float>(), {c.R, c.D, kEps}, ctx().stream());
      const std::string what = "residual fused, scale " + std::to_string(scale);
      const std::vector<float> ref_x = x_two.download<float>(), ref_out = out_two.download<float>();
      EXPECT_TRUE(check_exact(name(c, (what + " x").c_str()), x_one.download<float>(), ref_x));
      EXPECT_TRUE(check_exact(name(c, (what + " out").c_str()), out_one.download<float>(), ref_out));
      EXPECT_TRUE(check_exact(name(c, (what + " x, out = delta").c_str()), x_alias.download<float>(), ref_x));
      EXPECT_TRUE(check_exact(name(c, (what + " out = delta").c_str()), d_alias.download<float>(), ref_out));
      EXPECT_TRUE(buffers_ok({&out_one, &x_one}, {&d, &w})) << name(c, what.c_str());
      EXPECT_TRUE(d_alias.guards_intact() && x_alias.guards_intact());
    }
  }
}

// The residual add out of place (rmsnorm_residual_into_forward_rounded_cuda: the training trace's snapshots) against
// the in-place call on a copy, bit for bit: x_out, out and out16, x untouched, on kFusedResidualShapes at scales 1 and
// 0.22, and x_out = x (exactly the in-place call); x_out one float off a 16-byte boundary while the rest is aligned:
// the same bits on the register and block paths (dim > the warp path's), a contract error on the warp path's vector
// slices (D % 4 == 0 there; session 41's first form copied x and went in place on the misaligned x_out, whose scalar
// slices summed in another order: 975 of 5,000 outputs differed at R 5 × D 1000, H100).
TEST(RmsnormCuda, ResidualIntoEqualsInPlace) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : kFusedResidualShapes) {
    for (const float scale : {1.0f, 0.22f}) {
      const Inputs in = make_inputs(c, false);
      const size_t n = static_cast<size_t>(c.R * c.D);
      const std::vector<float> delta = make_values(n, Fill::Normal, 9);
      const RmsnormCudaParams p{c.R, c.D, kEps};
      DeviceBuffer x_ref = DeviceBuffer::from(in.x, "x (in place)"), x = DeviceBuffer::from(in.x, "x"),
                   x_same = DeviceBuffer::from(in.x, "x = x_out"), d = DeviceBuffer::from(delta, "delta"),
                   w = DeviceBuffer::from(in.w, "weight"), x_out(n * 4, "x_out"), x_off((n + 1) * 4, "x_out+1"),
                   out_ref(n * 4, "out"), out(n * 4, "out (into)"), out_off(n * 4, "out (x_out+1)"),
                   out_same(n * 4, "out (x_out = x)"), o16_ref(n * 2, "out16"), o16(n * 2, "out16 (into)"),
                   o16_off(n * 2, "out16 (x_out+1)");
      rmsnorm_residual_forward_rounded_cuda(out_ref.as<float>(), o16_ref.as<__nv_bfloat16>(), x_ref.as<float>(),
                                            d.as<float>(), scale, w.as<float>(), p, ctx().stream());
      rmsnorm_residual_into_forward_rounded_cuda(out.as<float>(), o16.as<__nv_bfloat16>(), x_out.as<float>(),
                                                 x.as<float>(), d.as<float>(), scale, w.as<float>(), p,
                                                 ctx().stream());
      const bool warp_vector = c.D <= rmsnorm_cuda_warp_max_dim() && c.D % 4 == 0;
      const auto misaligned = [&] {
        rmsnorm_residual_into_forward_rounded_cuda(out_off.as<float>(), o16_off.as<__nv_bfloat16>(),
                                                   x_off.as<float>() + 1, x.as<float>(), d.as<float>(), scale,
                                                   w.as<float>(), p, ctx().stream());
      };
      if (warp_vector) {
        EXPECT_THROW(misaligned(), Error) << name(c, "residual into, x_out+1 on the warp path's vector slices");
      } else {
        misaligned();
      }
      rmsnorm_residual_into_forward_rounded_cuda(out_same.as<float>(), nullptr, x_same.as<float>(), x_same.as<float>(),
                                                 d.as<float>(), scale, w.as<float>(), p, ctx().stream());
      const std::string what = "residual into, scale " + std::to_string(scale);
      const std::vector<float> ref_x = x_ref.download<float>(), ref_out = out_ref.download<float>();
      const std::vector<uint16_t> ref16 = o16_ref.download<uint16_t>();
      EXPECT_TRUE(check_exact(name(c, (what + " x_out").c_str()), x_out.download<float>(), ref_x));
      EXPECT_TRUE(check_exact(name(c, (what + " x untouched").c_str()), x.download<float>(), in.x));
      EXPECT_TRUE(check_exact(name(c, (what + " out").c_str()), out.download<float>(), ref_out));
      EXPECT_TRUE(o16.download<uint16_t>() == ref16) << name(c, (what + " out16").c_str());
      if (!warp_vector) {
        EXPECT_TRUE(check_exact(name(c, (what + " x_out+1").c_str()), body_after_one(x_off), ref_x));
        EXPECT_TRUE(check_exact(name(c, (what + " out, x_out+1").c_str()), out_off.download<float>(), ref_out));
        EXPECT_TRUE(o16_off.download<uint16_t>() == ref16) << name(c, (what + " out16, x_out+1").c_str());
      }
      EXPECT_TRUE(check_exact(name(c, (what + " x_out = x").c_str()), x_same.download<float>(), ref_x));
      EXPECT_TRUE(check_exact(name(c, (what + " out, x_out = x").c_str()), out_same.download<float>(), ref_out));
      EXPECT_TRUE(buffers_ok({&x_out, &x_off, &out, &out_off, &o16, &o16_off, &x_same, &out_same}, {&x, &d, &w}))
          << name(c, what.c_str());
    }
  }
}

// A post-norm block's norm + residual add (rmsnorm_post_residual_forward_cuda) against the two launches it replaces,
// bit for bit: the norm's output and the residual stream after the add, on kFusedResidualShapes, at scales 1 and
// 0.22, with out aliasing x (the norm in place), and with the
// residual one float off a 16-byte boundary while the rest is aligned (the vector slices stay — their order decides
// out's bits — and the add goes to its own launch).
TEST(RmsnormCuda, PostResidualFused) {
  HLM_REQUIRE_CUDA();
  for (const RmsCase& c : kFusedResidualShapes) {
    for (const float scale : {1.0f, 0.22f}) {
      const Inputs in = make_inputs(c, false);
      const size_t n = static_cast<size_t>(c.R * c.D);
      const std::vector<float> stream0 = make_values(n, c.fill == Fill::Special ? Fill::Special : Fill::Normal, 21);
      const RmsnormCudaParams p{c.R, c.D, kEps};
      DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "weight"),
                   res_two = DeviceBuffer::from(stream0, "residual"),
                   res_one = DeviceBuffer::from(stream0, "residual fused"),
                   res_alias = DeviceBuffer::from(stream0, "residual (out = x)"),
                   res_off = DeviceBuffer::from(shifted_by_one(stream0), "residual+1"),
                   x_alias = DeviceBuffer::from(in.x, "x = out"), out_two(n * 4, "out"), out_one(n * 4, "out fused"),
                   out_off(n * 4, "out (residual+1)");
      rmsnorm_forward_cuda(out_two.as<float>(), x.as<float>(), w.as<float>(), p, ctx().stream());
      residual_add_forward_cuda(res_two.as<float>(), out_two.as<float>(), scale, static_cast<int64_t>(n),
                                ctx().stream());
      rmsnorm_post_residual_forward_cuda(out_one.as<float>(), res_one.as<float>(), x.as<float>(), scale,
                                         w.as<float>(), p, ctx().stream());
      rmsnorm_post_residual_forward_cuda(x_alias.as<float>(), res_alias.as<float>(), x_alias.as<float>(), scale,
                                         w.as<float>(), p, ctx().stream());
      rmsnorm_post_residual_forward_cuda(out_off.as<float>(), res_off.as<float>() + 1, x.as<float>(), scale,
                                         w.as<float>(), p, ctx().stream());
      const std::string what = "post residual, scale " + std::to_string(scale);
      const std::vector<float> ref_res = res_two.download<float>(), ref_out = out_two.download<float>();
      EXPECT_TRUE(check_exact(name(c, (what + " out").c_str()), out_one.download<float>(), ref_out));
      EXPECT_TRUE(check_exact(name(c, (what + " residual").c_str()), res_one.download<float>(), ref_res));
      EXPECT_TRUE(check_exact(name(c, (what + " out = x").c_str()), x_alias.download<float>(), ref_out));
      EXPECT_TRUE(check_exact(name(c, (what + " residual, out = x").c_str()), res_alias.download<float>(), ref_res));
      EXPECT_TRUE(check_exact(name(c, (what + " out, residual+1").c_str()), out_off.download<float>(), ref_out));
      EXPECT_TRUE(check_exact(name(c, (what + " residual+1").c_str()), body_after_one(res_off), ref_res));
      EXPECT_TRUE(buffers_ok({&out_one, &res_one, &out_off, &res_off}, {&x, &w})) << name(c, what.c_str());
      EXPECT_TRUE(x_alias.guards_intact() && res_alias.guards_intact());
    }
  }
}

// The forwards that also write the output's bf16 rounding (rmsnorm_forward_rounded_cuda, _residual_forward_rounded_):
// out and the updated x bit for bit as the plain launchers, out16 bit for bit as cast_f32_to_bf16_cuda of the plain
// out (NaN payloads included: Special fills) — on the warp path's vector and scalar slices (D a multiple of 4 or
// not), each with out16 8-byte aligned and one element off (2-byte aligned: the vector slices' bf16 stored element by
// element; out must keep the plain launcher's bits, whose slices are chosen without out16), the register paths (E 8
// and 16) and the block path (D > 4096, the cast as its own launch); with out16 null, out and x as the plain launchers.
TEST(RmsnormCuda, RoundedOutputEqualsTheCastBitForBit) {
  HLM_REQUIRE_CUDA();
  const RmsCase shapes[] = {{9, 1024, Fill::Normal}, {301, 128, Fill::Large}, {13, 65, Fill::Special},
                            {3, 37, Fill::Denormal}, {1, 1, Fill::Normal},     {3, 2560, Fill::Normal},
                            {7, 2049, Fill::Special}, {2, 4096, Fill::Large},  {2, 4100, Fill::Normal}};
  size_t compared = 0, differing = 0;
  for (const RmsCase& c : shapes) {
    for (const bool residual : {false, true}) {
      for (const int offset : {0, 1}) {  // out16 elements: 1 = 2-byte aligned only
        const Inputs in = make_inputs(c, false);
        const size_t n = static_cast<size_t>(c.R * c.D);
        const std::vector<float> delta = make_values(n, Fill::Normal, 9);
        const RmsnormCudaParams p{c.R, c.D, kEps};
        DeviceBuffer x_plain = DeviceBuffer::from(in.x, "x"), x_round = DeviceBuffer::from(in.x, "x (rounded form)"),
                     d = DeviceBuffer::from(delta, "delta"), w = DeviceBuffer::from(in.w, "weight"),
                     out_plain(n * 4, "out"), out_round(n * 4, "out (rounded form)"), cast16(n * 2, "cast of out"),
                     out16((n + 1) * 2, "out16");
        __nv_bfloat16* o16 = out16.as<__nv_bfloat16>() + offset;
        if (residual) {
          rmsnorm_residual_forward_cuda(out_plain.as<float>(), x_plain.as<float>(), d.as<float>(), 0.5f, w.as<float>(),
                                        p, ctx().stream());
          rmsnorm_residual_forward_rounded_cuda(out_round.as<float>(), o16, x_round.as<float>(), d.as<float>(), 0.5f,
                                                w.as<float>(), p, ctx().stream());
        } else {
          rmsnorm_forward_cuda(out_plain.as<float>(), x_plain.as<float>(), w.as<float>(), p, ctx().stream());
          rmsnorm_forward_rounded_cuda(out_round.as<float>(), o16, x_round.as<float>(), w.as<float>(), p,
                                       ctx().stream());
        }
        cast_f32_to_bf16_cuda(cast16.as<__nv_bfloat16>(), out_plain.as<float>(), static_cast<int64_t>(n),
                              ctx().stream());
        const std::string what = std::string(residual ? "residual " : "") + "rounded, out16 offset " +
                                 std::to_string(offset);
        EXPECT_TRUE(check_exact(name(c, (what + " out").c_str()), out_round.download<float>(),
                                out_plain.download<float>()));
        EXPECT_TRUE(check_exact(name(c, (what + " x").c_str()), x_round.download<float>(), x_plain.download<float>()));
        const std::vector<uint16_t> got = out16.download<uint16_t>(), want = cast16.download<uint16_t>();
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) bad += got[i + static_cast<size_t>(offset)] != want[i] ? 1 : 0;
        EXPECT_EQ(bad, 0u) << name(c, what.c_str()) << ": out16 differs from the cast of out";
        // Nothing written outside the n elements (the poisoned element before or after them keeps 0xFFFF).
        EXPECT_EQ(got[offset == 1 ? 0 : n], 0xFFFFu) << name(c, what.c_str());
        EXPECT_TRUE(buffers_ok({&out_round, &x_round, &out16}, {&d, &w})) << name(c, what.c_str());
        if (offset == 0) {  // out16 null: the plain launcher's bits (callers pass an optional rounding through)
          DeviceBuffer x_null = DeviceBuffer::from(in.x, "x (no rounding)"), out_null(n * 4, "out (no rounding)");
          if (residual)
            rmsnorm_residual_forward_rounded_cuda(out_null.as<float>(), nullptr, x_null.as<float>(), d.as<float>(),
                                                  0.5f, w.as<float>(), p, ctx().stream());
          else
            rmsnorm_forward_rounded_cuda(out_null.as<float>(), nullptr, x_null.as<float>(), w.as<float>(), p,
                                         ctx().stream());
          EXPECT_TRUE(check_exact(name(c, (what + " null out16: out").c_str()), out_null.download<float>(),
                                  out_plain.download<float>()));
          EXPECT_TRUE(check_exact(name(c, (what + " null out16: x").c_str()), x_null.download<float>(),
                                  x_plain.download<float>()));
        }
        compared += n;
        differing += bad;
      }
    }
  }
  std::printf("[check] rmsnorm rounded output: %zu bf16 values against the cast, %zu differ (want 0)\n", compared,
              differing);
}

// The backward adding into dx (accumulate_dx: a pre-norm block's residual gradient) against the overwriting backward
// followed by residual_add_forward_cuda at scale 1, bit for bit: dx and dweight, on the warp path (vector and scalar
// slices) and the block path, with and without dweight.
TEST(RmsnormCuda, BackwardAccumulateEqualsOverwriteThenAdd) {
  HLM_REQUIRE_CUDA();
  const RmsCase shapes[] = {{9, 1024, Fill::Normal}, {301, 128, Fill::Large}, {13, 65, Fill::Special},
                            {3, 37, Fill::Denormal}, {3, 2560, Fill::Normal}, {2, 4100, Fill::Normal},
                            {1, 1, Fill::Normal}};
  for (const RmsCase& c : shapes) {
    const Inputs in = make_inputs(c, false);
    const size_t n = static_cast<size_t>(c.R * c.D);
    const std::vector<float> base = make_values(n, Fill::Normal, 11);
    const RmsnormCudaParams p{c.R, c.D, kEps};
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "weight"),
                 dy = DeviceBuffer::from(in.dy, "d_out"), ws(rmsnorm_backward_cuda_workspace_bytes(p), "workspace");
    for (const bool want_dw : {true, false}) {
      DeviceBuffer dx(n * 4, "dx"), sum = DeviceBuffer::from(base, "dx before (two launches)"),
                   acc = DeviceBuffer::from(base, "dx before (accumulated)"),
                   dw_two = DeviceBuffer::from(in.dw0, "dweight (two launches)"),
                   dw_acc = DeviceBuffer::from(in.dw0, "dweight (accumulated)");
      rmsnorm_backward_cuda(dx.as<float>(), want_dw ? dw_two.as<float>() : nullptr, dy.as<float>(), x.as<float>(),
                            w.as<float>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
      residual_add_forward_cuda(sum.as<float>(), dx.as<float>(), 1.0f, static_cast<int64_t>(n), ctx().stream());
      rmsnorm_backward_cuda(acc.as<float>(), want_dw ? dw_acc.as<float>() : nullptr, dy.as<float>(), x.as<float>(),
                            w.as<float>(), p, ws.as<void>(), ws.bytes(), ctx().stream(), /*accumulate_dx=*/true);
      const std::string what = std::string("bwd accumulate") + (want_dw ? " + dweight" : "");
      EXPECT_TRUE(check_exact(name(c, (what + " dx").c_str()), acc.download<float>(), sum.download<float>()));
      EXPECT_TRUE(check_exact(name(c, (what + " dweight").c_str()), dw_acc.download<float>(),
                              dw_two.download<float>()));
      EXPECT_TRUE(buffers_ok({&acc, &dw_acc, &ws}, {&x, &w, &dy})) << name(c, what.c_str());
    }
  }
}

// The backward that also writes dx's bf16 rounding (rmsnorm_backward_rounded_cuda: a pre-norm block's residual
// gradient for the branch's output projection) against the plain backward, bit for bit: dx and dweight the plain
// launcher's, dx16 the host's f32_to_bf16 (cast_f32_to_bf16_cuda's rounding) of each plain dx, fresh and accumulating
// into a non-zero dx, with and without dweight; the warp path (vector and scalar slices), the block path in both
// backward forms (dx16 from the fused kernel's registers, or a cast launch after the three passes) and rows past the
// register kernels (a cast launch). The element after dx16's end stays unwritten.
TEST(RmsnormCuda, BackwardRoundedDxIsTheCastOfDx) {
  HLM_REQUIRE_CUDA();
  const RmsCase shapes[] = {{9, 1024, Fill::Normal}, {301, 128, Fill::Large},  {13, 65, Fill::Special},
                            {3, 2560, Fill::Normal}, {301, 2560, Fill::Special}, {65, 4096, Fill::Normal},
                            {2, 4100, Fill::Normal}, {1, 1, Fill::Normal}};
  size_t compared = 0, differing = 0;
  for (const RmsCase& c : shapes)
  for (const int form : backward_forms(c)) {
    rmsnorm_cuda_set_fused_backward(form);
    const Inputs in = make_inputs(c, false);
    const size_t n = static_cast<size_t>(c.R * c.D);
    const std::vector<float> base = make_values(n, Fill::Normal, 12);
    const RmsnormCudaParams p{c.R, c.D, kEps};
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "weight"),
                 dy = DeviceBuffer::from(in.dy, "d_out"), ws(rmsnorm_backward_cuda_workspace_bytes(p), "workspace");
    for (const bool accumulate : {false, true})
    for (const bool want_dw : {true, false}) {
      DeviceBuffer dx_plain = DeviceBuffer::from(base, "dx (plain)"), dx_r = DeviceBuffer::from(base, "dx (rounded)"),
                   dw_plain = DeviceBuffer::from(in.dw0, "dweight (plain)"),
                   dw_r = DeviceBuffer::from(in.dw0, "dweight (rounded)"), dx16((n + 1) * 2, "dx16");
      rmsnorm_backward_cuda(dx_plain.as<float>(), want_dw ? dw_plain.as<float>() : nullptr, dy.as<float>(),
                            x.as<float>(), w.as<float>(), p, ws.as<void>(), ws.bytes(), ctx().stream(), accumulate);
      rmsnorm_backward_rounded_cuda(dx_r.as<float>(), dx16.as<__nv_bfloat16>(), want_dw ? dw_r.as<float>() : nullptr,
                                    dy.as<float>(), x.as<float>(), w.as<float>(), p, ws.as<void>(), ws.bytes(),
                                    ctx().stream(), accumulate);
      const std::string what = std::string("bwd rounded dx") + (accumulate ? " accumulating" : " fresh") +
                               (want_dw ? " + dweight" : "");
      const std::vector<float> plain = dx_plain.download<float>();
      EXPECT_TRUE(check_exact(name(c, (what + ": dx").c_str()), dx_r.download<float>(), plain));
      EXPECT_TRUE(
          check_exact(name(c, (what + ": dweight").c_str()), dw_r.download<float>(), dw_plain.download<float>()));
      const std::vector<uint16_t> bits = dx16.download<uint16_t>();
      size_t bad = bits[n] != 0xFFFFu ? 1 : 0;  // the poison after the data
      for (size_t i = 0; i < n; ++i) bad += bits[i] != f32_to_bf16(plain[i]) ? 1 : 0;
      compared += n;
      differing += bad;
      EXPECT_EQ(bad, 0u) << name(c, (what + ": dx16 vs the cast of dx").c_str());
      EXPECT_TRUE(buffers_ok({&dx_r, &dw_r, &ws}, {&x, &w, &dy})) << name(c, what.c_str());
    }
  }
  rmsnorm_cuda_set_fused_backward(-1);
  std::printf("[check] rmsnorm rounded dx: %zu bf16 values against the cast of dx, %zu differ (want 0)\n", compared,
              differing);
}
