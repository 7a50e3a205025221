// Depthwise causal conv (+ SiLU): CUDA (src/ops/causal_conv1d/causal_conv1d.cu) vs the CPU reference
// (causal_conv1d_ref.cpp), forward and backward, f32. Cases: packed sequences of lengths 1, 17, 64, 65, 200 (the conv
// resets at every start), empty sequences and sequences shorter than K−1 (state_out then mixes the initial state and
// the inputs), K = 1 (no state), 2 and 4 (the K ≤ 4 register window), 7 (the K ≤ 8 window), 13 and 64 (the 64-slot
// window), with and without an initial state and SiLU, odd channel counts (33, 65: partial channel tiles), sequence
// boundaries inside a run and inside a run's dx halo (the K−1 tokens past it), boundaries exactly at run starts, T not
// a multiple of the run or tile length, T = 0 (N = 2 empty sequences; N = 0), a T above 32768 (runs longer than 32
// tokens, 256 tiles), every fill of x (large, ±0, subnormal, NaN/±Inf); state_out aliasing state_in; dw == nullptr.
// The K = 4 cases with C % 4 == 0 take the 4-channel path (16-byte rows); FourChannelPathEqualsOneChannelPath runs
// them again with every row pointer one float off 16-byte alignment (the 1-channel path) and wants the same bits.
// The bf16-dx backward (last test) against the fp32 backward's dx cast to bf16, bit for bit. The backward's interior
// walk (runs inside one sequence) against the general walk on every 4-channel case, bit for bit (InteriorWalk...); the
// 4-channel path takes it by default, so the 1-channel comparison and the fp32 emulation check it too.
//
// Tolerances (fp32 rule, harness.h). expf ≤ 2 ulp (4u); the K-tap sums are FMA chains (K roundings relative to the
// sum of |terms|). Magnitudes are computed by the double reference on absolute values (|x|, |w|, |state|, no SiLU):
//   pre: k = K relative to mag_pre = Σ_j |w|·|in|.
//   y = silu(pre) = pre/(1 + e^-pre): pre's error passes with a factor ≤ max silu' ≈ 1.1, the SiLU adds 6u:
//       k = K + 6, mag = 1.1·mag_pre + |y| (no SiLU: k = K, mag = mag_pre).
//   dpre = dy·σ(pre)·(1 + pre·σ(−pre)): pre's error passes with |silu''| ≤ 0.5; σ(pre) = 1/(1 + e) with e = expf(−pre)
//       is within 4u·σ(−pre) + 2u ≤ 6u, σ(−pre) = e·σ(pre) within 4u·σ(pre) + 3u ≤ 7u, and the FMA 1 + pre·σ(−pre)
//       and the two products add 3u: 16u in all, k_dpre = K + 16 relative to
//       mag_dpre = |dy|·(0.5·mag_pre + σ(1 + |pre|σ(−pre))) (no SiLU: dpre = dy).
//   dx, d_state_in = K-tap FMA chains of w·dpre: k = 2K + 16, mag = Σ |w|·mag_dpre.
//   dw = Σ_t dpre·in, summed by the kernel as an FMA chain over each run of R tokens, then the runs_per_tile runs of a
//       tile in order, then the tiles in order: at most P = R + runs_per_tile + tiles roundings in sequence
//       (causal_conv1d_cuda_dw_path_length(T)); with dpre's K + 16 and one more for the product (the FMA makes it
//       exact; kept as a margin): k = K + 17 + P, mag = Σ_t mag_dpre·|in|.
//   state_out: copies, bit-identical.
// Without SiLU (dpre = dy) every GPU operation is an fp32 FMA or addition in a documented order, so y, dx and dw are
// also checked bit for bit against an fp32 emulation of the kernels' order (fma_emulation below): the window, halo,
// sequence-boundary and dw-tiling logic must then be exact, not merely within tolerance.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "harness.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/l2norm/l2norm_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct ConvCase {
  std::vector<int64_t> cu;
  int64_t C, K;
  bool silu, has_state;
  Fill fill;  // of x
};

