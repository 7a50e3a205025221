// Host driver of rmsnorm_emu.sh: the RMSNorm forward kernels for rows longer than a warp's (src/ops/rmsnorm/rmsnorm.cu)
// run on the CPU (tools/cuda_emu/emu.h). The register kernel (rmsnorm_forward_regs_kernel<float, E>) against:
//   - the block kernel (rmsnorm_forward_kernel<float>) on the same x, byte for byte, without delta (they sum the row
//     in the same order: thread t the elements t, t + 256, ..., then block_sum);
//   - with delta: x afterwards against residual_add_value(x, scale, delta) element by element (bits), and out against
//     the block kernel run on that x (bits); out16 against f32_to_bf16_bits(out) (bits);
//   - with x_out (the residual add out of place, rmsnorm_residual_into_forward_rounded_cuda): x_out against the same
//     formula, x untouched, out and out16 the in-place call's bytes;
//   - out aliasing delta (allowed by rmsnorm_cuda.h): the same bytes as with separate buffers;
//   - with post (rmsnorm_post_residual_forward_cuda's path): out as without it, and post afterwards against
//     residual_add_value(post, scale, out) element by element (bits), also with out aliasing x;
//   - grids of one block per row and of 2 blocks (grid-stride rows);
//   - a double evaluation of w · x / sqrt(mean(x²) + eps) on rows of finite values: relative 1e-5 of the row's largest
//     |out| (a gross-error check: fp32 sums of ≤ 4,096 squares are far inside it).
// The backward's dx kernel (rmsnorm_dx_kernel<float, I>) after the row-stats kernel: I = uint32_t and int64_t give the
// same bytes, fresh and accumulating into a non-zero dx, equal to the kernel's formula evaluated here per element
// (inv and m read back from the row-stats kernel), on grids of the launcher's size and of 3 blocks (grid-stride).
// The fused backward (rmsnorm_backward_regs_kernel<float, E>): dx against the row-stats + dx kernels byte for byte
// (fresh, accumulating, aliasing d_out), its dx16 (the stored dx's bf16 rounding, fresh and accumulating) against
// f32_to_bf16_bits(dx), and its dweight partial rows against the host's fma chain (run_fused_case).
// The launchers' choice of E (forward: 8 up to 8 · 256 elements, 16 up to 16 · 256; backward also 12 up to 12 · 256)
// is mirrored here (kernels only are copied).
#include "rmsnorm_kernel_emu.h"  // the kernel part of rmsnorm.cu (rmsnorm_emu.sh)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace hlm;

namespace {

int failures = 0, checks = 0;

void report(const std::string& what, size_t differ) {
  ++checks;
  if (differ != 0) ++failures;
  std::printf("[%s] %s: values differing %zu\n", differ == 0 ? "pass" : "FAIL", what.c_str(), differ);
}

size_t differing_bytes(const float* a, const float* b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 ? 1 : 0;
  return d;
}

void regs(float* out, float* x, const float* w, int64_t R, int64_t D, float eps, const float* delta, float scale,
          __nv_bfloat16* out16, unsigned blocks, float* post = nullptr, float* x_out = nullptr) {
  const Dim grid{blocks, 1, 1};
  if (D <= 8 * kThreads)
    emu_launch(grid, kThreads, 0, [&] {
      rmsnorm_forward_regs_kernel<float, 8>(out, x, w, R, D, eps, delta, scale, out16, post, x_out);
    });
  else
    emu_launch(grid, kThreads, 0, [&] {
      rmsnorm_forward_regs_kernel<float, 16>(out, x, w, R, D, eps, delta, scale, out16, post, x_out);
    });
}

void block(float* out, const float* x, const float* w, int64_t R, int64_t D, float eps, unsigned blocks) {
  emu_launch(Dim{blocks, 1, 1}, kThreads, 0, [&] { rmsnorm_forward_kernel<float>(out, x, w, R, D, eps); });
}

std::vector<float> values(size_t n, std::mt19937& rng, float spread, bool edges) {
  std::normal_distribution<float> nd(0.0f, spread);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  if (edges && n > 8) {  // in the last row only (the double check skips it)
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), 1e30f, -0.0f, 0.0f};
    for (size_t k = 0; k < std::size(special); ++k) v[n - 1 - 3 * k] = special[k];
  }
  return v;
}

