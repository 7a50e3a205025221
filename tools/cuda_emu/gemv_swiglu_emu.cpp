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
  emu_launch(Dim{blocks, 1, 1}, kThreads, smem, [&] { gemv_pipe_kernel<M, kRound, false, false>(g, x.data(), nullptr, K, GemvNorm{}); });

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
    emu_launch(Dim{blocks, 1, 1}, kThreads, smem, [&] { gemv_pipe_kernel<M, kRound, true, false>(g, x.data(), nullptr, K, GemvNorm{}); });
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

// The norm prologue (kNorm, GemvNorm) against a host model of rmsnorm_cuda.h's block path, operation for operation
// (thread t of 256 sums v[t], v[t + 256], ... with fmaf; each warp's 32 sums by the xor tree 16, 8, 4, 2, 1; the 8
// warp sums in order from 0; r = 1 / sqrt(Σ / K + eps); y = w · (v · r); the residual adds as residual_add_value):
// the norm's outputs (y, its bf16 rounding, the stream's next value) byte for byte, and the GEMV's products byte for
// byte against the plain kernel fed the model's x (fp32, rounded in the kernel). Forms: kPre without and with a
// branch (scale 1 / 0.3, with the bf16 output), kPost; group (two outputs) and SwiGLU; grids of 1-5 blocks over
// K = 1032 / 1152 / 2056 (5, 4.5 and 8+ passes: blocks writing several passes or none).
float model_value(const GemvNorm& n, const float* h, const float* br, int64_t d) {
  if (n.kind == GemvNorm::kPost) return br[d];
  return br != nullptr ? cuda::residual_add_value(h[d], n.scale, br[d]) : h[d];
}