const std::vector<ConvCase> kCases = {
    {{0, 1, 18, 82, 147, 347}, 65, 4, true, true, Fill::Normal},
    {{0, 1, 18, 82, 147, 347}, 65, 4, false, false, Fill::Normal},
    {{0, 0, 3, 3, 5, 6}, 7, 4, true, true, Fill::Normal},  // empty sequences, lengths 3 and 2, 1 (< K−1)
    {{0, 17, 30}, 5, 1, true, false, Fill::Normal},
    {{0, 65}, 128, 2, true, true, Fill::Large},
    {{0, 17, 82}, 9, 4, true, true, Fill::Special},
    {{0, 5, 70}, 9, 4, true, true, Fill::Zeros},
    {{0, 33, 40}, 9, 4, false, true, Fill::Denormal},
    {{0, 1000, 2001}, 33, 4, true, true, Fill::Normal},
    // Run / tile structure (runs of 32 tokens, tiles of 4 runs while T ≤ 32768): boundaries at 5 (< K), 37, 38
    // inside one run, T = 300 not a multiple of 32 or 128; K = 7 takes the 8-slot window.
    {{0, 5, 37, 38, 300}, 33, 7, true, true, Fill::Normal},
    {{0, 5, 37, 38, 300}, 33, 7, false, true, Fill::Normal},
    {{0, 5, 37, 38, 300}, 33, 7, false, false, Fill::Normal},
    // Boundaries exactly at run starts (no halo needed), and at 33, 66 (inside the dx halo of runs ending at 32, 64).
    {{0, 32, 64, 96, 129}, 65, 4, false, true, Fill::Normal},
    {{0, 33, 66, 200}, 65, 4, true, true, Fill::Normal},
    {{0, 33, 66, 200}, 65, 4, false, false, Fill::Normal},
    // K = 13 and K = 64: the 64-slot window; sequences shorter than K (10 and 3 tokens), an empty one.
    {{0, 10, 10, 150}, 17, 13, true, true, Fill::Normal},
    {{0, 10, 10, 150}, 17, 13, false, true, Fill::Normal},
    {{0, 3, 100, 229}, 3, 64, false, true, Fill::Normal},
    {{0, 3, 100, 229}, 3, 64, true, false, Fill::Normal},
    // T = 0: two empty sequences (state copies, zero gradients) and no sequence at all.
    {{0, 0, 0}, 5, 4, true, true, Fill::Normal},
    {{0}, 5, 3, true, false, Fill::Normal},
    // T = 50000 > 32768: runs of 49 tokens (not a multiple of the 8-row ring), 256 tiles.
    {{0, 20000, 20001, 50000}, 5, 4, true, true, Fill::Normal},
    {{0, 20000, 20001, 50000}, 5, 4, false, false, Fill::Normal},
    // K = 4 with C % 4 == 0: the 4-channel path (16-byte rows), over the same structures: boundaries inside runs
    // and halos, empty and short sequences, every fill, C = 132 (a block of 128 channels plus one of 4), T = 0,
    // runs of 49 tokens.
    {{0, 1, 18, 82, 147, 347}, 64, 4, true, true, Fill::Normal},
    {{0, 1, 18, 82, 147, 347}, 132, 4, false, false, Fill::Normal},
    {{0, 0, 3, 3, 5, 6}, 8, 4, true, true, Fill::Normal},
    {{0, 65}, 128, 4, true, true, Fill::Large},
    {{0, 17, 82}, 12, 4, true, true, Fill::Special},
    {{0, 5, 70}, 12, 4, true, true, Fill::Zeros},
    {{0, 33, 40}, 8, 4, false, true, Fill::Denormal},
    {{0, 32, 64, 96, 129}, 64, 4, false, true, Fill::Normal},
    {{0, 33, 66, 200}, 132, 4, true, true, Fill::Normal},
    {{0, 33, 66, 200}, 132, 4, false, false, Fill::Normal},
    {{0, 0, 0}, 8, 4, true, true, Fill::Normal},
    {{0, 20000, 20001, 50000}, 8, 4, true, true, Fill::Normal},
    {{0, 20000, 20001, 50000}, 8, 4, false, false, Fill::Normal},
    // The training shape's structure (packed sequences of 1,024: every run interior but each sequence's last, whose
    // halo crosses into the next sequence), with and without SiLU.
    {{0, 1024, 2048, 3072}, 136, 4, true, false, Fill::Normal},
    {{0, 1024, 2048, 3072}, 136, 4, false, true, Fill::Normal},
    // Whole heads of 128 (the conv + l2norm fusion's shapes): boundaries inside runs and halos, special values; and
    // sequences of 1,024 over two heads.
    {{0, 5, 37, 38, 300}, 128, 4, true, false, Fill::Special},
    {{0, 1024, 2048}, 256, 4, false, true, Fill::Normal},
};

std::string name(const ConvCase& c, const char* what) {
  std::string lens;
  for (size_t i = 1; i < c.cu.size(); ++i) {
    if (i > 1) lens += ',';
    lens += std::to_string(c.cu[i] - c.cu[i - 1]);
  }
  return std::string("causal_conv1d.") + what + " lens=" + lens + " C=" + std::to_string(c.C) + " K=" +
         std::to_string(c.K) + (c.silu ? " silu" : "") + (c.has_state ? " state" : "") + " " + fill_name(c.fill);
}

struct Inputs {
  std::vector<float> x, w, state, dy;
};
Inputs make_inputs(const ConvCase& c) {
  const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1;
  return {make_values(static_cast<size_t>(T * c.C), c.fill, 41),
          make_values(static_cast<size_t>(c.C * c.K), Fill::Normal, 42, 0.5f),
          c.has_state ? make_values(static_cast<size_t>(N * c.C * (c.K - 1)), Fill::Normal, 43) : std::vector<float>{},
          make_values(static_cast<size_t>(T * c.C), Fill::Normal, 44)};
}