void run_case(int64_t R, int64_t D, float scale, unsigned blocks, bool edges, std::mt19937& rng) {
  const float eps = 1e-6f;
  const size_t n = static_cast<size_t>(R * D);
  const std::vector<float> x0 = values(n, rng, 1.5f, edges), delta = values(n, rng, 0.7f, edges),
                           w = values(static_cast<size_t>(D), rng, 1.0f, false);
  const std::string tag = "R " + std::to_string(R) + " D " + std::to_string(D) + " scale " + std::to_string(scale) +
                          " grid " + std::to_string(blocks) + (edges ? " edges" : "");

  // Without delta: the register kernel against the block kernel.
  std::vector<float> xa = x0, out_regs(n), out_block(n);
  regs(out_regs.data(), xa.data(), w.data(), R, D, eps, nullptr, 1.0f, nullptr, blocks);
  block(out_block.data(), x0.data(), w.data(), R, D, eps, blocks);
  report(tag + ": regs vs block, no delta", differing_bytes(out_regs.data(), out_block.data(), n));
  report(tag + ": x untouched without delta", differing_bytes(xa.data(), x0.data(), n));

  // With delta and out16.
  std::vector<float> xd = x0, out_d(n);
  std::vector<__nv_bfloat16> out16(n);
  regs(out_d.data(), xd.data(), w.data(), R, D, eps, delta.data(), scale, out16.data(), blocks);
  std::vector<float> x_want(n);
  for (size_t i = 0; i < n; ++i) x_want[i] = cuda::residual_add_value(x0[i], scale, delta[i]);
  report(tag + ": x += scale · delta", differing_bytes(xd.data(), x_want.data(), n));
  std::vector<float> out_want(n);
  block(out_want.data(), x_want.data(), w.data(), R, D, eps, blocks);
  report(tag + ": out with delta vs block on the added x", differing_bytes(out_d.data(), out_want.data(), n));
  size_t bad16 = 0;
  for (size_t i = 0; i < n; ++i) bad16 += out16[i].x != cuda::f32_to_bf16_bits(out_d[i]) ? 1 : 0;
  report(tag + ": out16 = bf16 rounding of out", bad16);

  // The residual add out of place (x_out: the training trace's snapshots): x_out, out and out16 as in place, x only
  // read.
  std::vector<float> xi = x0, x_into(n, std::numeric_limits<float>::quiet_NaN()), out_i(n);
  std::vector<__nv_bfloat16> out16_i(n);
  regs(out_i.data(), xi.data(), w.data(), R, D, eps, delta.data(), scale, out16_i.data(), blocks, nullptr,
       x_into.data());
  report(tag + ": x_out = x + scale · delta, x untouched",
         differing_bytes(x_into.data(), x_want.data(), n) + differing_bytes(xi.data(), x0.data(), n));
  size_t bad16_i = 0;
  for (size_t i = 0; i < n; ++i) bad16_i += out16_i[i].x != out16[i].x ? 1 : 0;
  report(tag + ": x_out: out and out16 as in place", differing_bytes(out_i.data(), out_d.data(), n) + bad16_i);

  // out aliasing delta.
  std::vector<float> xs = x0, shared = delta;
  regs(shared.data(), xs.data(), w.data(), R, D, eps, shared.data(), scale, nullptr, blocks);
  report(tag + ": out aliasing delta", differing_bytes(shared.data(), out_d.data(), n) +
                                           differing_bytes(xs.data(), xd.data(), n));

  // With post (a post-norm block's residual add of the normed branch): out as without it, post += scale · out.
  const std::vector<float> post0 = values(n, rng, 2.0f, edges);
  std::vector<float> xp = x0, out_p(n), post = post0;
  regs(out_p.data(), xp.data(), w.data(), R, D, eps, nullptr, scale, nullptr, blocks, post.data());
  std::vector<float> post_want(n);
  for (size_t i = 0; i < n; ++i) post_want[i] = cuda::residual_add_value(post0[i], scale, out_regs[i]);
  report(tag + ": post, out as without it", differing_bytes(out_p.data(), out_regs.data(), n));
  report(tag + ": post += scale · out", differing_bytes(post.data(), post_want.data(), n));
  // ... and out aliasing x (the norm in place).
  std::vector<float> xo = x0, post_o = post0;
  regs(xo.data(), xo.data(), w.data(), R, D, eps, nullptr, scale, nullptr, blocks, post_o.data());
  report(tag + ": post, out aliasing x", differing_bytes(xo.data(), out_regs.data(), n) +
                                             differing_bytes(post_o.data(), post_want.data(), n));

  // Double evaluation on the rows without edge values.
  size_t gross = 0;
  for (int64_t r = 0; r < (edges ? R - 1 : R); ++r) {
    double ss = 0.0, top = 0.0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(x_want[r * D + d]) * x_want[r * D + d];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    std::vector<double> ref(static_cast<size_t>(D));
    for (int64_t d = 0; d < D; ++d) top = std::max(top, std::fabs(ref[d] = w[d] * (x_want[r * D + d] * inv)));
    for (int64_t d = 0; d < D; ++d)
      gross += std::fabs(out_d[r * D + d] - ref[d]) > 1e-5 * top ? 1 : 0;
  }
  report(tag + ": out vs double (relative 1e-5)", gross);
}

