// Host driver of conv_emu.sh. The forward kernel with the per-head l2norm fused (run_forward_l2, at the end). The
// causal conv's backward kernel of src/ops/causal_conv1d/causal_conv1d.cu
// (conv_backward_kernel<4, true, 4, DX>: K = KMAX = 4, four channels per thread) run on the CPU (tools/cuda_emu/emu.h)
// with its interior walk on and off (the kernel's interior_walk argument), fp32 and bf16 dx:
//   - the two walks byte for byte: dx (every element written), the dw partials;
//   - both against a host evaluation in the kernel's documented order: pre = the fmaf chain over the taps (inputs
//     before a sequence's start from its state row, or zeros), dpre = the kernel's own dpre_of(dy, pre) (with SiLU) or
//     dy; dx[t] = the fmaf chain over the taps j whose dpre[t + K − 1 − j] lies in t's sequence, in tap order; the dw
//     partial of (tile, tap, channel) = the runs of the tile added in run order (an empty run adds +0), each run the
//     fmaf chain Σ_t dpre[t]·in(t − K + 1 + j) over its tokens in order; the bf16 dx = f32_to_bf16_bits(fp32 dx).
// The grid and tiling are the launcher's (causal_conv1d_cuda_tiling; blocks of 32·4 channels × 4 runs).
#include "conv_kernel_emu.h"  // the kernel part of causal_conv1d.cu (conv_emu.sh)

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace hlm;