std::vector<double> abs64(const std::vector<float>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::abs(static_cast<double>(v[i]));
  return out;
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

CausalConv1dShape shape_of(const ConvCase& c) { return {c.cu.back(), c.C, c.K}; }
CausalConv1dCudaParams params_of(const ConvCase& c) {
  return {c.cu.back(), c.C, c.K, static_cast<int64_t>(c.cu.size()) - 1, c.silu};
}
size_t state_size(const ConvCase& c) {
  return static_cast<size_t>((static_cast<int64_t>(c.cu.size()) - 1) * c.C * (c.K - 1));
}

// mag_pre = Σ_j |w|·|in| (double reference on absolute values, no SiLU) and the pre-activation itself (double).
void pre_activations(const ConvCase& c, const Inputs& in, std::vector<double>& mag_pre, std::vector<double>& pre) {
  const int64_t N = static_cast<int64_t>(c.cu.size()) - 1;
  const size_t n = in.x.size();
  mag_pre.assign(n, 0.0);
  pre.assign(n, 0.0);
  const auto ax = abs64(in.x), aw = abs64(in.w), as = abs64(in.state);
  const auto x64 = to_f64(in.x), w64 = to_f64(in.w), s64 = to_f64(in.state);
  causal_conv1d_forward<double>(mag_pre.data(), nullptr, ax.data(), aw.data(), c.has_state ? as.data() : nullptr,
                                c.cu.data(), N, shape_of(c), false);
  causal_conv1d_forward<double>(pre.data(), nullptr, x64.data(), w64.data(), c.has_state ? s64.data() : nullptr,
                                c.cu.data(), N, shape_of(c), false);
}


// ---- fp32 emulation of the kernels' operation order (no SiLU: dpre = dy), bit-identical to the GPU.

float input_f32(const ConvCase& c, const Inputs& in, int64_t p, int64_t start, int64_t s, int64_t ch) {
  if (p >= start) return in.x[static_cast<size_t>(p * c.C + ch)];
  if (!c.has_state) return 0.0f;
  const int64_t Km1 = c.K - 1;
  return in.state[static_cast<size_t>((s * c.C + ch) * Km1 + (Km1 + p - start))];
}

struct Emulated {
  std::vector<float> y, dx, dw;
};

Emulated fma_emulation(const ConvCase& c, const Inputs& in) {
  const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1, C = c.C, K = c.K;
  Emulated e;
  e.y.assign(static_cast<size_t>(T * C), 0.0f);
  e.dx.assign(static_cast<size_t>(T * C), 0.0f);
  e.dw.assign(static_cast<size_t>(C * K), 0.0f);
  std::vector<int64_t> seq(static_cast<size_t>(T));
  for (int64_t s = 0; s < N; ++s)
    for (int64_t t = c.cu[s]; t < c.cu[s + 1]; ++t) seq[static_cast<size_t>(t)] = s;
  const auto w = [&](int64_t ch, int64_t j) { return in.w[static_cast<size_t>(ch * K + j)]; };
  const auto dy = [&](int64_t t, int64_t ch) { return in.dy[static_cast<size_t>(t * C + ch)]; };
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = seq[static_cast<size_t>(t)], start = c.cu[s], end = c.cu[s + 1];
    for (int64_t ch = 0; ch < C; ++ch) {
      float pre = 0.0f, g = 0.0f;
      for (int64_t j = 0; j < K; ++j) pre = std::fma(w(ch, j), input_f32(c, in, t - K + 1 + j, start, s, ch), pre);
      for (int64_t j = 0; j < K; ++j)
        if (t + K - 1 - j < end) g = std::fma(w(ch, j), dy(t + K - 1 - j, ch), g);
      e.y[static_cast<size_t>(t * C + ch)] = pre;
      e.dx[static_cast<size_t>(t * C + ch)] = g;
    }
  }
  // dw: per run an FMA chain over its tokens, runs of a tile added in order, tiles added in order from 0.
  const CausalConv1dCudaTiling tiling = causal_conv1d_cuda_tiling(T);
  const int64_t R = tiling.run_tokens, Y = causal_conv1d_cuda_runs_per_tile();
  for (int64_t ch = 0; ch < C; ++ch)
    for (int64_t j = 0; j < K; ++j) {
      float total = 0.0f;
      for (int64_t tile = 0; tile < tiling.tiles; ++tile) {
        float part = 0.0f;
        for (int64_t r = 0; r < Y; ++r) {
          float run = 0.0f;
          const int64_t t0 = (tile * Y + r) * R;
          for (int64_t t = t0; t < std::min(t0 + R, T); ++t) {
            const int64_t s = seq[static_cast<size_t>(t)];
            run = std::fma(dy(t, ch), input_f32(c, in, t - K + 1 + j, c.cu[s], s, ch), run);
          }
          part = r == 0 ? run : part + run;
        }
        total += part;
      }
      e.dw[static_cast<size_t>(ch * K + j)] = total;
    }
  return e;
}

}  // namespace

TEST(CausalConv1dCuda, ForwardF32) {
  HLM_REQUIRE_CUDA();
  for (const ConvCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const int64_t N = static_cast<int64_t>(c.cu.size()) - 1;
    const size_t n = in.x.size(), ns = state_size(c);
    const float* st32 = c.has_state ? in.state.data() : nullptr;
    std::vector<float> y32(n), so32(ns);
    causal_conv1d_forward<float>(y32.data(), so32.data(), in.x.data(), in.w.data(), st32, c.cu.data(), N, shape_of(c),
                                 c.silu);
    const auto x64 = to_f64(in.x), w64 = to_f64(in.w), s64 = to_f64(in.state);
    std::vector<double> y64(n), so64(ns);
    causal_conv1d_forward<double>(y64.data(), so64.data(), x64.data(), w64.data(), c.has_state ? s64.data() : nullptr,
                                  c.cu.data(), N, shape_of(c), c.silu);
    std::vector<double> mag_pre, pre;
    pre_activations(c, in, mag_pre, pre);
    std::vector<double> mag(n);
    for (size_t i = 0; i < n; ++i) mag[i] = c.silu ? 1.1 * mag_pre[i] + std::abs(y64[i]) : mag_pre[i];
    const double k = static_cast<double>(c.K) + (c.silu ? 6 : 0);

    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 cu = DeviceBuffer::from(c.cu, "cu_seqlens"), y(n * 4, "y"), so(ns * 4, "state_out");
    DeviceBuffer st = c.has_state ? DeviceBuffer::from(in.state, "state_in") : DeviceBuffer(0, "state_in");
    const float* st_dev = c.has_state ? st.as<float>() : nullptr;
    causal_conv1d_forward_cuda(y.as<float>(), ns ? so.as<float>() : nullptr, x.as<float>(), w.as<float>(), st_dev,
                               cu.as<int64_t>(), params_of(c), ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "fwd y"), y.download<float>(), y32, y64, mag, {k}));
    if (!c.silu) {
      EXPECT_TRUE(check_exact(name(c, "fwd y (fp32 FMA order)"), y.download<float>(), fma_emulation(c, in).y));
    }
    if (ns) {
      EXPECT_TRUE(check_exact(name(c, "fwd state_out"), so.download<float>(), so32));
    }
    EXPECT_TRUE(buffers_ok({&y, &so}, {&x, &w, &cu, &st})) << name(c, "fwd");

    // state_out aliasing state_in: the same state bits.
    if (c.has_state && ns) {
      DeviceBuffer y2(n * 4, "y (aliased state)");
      causal_conv1d_forward_cuda(y2.as<float>(), st.as<float>(), x.as<float>(), w.as<float>(), st.as<float>(),
                                 cu.as<int64_t>(), params_of(c), ctx().stream());
      EXPECT_TRUE(check_exact(name(c, "fwd state_out=state_in"), st.download<float>(), so32));
      EXPECT_TRUE(check_exact(name(c, "fwd y (aliased state)"), y2.download<float>(), y.download<float>()));
      EXPECT_TRUE(buffers_ok({&y2, &st}, {}));
    }
  }
}