template <int M>
void run_norm(int64_t K, GemvNorm::Kind kind, bool branch, float scale, bool out16, bool swiglu, unsigned blocks,
              uint64_t seed) {
  const int64_t n1 = 5, n2 = 19;
  const std::string name = std::string("norm prologue ") + (kind == GemvNorm::kPost ? "post" : "pre") +
                           (branch ? " + branch x" + std::to_string(scale) : "") + (out16 ? " + bf16" : "") +
                           (swiglu ? " swiglu" : " group") + " M " + std::to_string(M) + " K " + std::to_string(K) +
                           " blocks " + std::to_string(blocks);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t rows = static_cast<size_t>(M * K);
  std::vector<float> h(rows), br(rows), wn(static_cast<size_t>(K));
  for (auto& v : h) v = 2.0f * normal(rng);
  for (auto& v : br) v = normal(rng);
  for (auto& v : wn) v = 1.0f + 0.1f * normal(rng);
  std::vector<__nv_bfloat16> w1(static_cast<size_t>(n1 * K)), w2(static_cast<size_t>(n2 * K)), w3(w2.size());
  for (auto* w : {&w1, &w2, &w3})
    for (auto& v : *w) v = __float2bfloat16_rn(normal(rng));

  GemvNorm nm;
  nm.kind = kind;
  nm.h = h.data();
  nm.branch = branch ? br.data() : nullptr;
  nm.scale = scale;
  nm.weight = wn.data();
  nm.eps = 1e-6f;
  std::vector<float> out(rows, NAN), hout(rows, NAN);
  std::vector<__nv_bfloat16> o16(rows);
  nm.norm_out = out.data();
  nm.h_out = branch ? hout.data() : nullptr;
  nm.norm_out16 = out16 ? o16.data() : nullptr;

  // The host model: x (the GEMV's input before its rounding) and the three outputs.
  std::vector<float> x(rows), want_out(rows), want_hout(rows, NAN);
  for (int m = 0; m < M; ++m) {
    const float* hm = h.data() + m * K;
    const float* bm = branch ? br.data() + m * K : nullptr;
    float warp_sums[kThreads / 32];
    for (int w = 0; w < kThreads / 32; ++w) {
      float lane[32];
      for (int l = 0; l < 32; ++l) {
        float ss = 0.0f;
        for (int64_t d = w * 32 + l; d < K; d += kThreads) {
          const float v = model_value(nm, hm, bm, d);
          ss = std::fma(v, v, ss);
        }
        lane[l] = ss;
      }
      for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ off];
        std::memcpy(lane, next, sizeof(lane));
      }
      warp_sums[w] = lane[0];
    }
    float total = 0.0f;
    for (const float s : warp_sums) total += s;
    const float inv = 1.0f / std::sqrt(total / static_cast<float>(K) + nm.eps);
    for (int64_t d = 0; d < K; ++d) {
      const float v = model_value(nm, hm, bm, d);
      const float y = wn[d] * (v * inv);
      want_out[m * K + d] = y;
      if (kind == GemvNorm::kPost) {
        x[m * K + d] = want_hout[m * K + d] = cuda::residual_add_value(hm[d], scale, y);
      } else {
        x[m * K + d] = y;
        if (branch) want_hout[m * K + d] = v;
      }
    }
  }

  // The plain kernel on the model's x, then the prologue kernel.
  GemvGroup g{};
  g.outs = 2;
  g.first[0] = 0;
  g.first[1] = swiglu ? n2 : n1;
  g.first[2] = swiglu ? 2 * n2 : n1 + n2;
  g.w[0] = swiglu ? w2.data() : w1.data();
  g.w[1] = swiglu ? w3.data() : w2.data();
  g.n[0] = swiglu ? n2 : n1;
  g.n[1] = n2;
  std::vector<float> ya(static_cast<size_t>(M * n2), NAN), yb(ya.size(), NAN), za(ya.size(), NAN), zb(ya.size(), NAN);
  const size_t smem = rows * sizeof(uint16_t);
  const auto launch = [&](float* y0, float* y1, bool norm) {
    g.y[0] = swiglu ? nullptr : y0;
    g.y[1] = swiglu ? nullptr : y1;
    g.h_f32 = swiglu ? y0 : nullptr;
    g.h_bf16 = nullptr;
    emu_launch(Dim{blocks, 1, 1}, kThreads, smem, [&] {
      if (swiglu && norm) gemv_pipe_kernel<M, kRound, true, true>(g, nullptr, nullptr, K, nm);
      else if (swiglu) gemv_pipe_kernel<M, kRound, true, false>(g, x.data(), nullptr, K, GemvNorm{});
      else if (norm) gemv_pipe_kernel<M, kRound, false, true>(g, nullptr, nullptr, K, nm);
      else gemv_pipe_kernel<M, kRound, false, false>(g, x.data(), nullptr, K, GemvNorm{});
    });
  };
  launch(ya.data(), yb.data(), false);
  launch(za.data(), zb.data(), true);
  const auto differing = [](const void* a, const void* b, size_t n, size_t elem) {
    size_t d = 0;
    for (size_t i = 0; i < n; ++i)
      d += std::memcmp(static_cast<const char*>(a) + i * elem, static_cast<const char*>(b) + i * elem, elem) != 0;
    return d;
  };
  size_t bad = differing(za.data(), ya.data(), static_cast<size_t>(M * g.n[0]), 4);
  if (!swiglu) bad += differing(zb.data(), yb.data(), static_cast<size_t>(M * n2), 4);
  report(name + ": products against the plain GEMV on the model's x (values differing)", bad == 0,
         static_cast<double>(bad), 0);
  const size_t bad_out = differing(out.data(), want_out.data(), rows, 4);
  size_t bad_h = branch ? differing(hout.data(), want_hout.data(), rows, 4) : 0;
  size_t bad16 = 0;
  for (size_t i = 0; out16 && i < rows; ++i) bad16 += o16[i].x != cuda::f32_to_bf16_bits(want_out[i]);
  report(name + ": norm out, bf16 out, h out against the model (values differing)", bad_out + bad_h + bad16 == 0,
         static_cast<double>(bad_out + bad_h + bad16), 0);
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
  for (const int64_t K : {int64_t{1032}, int64_t{1152}, int64_t{2056}})
    for (const bool swiglu : {false, true}) {
      const unsigned blocks = K == 1152 ? 5u : (swiglu ? 2u : 1u);
      run_norm<1>(K, GemvNorm::kPre, false, 1.0f, false, swiglu, blocks, ++seed);
      run_norm<1>(K, GemvNorm::kPre, true, 0.3f, true, swiglu, blocks, ++seed);
      run_norm<1>(K, GemvNorm::kPost, true, 1.0f, false, swiglu, blocks, ++seed);
    }
  run_norm<2>(1152, GemvNorm::kPre, true, 1.0f, false, false, 3, ++seed);
  run_norm<3>(1032, GemvNorm::kPost, true, 1.0f, false, true, 4, ++seed);
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