// A backward case's inputs (x, dy, w, a non-zero dx to accumulate into) and the row-stats kernel's r and m.
struct BackwardInputs {
  static constexpr float eps = 1e-6f;
  std::vector<float> x, dy, w, dx0, inv, mean_gn;
  BackwardInputs(int64_t R, int64_t D, std::mt19937& rng) {
    const size_t n = static_cast<size_t>(R * D);
    x = values(n, rng, 1.5f, false);
    dy = values(n, rng, 0.8f, false);
    w = values(static_cast<size_t>(D), rng, 1.0f, false);
    dx0 = values(n, rng, 0.3f, false);
    inv.resize(static_cast<size_t>(R));
    mean_gn.resize(static_cast<size_t>(R));
    emu_launch(Dim{static_cast<unsigned>(R), 1, 1}, kThreads, 0, [&] {
      rmsnorm_row_stats_kernel<float>(inv.data(), mean_gn.data(), dy.data(), x.data(), w.data(), R, D, eps);
    });
  }
};

// The backward's elementwise dx on rows of D > 1024: both index types against the formula, fresh and accumulating.
void run_dx_case(int64_t R, int64_t D, unsigned blocks, std::mt19937& rng) {
  const BackwardInputs in(R, D, rng);
  const float eps = BackwardInputs::eps;
  const size_t n = static_cast<size_t>(R * D);
  const std::vector<float> &x = in.x, &dy = in.dy, &w = in.w, &dx0 = in.dx0, &inv = in.inv, &mean_gn = in.mean_gn;
  const std::string tag = "dx R " + std::to_string(R) + " D " + std::to_string(D) + " grid " + std::to_string(blocks);
  for (const bool accumulate : {false, true}) {
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t r = i / static_cast<size_t>(D), d = i % static_cast<size_t>(D);
      const float ir = inv[r];
      const float g = __fmul_rn(dy[i], w[d]);
      const float v = __fmul_rn(ir, __fsub_rn(g, __fmul_rn(__fmul_rn(x[i], ir), mean_gn[r])));
      want[i] = accumulate ? __fadd_rn(dx0[i], v) : v;
    }
    std::vector<float> dx32 = dx0, dx64 = dx0;
    const Dim grid{blocks, 1, 1};
    emu_launch(grid, 256, 0, [&] {
      rmsnorm_dx_kernel<float, uint32_t>(dx32.data(), dy.data(), x.data(), w.data(), inv.data(), mean_gn.data(), R, D,
                                         accumulate);
    });
    emu_launch(grid, 256, 0, [&] {
      rmsnorm_dx_kernel<float, int64_t>(dx64.data(), dy.data(), x.data(), w.data(), inv.data(), mean_gn.data(), R, D,
                                        accumulate);
    });
    const std::string mode = accumulate ? " accumulating" : " fresh";
    report(tag + mode + ": 32-bit index vs the formula", differing_bytes(dx32.data(), want.data(), n));
    report(tag + mode + ": 64-bit index vs the formula", differing_bytes(dx64.data(), want.data(), n));
  }
}