// The decode kernel (one token per sequence) against the general forward on the same inputs: y and the advanced
// state bit for bit (same fmaf chain, same SiLU), for K = 1, 2, 4 (4-slot window), 7 (8-slot), 13 (64-slot), with and
// without an initial state and SiLU, N = 1, 5 and 64 sequences, odd channel counts, special fills.
TEST(CausalConv1dCuda, DecodeEqualsTheGeneralForwardBitForBit) {
  HLM_REQUIRE_CUDA();
  struct DecodeCase {
    int64_t N, C, K;
    bool silu, has_state;
    Fill fill;
  };
  const std::vector<DecodeCase> cases = {{1, 33, 4, true, true, Fill::Normal},    {5, 65, 4, true, true, Fill::Special},
                                         {64, 129, 4, true, true, Fill::Normal},  {64, 129, 4, false, false, Fill::Large},
                                         {5, 7, 1, true, false, Fill::Normal},    {5, 9, 2, true, true, Fill::Denormal},
                                         {3, 17, 7, false, true, Fill::Normal},   {3, 17, 13, true, true, Fill::Zeros}};
  for (const DecodeCase& d : cases) {
    ConvCase c{{}, d.C, d.K, d.silu, d.has_state, d.fill};
    for (int64_t n = 0; n <= d.N; ++n) c.cu.push_back(n);
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), ns = state_size(c);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 cu = DeviceBuffer::from(c.cu, "cu_seqlens"), y_ref(n * 4, "y general"), y(n * 4, "y decode");
    const std::vector<float> zeros(ns, 0.0f);
    DeviceBuffer st_ref = DeviceBuffer::from(c.has_state ? in.state : zeros, "state general");
    DeviceBuffer st = DeviceBuffer::from(c.has_state ? in.state : zeros, "state decode");
    causal_conv1d_forward_cuda(y_ref.as<float>(), ns ? st_ref.as<float>() : nullptr, x.as<float>(), w.as<float>(),
                               ns ? st_ref.as<float>() : nullptr, cu.as<int64_t>(), params_of(c), ctx().stream());
    causal_conv1d_decode_cuda(y.as<float>(), ns ? st.as<float>() : nullptr, x.as<float>(), w.as<float>(),
                              params_of(c), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "decode y"), y.download<float>(), y_ref.download<float>()));
    if (ns) {
      EXPECT_TRUE(check_exact(name(c, "decode state"), st.download<float>(), st_ref.download<float>()));
    }
    EXPECT_TRUE(buffers_ok({&y, &st, &y_ref, &st_ref}, {&x, &w, &cu})) << name(c, "decode");
  }
}