namespace {

int failures = 0, checks = 0;

void report(const std::string& what, size_t differ, size_t of) {
  ++checks;
  if (differ != 0) ++failures;
  std::printf("[%s] %s: %zu of %zu differ\n", differ == 0 ? "pass" : "FAIL", what.c_str(), differ, of);
}

template <class T>
size_t count_differing(const std::vector<T>& a, const std::vector<T>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0 ? 1 : 0;
  return n + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

constexpr int64_t K = 4;

struct Case {
  std::vector<int64_t> cu;
  int64_t C;
  bool silu, has_state, edge;  // edge: ±0, 1e30, NaN among x and dy
  std::string name() const {
    std::string lens;
    for (size_t i = 1; i < cu.size(); ++i) lens += (i > 1 ? "," : "") + std::to_string(cu[i] - cu[i - 1]);
    return "lens=" + lens + " C=" + std::to_string(C) + (silu ? " silu" : "") + (has_state ? " state" : "") +
           (edge ? " edge values" : "");
  }
};

std::vector<float> values(size_t n, uint64_t seed, bool edge) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = normal(rng);
  if (edge) {
    const float specials[] = {0.0f, -0.0f, 1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN()};
    for (size_t i = 0; i < n; i += 97) v[i] = specials[(i / 97) % 5];
  }
  return v;
}

struct Outputs {
  std::vector<float> dx, partial;
  std::vector<uint16_t> dx16;
};

Outputs run_kernel(const Case& c, const std::vector<float>& x, const std::vector<float>& dy,
                   const std::vector<float>& w, const std::vector<float>& state, bool interior) {
  const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1;
  const Geometry g{T, c.C, K, N};
  const CausalConv1dCudaTiling tiling = causal_conv1d_cuda_tiling(T);
  const Dim grid{static_cast<unsigned>((c.C + 127) / 128), static_cast<unsigned>(tiling.tiles), 1};
  const float* st = c.has_state ? state.data() : nullptr;
  Outputs o;
  o.dx.assign(static_cast<size_t>(T * c.C), std::numeric_limits<float>::quiet_NaN());
  o.dx16.assign(o.dx.size(), 0xFFFFu);
  o.partial.assign(static_cast<size_t>(tiling.tiles * K * c.C), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> partial16(o.partial.size());
  emu_launch(grid, 128, 0, [&] {
    conv_backward_kernel<4, true, 4, float>(o.dx.data(), o.partial.data(), dy.data(), x.data(), w.data(), st,
                                            c.cu.data(), g, tiling.run_tokens, c.silu, interior);
  });
  emu_launch(grid, 128, 0, [&] {
    conv_backward_kernel<4, true, 4, __nv_bfloat16>(reinterpret_cast<__nv_bfloat16*>(o.dx16.data()),
                                                    partial16.data(), dy.data(), x.data(), w.data(), st, c.cu.data(),
                                                    g, tiling.run_tokens, c.silu, interior);
  });
  if (std::memcmp(partial16.data(), o.partial.data(), partial16.size() * 4) != 0) o.partial.clear();  // flagged below
  return o;
}

Outputs host_formula(const Case& c, const std::vector<float>& x, const std::vector<float>& dy,
                     const std::vector<float>& w, const std::vector<float>& state) {
  const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1, C = c.C;
  const CausalConv1dCudaTiling tiling = causal_conv1d_cuda_tiling(T);
  std::vector<int64_t> seq_of(static_cast<size_t>(T));
  for (int64_t s = 0; s < N; ++s)
    for (int64_t t = c.cu[s]; t < c.cu[s + 1]; ++t) seq_of[t] = s;
  // in(p) for a token of sequence s: x inside the sequence, its state row (or 0) before its start.
  const auto in = [&](int64_t s, int64_t p, int64_t ch) -> float {
    const int64_t start = c.cu[s];
    if (p >= start) return x[p * C + ch];
    return c.has_state ? state[(s * C + ch) * (K - 1) + (K - 1 + p - start)] : 0.0f;
  };
  std::vector<float> dpre(static_cast<size_t>(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t ch = 0; ch < C; ++ch) {
      float pre = 0.0f;
      for (int64_t j = 0; j < K; ++j) pre = fmaf(w[ch * K + j], in(seq_of[t], t - K + 1 + j, ch), pre);
      dpre[t * C + ch] = c.silu ? dpre_of(dy[t * C + ch], pre) : dy[t * C + ch];
    }
  Outputs o;
  o.dx.resize(dpre.size());
  o.dx16.resize(dpre.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t ch = 0; ch < C; ++ch) {
      const int64_t end = c.cu[seq_of[t] + 1];
      float sum = 0.0f;
      for (int64_t j = 0; j < K; ++j)
        if (t + K - 1 - j < end) sum = fmaf(w[ch * K + j], dpre[(t + K - 1 - j) * C + ch], sum);
      o.dx[t * C + ch] = sum;
      o.dx16[t * C + ch] = cuda::f32_to_bf16_bits(sum);
    }
  const int64_t R = tiling.run_tokens, Y = causal_conv1d_cuda_runs_per_tile();
  o.partial.resize(static_cast<size_t>(tiling.tiles * K * C));
  for (int64_t tile = 0; tile < tiling.tiles; ++tile)
    for (int64_t j = 0; j < K; ++j)
      for (int64_t ch = 0; ch < C; ++ch) {
        float total = 0.0f;
        for (int64_t r = 0; r < Y; ++r) {
          const int64_t t0 = (tile * Y + r) * R;
          float acc = 0.0f;
          for (int64_t t = t0; t < std::min(t0 + R, T); ++t)
            acc = fmaf(dpre[t * C + ch], in(seq_of[t], t - K + 1 + j, ch), acc);
          total = r == 0 ? acc : total + acc;
        }
        o.partial[(tile * K + j) * C + ch] = total;
      }
  return o;
}

void run(const Case& c, uint64_t seed) {
  const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1;
  const std::vector<float> x = values(static_cast<size_t>(T * c.C), seed, c.edge);
  const std::vector<float> dy = values(static_cast<size_t>(T * c.C), seed + 1, c.edge);
  std::vector<float> w = values(static_cast<size_t>(c.C * K), seed + 2, false);
  for (float& e : w) e *= 0.5f;
  const std::vector<float> state = values(static_cast<size_t>(N * c.C * (K - 1)), seed + 3, false);
  const Outputs interior = run_kernel(c, x, dy, w, state, true), general = run_kernel(c, x, dy, w, state, false);
  const Outputs host = host_formula(c, x, dy, w, state);
  const std::string name = c.name();
  report(name + ": dx, interior walk vs general walk", count_differing(interior.dx, general.dx), interior.dx.size());
  report(name + ": bf16 dx, interior walk vs general walk", count_differing(interior.dx16, general.dx16),
         interior.dx16.size());
  report(name + ": dw partials (fp32 and bf16 dx runs alike), interior walk vs general walk",
         count_differing(interior.partial, general.partial), host.partial.size());
  report(name + ": dx, interior walk vs the host formula", count_differing(interior.dx, host.dx), host.dx.size());
  report(name + ": bf16 dx, interior walk vs the host rounding", count_differing(interior.dx16, host.dx16),
         host.dx16.size());
  report(name + ": dw partials, interior walk vs the host formula", count_differing(interior.partial, host.partial),
         host.partial.size());
}

// The forward with the per-head l2norm fused: y as the plain forward kernel's, yn in l2norm's warp order (host).
void run_forward_l2(const Case& c, uint64_t seed) {
  const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1, C = c.C;
  constexpr float kEps = 1e-6f;
  const std::vector<float> x = values(static_cast<size_t>(T * C), seed, c.edge);
  std::vector<float> w = values(static_cast<size_t>(C * K), seed + 2, false);
  for (float& e : w) e *= 0.5f;
  const Geometry g{T, C, K, N};
  const CausalConv1dCudaTiling tiling = causal_conv1d_cuda_tiling(T);
  const Dim grid{static_cast<unsigned>(C / 128), static_cast<unsigned>(tiling.tiles), 1};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y_plain(static_cast<size_t>(T * C), nan), y(y_plain.size(), nan), yn(y_plain.size(), nan);
  emu_launch(grid, 128, 0, [&] {
    conv_forward_kernel<4, true, 4>(y_plain.data(), x.data(), w.data(), nullptr, c.cu.data(), g, tiling.run_tokens,
                                    c.silu);
  });
  emu_launch(grid, 128, 0, [&] {
    conv_forward_kernel<4, true, 4, true>(y.data(), x.data(), w.data(), nullptr, c.cu.data(), g, tiling.run_tokens,
                                          c.silu, yn.data(), kEps);
  });
  // Host: y from the formula (fmaf chain over the taps, zeros before a sequence's start, conv_silu), then per (token,
  // head of 128) lane l's Σ over channels 4l … 4l + 3 in order, the xor tree (every lane ends with lane 0's sum).
  std::vector<float> y_host(y.size()), yn_host(y.size());
  for (int64_t s = 0; s < N; ++s)
    for (int64_t t = c.cu[s]; t < c.cu[s + 1]; ++t)
      for (int64_t ch = 0; ch < C; ++ch) {
        float pre = 0.0f;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t p = t - K + 1 + j;
          pre = fmaf(w[ch * K + j], p >= c.cu[s] ? x[p * C + ch] : 0.0f, pre);
        }
        y_host[t * C + ch] = c.silu ? cuda::conv_silu(pre) : pre;
      }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < C / 128; ++h) {
      const float* row = &y_host[t * C + h * 128];
      float lane[32];
      for (int l = 0; l < 32; ++l) {
        float ss = 0.0f;
        for (int v = 0; v < 4; ++v) ss = fmaf(row[4 * l + v], row[4 * l + v], ss);
        lane[l] = ss;
      }
      for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ off];
        std::copy(next, next + 32, lane);
      }
      const float inv = 1.0f / sqrtf(lane[0] + kEps);
      for (int e = 0; e < 128; ++e) yn_host[t * C + h * 128 + e] = row[e] * inv;
    }
  const std::string name = c.name() + " (forward, l2norm fused)";
  report(name + ": y vs the plain forward kernel", count_differing(y, y_plain), y.size());
  report(name + ": y vs the host formula", count_differing(y, y_host), y.size());
  report(name + ": yn vs the host l2norm in the warp path's order", count_differing(yn, yn_host), yn.size());

  // The backward with the l2norm's backward fused: against the host l2norm backward (the warp path's order on the
  // forward's y) followed by the plain backward kernel, dx (fp32, bf16) and the dw partials byte for byte.
  const std::vector<float> dyn = values(y.size(), seed + 5, c.edge);
  std::vector<float> dyc(y.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < C / 128; ++h) {
      const float* yr = &y_plain[t * C + h * 128];
      const float* gr = &dyn[t * C + h * 128];
      float ss_l[32], xg_l[32];
      for (int l = 0; l < 32; ++l) {
        float ss = 0.0f, xg = 0.0f;
        for (int v = 0; v < 4; ++v) {
          ss = fmaf(yr[4 * l + v], yr[4 * l + v], ss);
          xg = fmaf(yr[4 * l + v], gr[4 * l + v], xg);
        }
        ss_l[l] = ss;
        xg_l[l] = xg;
      }
      for (int off = 16; off > 0; off >>= 1) {
        float a[32], b[32];
        for (int l = 0; l < 32; ++l) a[l] = ss_l[l] + ss_l[l ^ off], b[l] = xg_l[l] + xg_l[l ^ off];
        std::copy(a, a + 32, ss_l);
        std::copy(b, b + 32, xg_l);
      }
      const float inv = 1.0f / sqrtf(ss_l[0] + kEps), y_dot_dy = inv * xg_l[0];
      for (int e = 0; e < 128; ++e) {
        const float yd = yr[e] * inv;
        dyc[t * C + h * 128 + e] = inv * (gr[e] - yd * y_dot_dy);
      }
    }
  const size_t np = static_cast<size_t>(tiling.tiles * K * C);
  std::vector<float> dx_f(y.size(), nan), dx_r(y.size(), nan), part_f(np, nan), part_r(np, nan);
  std::vector<uint16_t> dx16_f(y.size(), 0xFFFFu), dx16_r(y.size(), 0xFFFFu);
  std::vector<float> part16_f(np, nan), part16_r(np, nan);
  emu_launch(grid, 128, 0, [&] {
    conv_backward_kernel<4, true, 4, float, true>(dx_f.data(), part_f.data(), dyn.data(), x.data(), w.data(), nullptr,
                                                  c.cu.data(), g, tiling.run_tokens, c.silu, true, kEps);
  });
  emu_launch(grid, 128, 0, [&] {
    conv_backward_kernel<4, true, 4, float>(dx_r.data(), part_r.data(), dyc.data(), x.data(), w.data(), nullptr,
                                            c.cu.data(), g, tiling.run_tokens, c.silu, true);
  });
  emu_launch(grid, 128, 0, [&] {
    conv_backward_kernel<4, true, 4, __nv_bfloat16, true>(reinterpret_cast<__nv_bfloat16*>(dx16_f.data()),
                                                          part16_f.data(), dyn.data(), x.data(), w.data(), nullptr,
                                                          c.cu.data(), g, tiling.run_tokens, c.silu, false, kEps);
  });
  emu_launch(grid, 128, 0, [&] {
    conv_backward_kernel<4, true, 4, __nv_bfloat16>(reinterpret_cast<__nv_bfloat16*>(dx16_r.data()), part16_r.data(),
                                                    dyc.data(), x.data(), w.data(), nullptr, c.cu.data(), g,
                                                    tiling.run_tokens, c.silu, false);
  });
  const std::string bname = c.name() + " (backward, l2norm fused)";
  report(bname + ": dx vs the l2norm backward then the plain kernel", count_differing(dx_f, dx_r), dx_f.size());
  report(bname + ": dw partials vs the same", count_differing(part_f, part_r), np);
  report(bname + ": bf16 dx (general walk) vs the same", count_differing(dx16_f, dx16_r), dx16_f.size());
  report(bname + ": dw partials (general walk) vs the same", count_differing(part16_f, part16_r), np);
}

}  // namespace