// The fused backward (rmsnorm_backward_regs_kernel<float, E>, D ≤ 4096) against the former passes: dx byte for byte
// against rmsnorm_row_stats_kernel + rmsnorm_dx_kernel (fresh and accumulating, and with dx aliasing d_out), and each
// block's dweight partial row against fma(dy·x, r, acc) over the group's rows in order on the host (r from the
// row-stats kernel); without dx (dweight only) and without dweight (dx only). Groups of `rows_per_group` rows, the
// last one partial when R is not a multiple.
template <int E>
void run_fused_case(int64_t R, int64_t D, int64_t rows_per_group, std::mt19937& rng) {
  const BackwardInputs in(R, D, rng);
  const float eps = BackwardInputs::eps;
  const size_t n = static_cast<size_t>(R * D);
  const std::vector<float> &x = in.x, &dy = in.dy, &w = in.w, &dx0 = in.dx0, &inv = in.inv, &mean_gn = in.mean_gn;
  const int64_t groups = (R + rows_per_group - 1) / rows_per_group;
  std::vector<float> want_dw(static_cast<size_t>(groups * D), 0.0f);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = g * rows_per_group; r < std::min(R, (g + 1) * rows_per_group); ++r)
      for (int64_t d = 0; d < D; ++d) {
        float& acc = want_dw[static_cast<size_t>(g * D + d)];
        acc = std::fma(__fmul_rn(dy[r * D + d], x[r * D + d]), inv[r], acc);
      }
  const Dim grid{static_cast<unsigned>(groups), 1, 1};
  const std::string tag = "fused bwd E " + std::to_string(E) + " R " + std::to_string(R) + " D " + std::to_string(D) +
                          " rows/group " + std::to_string(rows_per_group);
  for (const bool accumulate : {false, true}) {
    std::vector<float> want = dx0;
    const Dim dx_grid{static_cast<unsigned>((n + 255) / 256), 1, 1};
    emu_launch(dx_grid, 256, 0, [&] {
      rmsnorm_dx_kernel<float, int64_t>(want.data(), dy.data(), x.data(), w.data(), inv.data(), mean_gn.data(), R, D,
                                        accumulate);
    });
    std::vector<float> dx = dx0, partial(static_cast<size_t>(groups * D), -1.0f);
    emu_launch(grid, kThreads, 0, [&] {
      rmsnorm_backward_regs_kernel<float, E>(dx.data(), partial.data(), dy.data(), x.data(), w.data(), R, D,
                                             rows_per_group, eps, accumulate);
    });
    const std::string mode = accumulate ? " accumulating" : " fresh";
    report(tag + mode + ": dx vs row stats + dx kernel", differing_bytes(dx.data(), want.data(), n));
    // The same launch writing dx16 too: dx unchanged, dx16 the rounding of each stored dx.
    std::vector<float> dx_r = dx0;
    std::vector<__nv_bfloat16> dx16(n);
    for (__nv_bfloat16& h : dx16) h.x = 0x7FFF;  // poison: a value never written shows
    emu_launch(grid, kThreads, 0, [&] {
      rmsnorm_backward_regs_kernel<float, E>(dx_r.data(), nullptr, dy.data(), x.data(), w.data(), R, D,
                                             rows_per_group, eps, accumulate, dx16.data());
    });
    report(tag + mode + ": dx with dx16 on vs without", differing_bytes(dx_r.data(), dx.data(), n));
    size_t bad16 = 0;
    for (size_t i = 0; i < n; ++i) bad16 += dx16[i].x != cuda::f32_to_bf16_bits(dx[i]) ? 1 : 0;
    report(tag + mode + ": dx16 = bf16 rounding of dx", bad16);
    report(tag + mode + ": dweight partials vs the host's fma chain",
           differing_bytes(partial.data(), want_dw.data(), partial.size()));
    if (accumulate) continue;
    std::vector<float> in_place = dy;  // dx aliasing d_out, dx only
    emu_launch(grid, kThreads, 0, [&] {
      rmsnorm_backward_regs_kernel<float, E>(in_place.data(), nullptr, in_place.data(), x.data(), w.data(), R, D,
                                             rows_per_group, eps, false);
    });
    report(tag + ": dx aliasing d_out, no dweight", differing_bytes(in_place.data(), want.data(), n));
    std::vector<float> only_dw(static_cast<size_t>(groups * D), -1.0f);
    emu_launch(grid, kThreads, 0, [&] {
      rmsnorm_backward_regs_kernel<float, E>(nullptr, only_dw.data(), dy.data(), x.data(), w.data(), R, D,
                                             rows_per_group, eps, false);
    });
    report(tag + ": dweight only", differing_bytes(only_dw.data(), want_dw.data(), only_dw.size()));
  }
}

}  // namespace

int main() {
  std::mt19937 rng(36);
  const struct {
    int64_t R, D;
  } shapes[] = {{3, 1025}, {2, 2047}, {3, 2048}, {3, 2049}, {3, 2560}, {2, 4095}, {3, 4096}};
  for (const auto& s : shapes) {
    run_case(s.R, s.D, 1.0f, static_cast<unsigned>(s.R), false, rng);
    run_case(s.R, s.D, 0.22f, 2, true, rng);
  }
  for (const auto& s : shapes) {
    const int64_t n = s.R * s.D;
    run_dx_case(s.R, s.D, static_cast<unsigned>((n + 255) / 256), rng);  // the launcher's grid (below its cap)
    run_dx_case(s.R, s.D, 3, rng);
  }
  // The launcher's E for each D (8 up to 2,048, 12 up to 3,072, 16 up to 4,096); groups of 2 and of 3 rows, the
  // last one partial.
  run_fused_case<8>(5, 1025, 2, rng);
  run_fused_case<8>(4, 2048, 3, rng);
  run_fused_case<12>(5, 2049, 2, rng);
  run_fused_case<12>(7, 2560, 3, rng);
  run_fused_case<12>(3, 3072, 2, rng);
  run_fused_case<16>(5, 3073, 2, rng);
  run_fused_case<16>(4, 4096, 3, rng);
  std::printf("rmsnorm_emu: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