TEST(CausalConv1dCuda, BackwardF32) {
  HLM_REQUIRE_CUDA();
  for (const ConvCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const int64_t N = static_cast<int64_t>(c.cu.size()) - 1;
    const size_t n = in.x.size(), ns = state_size(c), nw = in.w.size();
    const float* st32 = c.has_state ? in.state.data() : nullptr;
    std::vector<float> dx32(n), dw32(nw), ds32(ns);
    causal_conv1d_backward<float>(dx32.data(), dw32.data(), ds32.data(), in.dy.data(), in.x.data(), in.w.data(), st32,
                                  c.cu.data(), N, shape_of(c), c.silu);
    const auto x64 = to_f64(in.x), w64 = to_f64(in.w), s64 = to_f64(in.state), dy64 = to_f64(in.dy);
    std::vector<double> dx64(n), dw64(nw), ds64(ns);
    causal_conv1d_backward<double>(dx64.data(), dw64.data(), ds64.data(), dy64.data(), x64.data(), w64.data(),
                                   c.has_state ? s64.data() : nullptr, c.cu.data(), N, shape_of(c), c.silu);
    // Magnitudes: the double reference (no SiLU) on absolute values with dy := mag_dpre.
    std::vector<double> mag_pre, pre;
    pre_activations(c, in, mag_pre, pre);
    std::vector<double> mag_dpre(n);
    for (size_t i = 0; i < n; ++i) {
      const double dy = std::abs(static_cast<double>(in.dy[i])), s = sigmoid(pre[i]);
      mag_dpre[i] = c.silu ? dy * (0.5 * mag_pre[i] + s * (1.0 + std::abs(pre[i]) * sigmoid(-pre[i]))) : dy;
    }
    const auto ax = abs64(in.x), aw = abs64(in.w), as = abs64(in.state);
    std::vector<double> mag_dx(n), mag_dw(nw), mag_ds(ns);
    causal_conv1d_backward<double>(mag_dx.data(), mag_dw.data(), mag_ds.data(), mag_dpre.data(), ax.data(), aw.data(),
                                   c.has_state ? as.data() : nullptr, c.cu.data(), N, shape_of(c), false);
    const double K = static_cast<double>(c.K);
    const double P = static_cast<double>(causal_conv1d_cuda_dw_path_length(c.cu.back()));

    const CausalConv1dCudaParams p = params_of(c);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 cu = DeviceBuffer::from(c.cu, "cu_seqlens"), dy = DeviceBuffer::from(in.dy, "dy"), dx(n * 4, "dx"),
                 dw(nw * 4, "dw"), ds(ns * 4, "d_state_in");
    DeviceBuffer st = c.has_state ? DeviceBuffer::from(in.state, "state_in") : DeviceBuffer(0, "state_in");
    DeviceBuffer ws(causal_conv1d_backward_cuda_workspace_bytes(p), "workspace");
    causal_conv1d_backward_cuda(dx.as<float>(), dw.as<float>(), ns ? ds.as<float>() : nullptr, dy.as<float>(),
                                x.as<float>(), w.as<float>(), c.has_state ? st.as<float>() : nullptr,
                                cu.as<int64_t>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "bwd dx"), dx.download<float>(), dx32, dx64, mag_dx, {2 * K + 16}));
    EXPECT_TRUE(check_f32(name(c, "bwd dw"), dw.download<float>(), dw32, dw64, mag_dw, {K + 17 + P}));
    if (c.has_state && ns) {
      EXPECT_TRUE(check_f32(name(c, "bwd d_state_in"), ds.download<float>(), ds32, ds64, mag_ds, {2 * K + 16}));
    }
    if (!c.silu) {
      const Emulated e = fma_emulation(c, in);
      EXPECT_TRUE(check_exact(name(c, "bwd dx (fp32 FMA order)"), dx.download<float>(), e.dx));
      EXPECT_TRUE(check_exact(name(c, "bwd dw (fp32 FMA order)"), dw.download<float>(), e.dw));
    }
    EXPECT_TRUE(buffers_ok({&dx, &dw, &ds, &ws}, {&x, &w, &cu, &dy, &st})) << name(c, "bwd");

    // dw == nullptr (and no d_state_in): the same dx bits, dw's buffer untouched.
    DeviceBuffer dx2(n * 4, "dx (no dw)"), dw2(nw * 4, "dw (not wanted)");
    causal_conv1d_backward_cuda(dx2.as<float>(), nullptr, nullptr, dy.as<float>(), x.as<float>(), w.as<float>(),
                                c.has_state ? st.as<float>() : nullptr, cu.as<int64_t>(), p, ws.as<void>(), ws.bytes(),
                                ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dx (no dw)"), dx2.download<float>(), dx.download<float>()));
    EXPECT_TRUE(buffers_ok({&dx2, &ws}, {&x, &w, &cu, &dy, &st, &dw2})) << name(c, "bwd no dw");
  }
}