int main() {
  const std::vector<Case> cases = {
      // The training shape's structure: packed sequences of 1,024 (runs of 32: every run interior but each
      // sequence's last, whose halo crosses into the next sequence).
      {{0, 1024, 2048, 3072}, 136, true, false, false},
      {{0, 1024, 2048, 3072}, 8, false, true, false},
      {{0, 1024, 2048}, 8, true, true, true},
      // Boundaries inside runs and inside a run's halo, at run starts; T = 300 and 129 (a short last run).
      {{0, 5, 37, 38, 300}, 8, true, true, false},
      {{0, 32, 64, 96, 129}, 136, false, true, false},
      {{0, 33, 66, 200}, 8, true, false, true},
      // Empty sequences and sequences shorter than K − 1.
      {{0, 0, 3, 3, 5, 6}, 8, true, true, false},
      // T = 50,000 > 32,768: runs of 49 tokens (not a multiple of the 8-row ring), 256 tiles.
      {{0, 20000, 20001, 50000}, 8, true, true, false},
  };
  uint64_t seed = 7;
  for (const Case& c : cases) run(c, seed += 10);
  // The fused forward (heads of 128; state_in is not taken): the same structures at C = 128 and 256.
  const std::vector<Case> forward_cases = {
      {{0, 1024, 2048}, 256, true, false, false}, {{0, 5, 37, 38, 300}, 128, true, false, true},
      {{0, 32, 64, 96, 129}, 128, false, false, false}, {{0, 0, 3, 3, 5, 6}, 128, true, false, true},
      {{0, 20000, 20001, 50000}, 128, true, false, false}};
  for (const Case& c : forward_cases) run_forward_l2(c, seed += 10);
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
