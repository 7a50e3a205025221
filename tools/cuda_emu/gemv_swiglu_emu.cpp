// Host driver of gemv_swiglu_emu.sh: the small-row GEMV kernel of src/ops/matmul/gemv.cu run on the CPU
// (tools/cuda_emu/emu.h) in its group form and in its SwiGLU-epilogue form (kSwiglu), on an MLP's gate and up weights:
//   - group form against a double-precision product of the same bf16 values (x rounded to bf16 as the kernel stages
//     it): |y − ref| ≤ K·2⁻²⁴·Σ|w·x| + |bias|·2⁻²⁴ (an fp32 sum of K products in any order);
//   - SwiGLU form against the group form followed by swiglu_math.cuh's value (and its bf16 rounding, bf16_round.cuh):
//     byte for byte, as the GPU test demands of the real kernels.
// Grids of 1-3 blocks of 256 threads (8 warps), so warps take several columns or pairs.
#include "gemv_kernel_emu.h"  // the kernel part of gemv.cu (gemv_swiglu_emu.sh)

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace hlm;

namespace {

int failures = 0, checks = 0;

void report(const std::string& what, bool ok, double err, double bound) {
  ++checks;
  if (!ok) ++failures;
  std::printf("[%s] %s: %.3g (bound %.3g)\n", ok ? "pass" : "FAIL", what.c_str(), err, bound);
}

template <int M>
void run(int64_t K, int64_t n, bool bias, unsigned blocks, uint64_t seed) {
  const std::string name = "M " + std::to_string(M) + " K " + std::to_string(K) + " n " + std::to_string(n) +
                           (bias ? " bias" : "") + " blocks " + std::to_string(blocks);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<__nv_bfloat16> wg(static_cast<size_t>(n * K)), wu(wg.size());
  for (auto& w : wg) w = __float2bfloat16_rn(normal(rng));
  for (auto& w : wu) w = __float2bfloat16_rn(normal(rng));
  std::vector<float> bg(static_cast<size_t>(n)), bu(bg.size()), x(static_cast<size_t>(M * K));
  for (auto& b : bg) b = normal(rng);
  for (auto& b : bu) b = normal(rng);
  for (auto& v : x) v = 3.0f * normal(rng);  // values of a few units: SwiGLU's exp over a wide range

  GemvGroup g{};
  g.outs = 2;
  g.first[0] = 0;
  g.first[1] = n;
  g.first[2] = 2 * n;
  g.w[0] = wg.data();
  g.w[1] = wu.data();
  g.bias[0] = bias ? bg.data() : nullptr;
  g.bias[1] = bias ? bu.data() : nullptr;
  g.n[0] = g.n[1] = n;
  std::vector<float> yg(static_cast<size_t>(M * n), NAN), yu(yg.size(), NAN);
  g.y[0] = yg.data();
  g.y[1] = yu.data();
  const size_t smem = static_cast<size_t>(M * K) * sizeof(uint16_t);
  emu_launch(Dim{blocks, 1, 1}, kThreads, smem, [&] { gemv_pipe_kernel<M, kRound, false>(g, x.data(), nullptr, K); });

  // Group form against double.
  double worst = 0;
  for (int m = 0; m < M; ++m)
    for (int64_t j = 0; j < n; ++j)
      for (int o = 0; o < 2; ++o) {
        const __nv_bfloat16* w = (o == 0 ? wg.data() : wu.data()) + j * K;
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double xv = __bfloat162float(__float2bfloat16_rn(x[m * K + k]));
          ref += static_cast<double>(__bfloat162float(w[k])) * xv;
          mag += std::abs(static_cast<double>(__bfloat162float(w[k])) * xv);
        }
        const double b = bias ? (o == 0 ? bg[j] : bu[j]) : 0.0;
        const double got = (o == 0 ? yg : yu)[m * n + j];
        const double allowed = (static_cast<double>(K) * mag + std::abs(b)) * std::ldexp(1.0, -24) + 1e-30;
        worst = std::max(worst, std::abs(got - (ref + b)) / allowed);
      }
  report(name + ": group GEMV against double (error / allowed)", worst <= 1.0, worst, 1.0);

  // SwiGLU form, fp32 and bf16 h, against the group form + SwiGLU.
  for (const bool bf16_out : {false, true}) {
    std::vector<float> h32(static_cast<size_t>(M * n), NAN);
    std::vector<__nv_bfloat16> h16(static_cast<size_t>(M * n));
    g.y[0] = g.y[1] = nullptr;
    g.h_f32 = bf16_out ? nullptr : h32.data();
    g.h_bf16 = bf16_out ? h16.data() : nullptr;
    emu_launch(Dim{blocks, 1, 1}, kThreads, smem, [&] { gemv_pipe_kernel<M, kRound, true>(g, x.data(), nullptr, K); });
    size_t differ = 0;
    for (int64_t i = 0; i < M * n; ++i) {
      const float want = cuda::swiglu_forward_value(yg[i], yu[i]);
      if (bf16_out)
        differ += h16[i].x != cuda::f32_to_bf16_bits(want);
      else
        differ += std::memcmp(&h32[i], &want, sizeof(float)) != 0;
    }
    report(name + (bf16_out ? ": SwiGLU epilogue, bf16 h: values differing" : ": SwiGLU epilogue, fp32 h: values differing"),
           differ == 0, static_cast<double>(differ), 0);
  }
}

}  // namespace

int main() {
  uint64_t seed = 1;
  // K 8: one chunk; 1000: lanes with unequal chunk counts; 4104: several rounds per column. n 1: one pair; 37 and 300:
  // more pairs than one block's 8 warps (pairs strided over warps, and over blocks with 3).
  for (const auto& [K, n] : {std::pair<int64_t, int64_t>{8, 37}, {1000, 1}, {1000, 37}, {4104, 20}, {264, 300}})
    for (const unsigned blocks : {1u, 3u}) {
      run<1>(K, n, false, blocks, ++seed);
      run<1>(K, n, true, blocks, ++seed);
    }
  run<2>(1000, 37, true, 2, ++seed);
  run<3>(264, 45, false, 1, ++seed);
  run<4>(4104, 9, true, 3, ++seed);
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