// The 4-channel path (K = 4, C % 4 == 0, 16-byte aligned rows) against the 1-channel path on the same values, the
// latter forced by moving x, y, dy and dx one float past a 16-byte boundary: y, state_out, dx and dw bit for bit
// (causal_conv1d_cuda.h: V and the channel tiling change no result bit), and the float before each output unwritten.
TEST(CausalConv1dCuda, FourChannelPathEqualsOneChannelPath) {
  HLM_REQUIRE_CUDA();
  for (const ConvCase& c : kCases) {
    if (c.K != 4 || c.C % 4 != 0 || c.cu.back() == 0) continue;
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), ns = state_size(c), nw = in.w.size();
    const CausalConv1dCudaParams p = params_of(c);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), x1 = DeviceBuffer::from(shifted_by_one(in.x), "x+1"),
                 dy = DeviceBuffer::from(in.dy, "dy"), dy1 = DeviceBuffer::from(shifted_by_one(in.dy), "dy+1"),
                 w = DeviceBuffer::from(in.w, "w"), cu = DeviceBuffer::from(c.cu, "cu_seqlens");
    DeviceBuffer st = c.has_state ? DeviceBuffer::from(in.state, "state_in") : DeviceBuffer(0, "state_in");
    const float* st_dev = c.has_state ? st.as<float>() : nullptr;
    DeviceBuffer y(n * 4, "y"), y1((n + 1) * 4, "y+1"), so(ns * 4, "state_out"), so1(ns * 4, "state_out (y+1)");
    DeviceBuffer dx(n * 4, "dx"), dx1((n + 1) * 4, "dx+1"), dw(nw * 4, "dw"), dw1(nw * 4, "dw (dx+1)");
    DeviceBuffer ws(causal_conv1d_backward_cuda_workspace_bytes(p), "workspace");
    causal_conv1d_forward_cuda(y.as<float>(), so.as<float>(), x.as<float>(), w.as<float>(), st_dev, cu.as<int64_t>(),
                               p, ctx().stream());
    causal_conv1d_forward_cuda(y1.as<float>() + 1, so1.as<float>(), x1.as<float>() + 1, w.as<float>(), st_dev,
                               cu.as<int64_t>(), p, ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd y, 1-channel path"), body_after_one(y1), y.download<float>()));
    EXPECT_TRUE(check_exact(name(c, "fwd state_out, 1-channel path"), so1.download<float>(), so.download<float>()));
    causal_conv1d_backward_cuda(dx.as<float>(), dw.as<float>(), nullptr, dy.as<float>(), x.as<float>(),
                                w.as<float>(), st_dev, cu.as<int64_t>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
    causal_conv1d_backward_cuda(dx1.as<float>() + 1, dw1.as<float>(), nullptr, dy1.as<float>() + 1,
                                x1.as<float>() + 1, w.as<float>(), st_dev, cu.as<int64_t>(), p, ws.as<void>(),
                                ws.bytes(), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd dx, 1-channel path"), body_after_one(dx1), dx.download<float>()));
    EXPECT_TRUE(check_exact(name(c, "bwd dw, 1-channel path"), dw1.download<float>(), dw.download<float>()));
    EXPECT_TRUE(first_unwritten(y1) && first_unwritten(dx1)) << name(c, "1-channel path");
    EXPECT_TRUE(buffers_ok({&y, &y1, &so, &so1, &dx, &dx1, &dw, &dw1, &ws}, {&x, &x1, &dy, &dy1, &w, &cu, &st}))
        << name(c, "1-channel path");
  }
}

// The backward's interior walk (causal_conv1d_cuda_set_interior_walk: runs with their halo inside one sequence, K = 4,
// 4-channel path) against the general walk on every 4-channel case, fp32 and bf16 dx: dx, dw and d_state_in bit for bit.
TEST(CausalConv1dCuda, InteriorWalkEqualsTheGeneralWalk) {
  HLM_REQUIRE_CUDA();
  int cases = 0;
  for (const ConvCase& c : kCases) {
    if (c.K != 4 || c.C % 4 != 0 || c.cu.back() == 0) continue;
    ++cases;
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), ns = state_size(c), nw = in.w.size();
    const CausalConv1dCudaParams p = params_of(c);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 cu = DeviceBuffer::from(c.cu, "cu_seqlens"), dy = DeviceBuffer::from(in.dy, "dy");
    DeviceBuffer st = c.has_state ? DeviceBuffer::from(in.state, "state_in") : DeviceBuffer(0, "state_in");
    const float* st_dev = c.has_state ? st.as<float>() : nullptr;
    DeviceBuffer ws(causal_conv1d_backward_cuda_workspace_bytes(p), "workspace");
    struct Out {
      std::vector<unsigned char> dx, dx16, dw, ds;
    } out[2];
    for (int walk = 0; walk < 2; ++walk) {  // 0: the general walk only, 1: interior runs take the interior walk
      causal_conv1d_cuda_set_interior_walk(walk);
      DeviceBuffer dx(n * 4, "dx"), dx16(n * 2, "dx bf16"), dw(nw * 4, "dw"), ds(ns * 4, "d_state_in");
      causal_conv1d_backward_cuda(dx.as<float>(), dw.as<float>(), ns ? ds.as<float>() : nullptr, dy.as<float>(),
                                  x.as<float>(), w.as<float>(), st_dev, cu.as<int64_t>(), p, ws.as<void>(),
                                  ws.bytes(), ctx().stream());
      causal_conv1d_backward_bf16_dx_cuda(dx16.as<__nv_bfloat16>(), nullptr, nullptr, dy.as<float>(), x.as<float>(),
                                          w.as<float>(), st_dev, cu.as<int64_t>(), p, ws.as<void>(), ws.bytes(),
                                          ctx().stream());
      out[walk] = {dx.download_bytes(), dx16.download_bytes(), dw.download_bytes(), ds.download_bytes()};
      EXPECT_TRUE(buffers_ok({&dx, &dx16, &dw, &ds, &ws}, {&x, &w, &cu, &dy, &st})) << name(c, "bwd walks");
    }
    causal_conv1d_cuda_set_interior_walk(-1);
    EXPECT_TRUE(out[1].dx == out[0].dx) << name(c, "bwd dx, interior walk vs general walk");
    EXPECT_TRUE(out[1].dx16 == out[0].dx16) << name(c, "bwd bf16 dx, interior walk vs general walk");
    EXPECT_TRUE(out[1].dw == out[0].dw) << name(c, "bwd dw, interior walk vs general walk");
    EXPECT_TRUE(out[1].ds == out[0].ds) << name(c, "bwd d_state_in, interior walk vs general walk");
  }
  EXPECT_GE(cases, 14);
}

// The head width the conv + l2norm tests give a case: 128 where its channels are whole heads of 128 (fused), 8 for the
// C = 136 cases (17 heads of 8: the two launches inside), 0 for the rest (K ≠ 4 or no tokens: not run).
namespace {
int64_t l2norm_head_of(const ConvCase& c) {
  if (c.K != 4 || c.cu.back() == 0) return 0;
  return c.C % 128 == 0 ? 128 : (c.C == 136 ? 8 : 0);
}
}  // namespace

// The conv + per-head l2norm in one launch (causal_conv1d_l2norm_forward_cuda, heads of 128) against the two launches
// it replaces (causal_conv1d_forward_cuda without a state, then l2norm_forward_cuda over rows of 128): y and yn bit for
// bit on every K = 4 case with whole heads of 128 (fusable: asserted); with the fusion switched off (the launcher's
// two launches), and on a case whose heads are not 128 wide (C 136 as 17 heads of 8: the two launches inside).
TEST(CausalConv1dCuda, L2normFusedForwardEqualsTheTwoLaunches) {
  HLM_REQUIRE_CUDA();
  int fused_cases = 0;
  for (const ConvCase& c : kCases) {
    const int64_t head = l2norm_head_of(c);
    if (head == 0) continue;
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size();
    const CausalConv1dCudaParams p = params_of(c);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 cu = DeviceBuffer::from(c.cu, "cu_seqlens");
    DeviceBuffer y_ref(n * 4, "y (two launches)"), yn_ref(n * 4, "yn (two launches)"), y(n * 4, "y"),
        yn(n * 4, "yn"), y_off(n * 4, "y (switch off)"), yn_off(n * 4, "yn (switch off)");
    causal_conv1d_forward_cuda(y_ref.as<float>(), nullptr, x.as<float>(), w.as<float>(), nullptr, cu.as<int64_t>(), p,
                               ctx().stream());
    l2norm_forward_cuda(yn_ref.as<float>(), y_ref.as<float>(), L2normCudaParams{c.cu.back() * c.C / head, head},
                        ctx().stream());
    const bool fusable = causal_conv1d_l2norm_fusable(p, head, y.as<float>(), yn.as<float>(), x.as<float>());
    EXPECT_EQ(fusable, head == 128) << name(c, "conv + l2norm: fusable");
    fused_cases += fusable ? 1 : 0;
    causal_conv1d_l2norm_forward_cuda(y.as<float>(), yn.as<float>(), x.as<float>(), w.as<float>(), cu.as<int64_t>(),
                                      p, head, L2normCudaParams{}.eps, ctx().stream());
    causal_conv1d_cuda_set_l2norm_fused(0);
    causal_conv1d_l2norm_forward_cuda(y_off.as<float>(), yn_off.as<float>(), x.as<float>(), w.as<float>(),
                                      cu.as<int64_t>(), p, head, L2normCudaParams{}.eps, ctx().stream());
    causal_conv1d_cuda_set_l2norm_fused(-1);
    const std::vector<uint8_t> ry = y_ref.download_bytes(), ryn = yn_ref.download_bytes();
    EXPECT_TRUE(y.download_bytes() == ry) << name(c, "conv + l2norm: y vs the two launches");
    EXPECT_TRUE(yn.download_bytes() == ryn) << name(c, "conv + l2norm: yn vs the two launches");
    EXPECT_TRUE(y_off.download_bytes() == ry && yn_off.download_bytes() == ryn) << name(c, "conv + l2norm: switch off");
    EXPECT_TRUE(buffers_ok({&y, &yn, &y_off, &yn_off}, {&x, &w, &cu})) << name(c, "conv + l2norm");
  }
  EXPECT_GE(fused_cases, 3);
}

// Its backward (causal_conv1d_l2norm_backward(_bf16_dx)_cuda) against l2norm_backward_cuda on the forward's y followed
// by the conv's backward without a state: dx (fp32 and bf16) and dw bit for bit on the same cases, fused where the
// heads are 128 wide, with the fusion switched off, and on C 136 as heads of 8 (the two launches inside).
TEST(CausalConv1dCuda, L2normFusedBackwardEqualsTheTwoLaunches) {
  HLM_REQUIRE_CUDA();
  int cases = 0;
  for (const ConvCase& c : kCases) {
    const int64_t head = l2norm_head_of(c);
    if (head == 0) continue;
    ++cases;
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), nw = in.w.size();
    const CausalConv1dCudaParams p = params_of(c);
    const L2normCudaParams l2{c.cu.back() * c.C / head, head};
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 cu = DeviceBuffer::from(c.cu, "cu_seqlens"), y(n * 4, "y");
    causal_conv1d_forward_cuda(y.as<float>(), nullptr, x.as<float>(), w.as<float>(), nullptr, cu.as<int64_t>(), p,
                               ctx().stream());
    DeviceBuffer ws(causal_conv1d_backward_cuda_workspace_bytes(p), "workspace");
    const std::vector<uint8_t> y_bytes = y.download_bytes();  // y is this test's output above: checked unchanged below
    // The two launches: the l2norm's backward in place, then the conv's (fp32 and bf16 dx).
    DeviceBuffer dyr = DeviceBuffer::from(in.dy, "dy (two launches)"), dx_ref(n * 4, "dx (two launches)"),
                 dw_ref(nw * 4, "dw (two launches)"), dx16_ref(n * 2, "bf16 dx (two launches)");
    l2norm_backward_cuda(dyr.as<float>(), dyr.as<float>(), y.as<float>(), l2, ctx().stream());
    causal_conv1d_backward_cuda(dx_ref.as<float>(), dw_ref.as<float>(), nullptr, dyr.as<float>(), x.as<float>(),
                                w.as<float>(), nullptr, cu.as<int64_t>(), p, ws.as<void>(), ws.bytes(), ctx().stream());
    causal_conv1d_backward_bf16_dx_cuda(dx16_ref.as<__nv_bfloat16>(), nullptr, nullptr, dyr.as<float>(), x.as<float>(),
                                        w.as<float>(), nullptr, cu.as<int64_t>(), p, ws.as<void>(), ws.bytes(),
                                        ctx().stream());
    const std::vector<uint8_t> rdx = dx_ref.download_bytes(), rdw = dw_ref.download_bytes(),
                               rdx16 = dx16_ref.download_bytes();
    for (const int fused : {1, 0}) {
      causal_conv1d_cuda_set_l2norm_fused(fused);
      DeviceBuffer dy1 = DeviceBuffer::from(in.dy, "dy"), dy2 = DeviceBuffer::from(in.dy, "dy (bf16 dx)"),
                   dx(n * 4, "dx"), dw(nw * 4, "dw"), dx16(n * 2, "bf16 dx"), dw16(nw * 4, "dw (bf16 dx)");
      causal_conv1d_l2norm_backward_cuda(dx.as<float>(), dw.as<float>(), dy1.as<float>(), y.as<float>(),
                                         x.as<float>(), w.as<float>(), cu.as<int64_t>(), p, head, l2.eps,
                                         ws.as<void>(), ws.bytes(), ctx().stream());
      causal_conv1d_l2norm_backward_bf16_dx_cuda(dx16.as<__nv_bfloat16>(), dw16.as<float>(), dy2.as<float>(),
                                                 y.as<float>(), x.as<float>(), w.as<float>(), cu.as<int64_t>(), p,
                                                 head, l2.eps, ws.as<void>(), ws.bytes(), ctx().stream());
      const std::string what = std::string("conv + l2norm backward, fusion ") + (fused ? "on" : "off");
      EXPECT_TRUE(dx.download_bytes() == rdx) << name(c, (what + ": dx").c_str());
      EXPECT_TRUE(dw.download_bytes() == rdw) << name(c, (what + ": dw").c_str());
      EXPECT_TRUE(dx16.download_bytes() == rdx16) << name(c, (what + ": bf16 dx").c_str());
      EXPECT_TRUE(dw16.download_bytes() == rdw) << name(c, (what + ": dw (bf16 dx)").c_str());
      EXPECT_TRUE(buffers_ok({&dx, &dw, &dx16, &dw16, &ws}, {&x, &w, &cu})) << name(c, what.c_str());
      EXPECT_TRUE(y.download_bytes() == y_bytes) << name(c, (what + ": y modified").c_str());
    }
    causal_conv1d_cuda_set_l2norm_fused(-1);
  }
  EXPECT_GE(cases, 5);
}

// The bf16-dx backward (causal_conv1d_backward_bf16_dx_cuda; the GDN layer's bf16 compute mode) on every case: dx
// exactly core/dtype.h's rounding of the fp32 backward's dx (NaN payloads included), dw and d_state_in its bytes; for
// the 4-channel cases again with dx one bf16 element off alignment (the 1-channel path: the same bits, nothing written
// before the data).
TEST(CausalConv1dCuda, Bf16DxIsTheCastOfTheF32One) {
  HLM_REQUIRE_CUDA();
  for (const ConvCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const size_t n = in.x.size(), ns = state_size(c), nw = in.w.size();
    const CausalConv1dCudaParams p = params_of(c);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 cu = DeviceBuffer::from(c.cu, "cu_seqlens"), dy = DeviceBuffer::from(in.dy, "dy");
    DeviceBuffer st = c.has_state ? DeviceBuffer::from(in.state, "state_in") : DeviceBuffer(0, "state_in");
    const float* st_dev = c.has_state ? st.as<float>() : nullptr;
    DeviceBuffer dx(n * 4, "dx"), dw(nw * 4, "dw"), ds(ns * 4, "d_state_in"), dx16(n * 2, "dx bf16"),
        dw16(nw * 4, "dw (bf16 dx)"), ds16(ns * 4, "d_state_in (bf16 dx)"), dx16s((n + 1) * 2, "dx bf16+1");
    DeviceBuffer ws(causal_conv1d_backward_cuda_workspace_bytes(p), "workspace");
    causal_conv1d_backward_cuda(dx.as<float>(), dw.as<float>(), ns ? ds.as<float>() : nullptr, dy.as<float>(),
                                x.as<float>(), w.as<float>(), st_dev, cu.as<int64_t>(), p, ws.as<void>(), ws.bytes(),
                                ctx().stream());
    causal_conv1d_backward_bf16_dx_cuda(dx16.as<__nv_bfloat16>(), dw16.as<float>(), ns ? ds16.as<float>() : nullptr,
                                        dy.as<float>(), x.as<float>(), w.as<float>(), st_dev, cu.as<int64_t>(), p,
                                        ws.as<void>(), ws.bytes(), ctx().stream());
    const std::vector<float> f32 = dx.download<float>();
    const std::vector<uint16_t> bits = dx16.download<uint16_t>();
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) mismatches += bits[i] != f32_to_bf16(f32[i]) ? 1 : 0;
    EXPECT_EQ(mismatches, 0u) << name(c, "bwd bf16 dx vs cast of the fp32 dx");
    EXPECT_TRUE(dw16.download_bytes() == dw.download_bytes()) << name(c, "bwd dw (bf16 dx)");
    EXPECT_TRUE(ds16.download_bytes() == ds.download_bytes()) << name(c, "bwd d_state_in (bf16 dx)");
    if (c.K == 4 && c.C % 4 == 0 && n > 0) {
      causal_conv1d_backward_bf16_dx_cuda(dx16s.as<__nv_bfloat16>() + 1, nullptr, nullptr, dy.as<float>(),
                                          x.as<float>(), w.as<float>(), st_dev, cu.as<int64_t>(), p, ws.as<void>(),
                                          ws.bytes(), ctx().stream());
      const std::vector<uint16_t> shifted = dx16s.download<uint16_t>();
      EXPECT_EQ(shifted[0], 0xFFFFu) << name(c, "bwd bf16 dx+1: written before the data");
      EXPECT_TRUE(std::equal(bits.begin(), bits.end(), shifted.begin() + 1)) << name(c, "bwd bf16 dx, 1-channel path");
    }
    EXPECT_TRUE(buffers_ok({&dx, &dw, &ds, &dx16, &dw16, &ds16, &dx16s, &ws}, {&x, &w, &cu, &dy, &st}))
        << name(c, "bwd bf16 dx");
  }
}
