// The small ops around the gated delta rule in a GDN layer: causal_conv1d, l2norm, gdn_gate, gated_rmsnorm.
// Per op: finite-difference gradient check in double (every input element), forward semantics against hand-written
// expectations (tap order, sequence resets, state continuation, torch's softplus threshold), and thread-count
// independence (bitwise) on sizes large enough to open an OpenMP team.
// FD tolerance: central differences with eps = 1e-6 in double have truncation error O(eps²·|L'''|) ≈ 1e-12 and
// rounding error O(1e-16·|L| / eps) ≈ 1e-10 for |L| ≲ 100, so |fd − analytic| ≤ 1e-7·max(1, max|analytic|) has
// ≥ 100x margin while a wrong term (sign, missing factor, off-by-one tap) shows up at ≥ 1e-3.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/gdn_gate/gdn_gate.h"
#include "ops/l2norm/l2norm.h"
#include "support/finite_diff.h"
#include "support/threads.h"
#include "support/random.h"

using namespace hlm;

namespace {

using test::dot;
using test::fd_check;

std::vector<double> randn(size_t n, uint64_t stream, double sd = 1.0, double mean = 0.0) {
  return test::random_doubles(n, stream, sd, mean, 4242);
}

using test::expect_thread_independent;

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

// ---- causal_conv1d ----

struct ConvProblem {
  std::vector<int64_t> cu;
  int64_t C = 3, K = 4;
  bool silu = true, with_state = true;
  std::vector<double> x, w, state, dy;
  int64_t T() const { return cu.back(); }
  int64_t N() const { return static_cast<int64_t>(cu.size()) - 1; }
  CausalConv1dShape shape() const { return {T(), C, K}; }
  std::vector<double> forward(std::vector<double>* state_out = nullptr) const {
    std::vector<double> y(x.size());
    if (state_out) state_out->assign(static_cast<size_t>(N() * C * (K - 1)), 0.0);
    causal_conv1d_forward<double>(y.data(), state_out ? state_out->data() : nullptr, x.data(), w.data(),
                                  with_state ? state.data() : nullptr, cu.data(), N(), shape(), silu);
    return y;
  }
};

ConvProblem make_conv(std::vector<int64_t> cu, bool silu, bool with_state, int64_t C = 3, int64_t K = 4) {
  ConvProblem p;
  p.cu = std::move(cu);
  p.C = C;
  p.K = K;
  p.silu = silu;
  p.with_state = with_state;
  p.x = randn(static_cast<size_t>(p.T() * C), 1);
  p.w = randn(static_cast<size_t>(C * K), 2, 0.5);
  p.state = randn(static_cast<size_t>(p.N() * C * (K - 1)), 3);
  p.dy = randn(p.x.size(), 4);
  return p;
}

}  // namespace

TEST(CausalConv1d, BackwardMatchesFiniteDifferences) {
  // Sequences of 2 (< K-1), 7 and 1 tokens; SiLU on/off; with and without an initial state.
  for (bool silu : {true, false})
    for (bool with_state : {true, false}) {
      std::printf(" silu=%d state=%d\n", silu, with_state);
      ConvProblem p = make_conv({0, 2, 9, 10}, silu, with_state);
      std::vector<double> dx(p.x.size()), dw(p.w.size()), dstate(p.state.size());
      causal_conv1d_backward<double>(dx.data(), dw.data(), with_state ? dstate.data() : nullptr, p.dy.data(),
                                     p.x.data(), p.w.data(), with_state ? p.state.data() : nullptr, p.cu.data(),
                                     p.N(), p.shape(), silu);
      const auto loss = [&] { return dot(p.forward(), p.dy); };
      fd_check(loss, p.x, dx, "x");
      fd_check(loss, p.w, dw, "w");
      if (with_state) fd_check(loss, p.state, dstate, "state");
    }
}

TEST(CausalConv1d, TapOrderAndSequenceReset) {
  // Tap K-1 multiplies the current token, tap 0 the token K-1 back; nothing crosses a sequence start.
  ConvProblem p = make_conv({0, 3, 8}, false, false, 2, 4);
  std::fill(p.w.begin(), p.w.end(), 0.0);
  p.w[0 * 4 + 3] = 1.0;  // channel 0: identity
  p.w[1 * 4 + 0] = 1.0;  // channel 1: shift by 3
  const auto y = p.forward();
  for (int64_t t = 0; t < 8; ++t) {
    const int64_t start = t < 3 ? 0 : 3;
    EXPECT_EQ(y[t * 2 + 0], p.x[t * 2 + 0]) << t;
    EXPECT_EQ(y[t * 2 + 1], t - 3 >= start ? p.x[(t - 3) * 2 + 1] : 0.0) << t;
  }
}

TEST(CausalConv1d, StateContinuationEqualsOneCall) {
  // Splitting every sequence into a prefix call (state_out) and a suffix call (state_in) reproduces one call, for
  // prefixes shorter than K-1, a 1-token decode suffix and an empty suffix; state_out aliasing state_in is allowed.
  for (bool silu : {true, false}) {
    const ConvProblem full = make_conv({0, 9, 15}, silu, true);
    std::vector<double> full_state;
    const auto y_full = full.forward(&full_state);
    for (const auto& split : std::vector<std::array<int64_t, 2>>{{1, 2}, {8, 5}, {9, 6}, {4, 4}}) {
      ConvProblem a = full, b = full;
      a.cu = {0, split[0], split[0] + split[1]};
      b.cu = {0, 9 - split[0], 15 - split[0] - split[1]};
      a.x.clear();
      b.x.clear();
      const int64_t C = full.C;
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t start = full.cu[s], cut = start + split[s], end = full.cu[s + 1];
        a.x.insert(a.x.end(), full.x.begin() + start * C, full.x.begin() + cut * C);
        b.x.insert(b.x.end(), full.x.begin() + cut * C, full.x.begin() + end * C);
      }
      std::vector<double> state = full.state;  // updated in place by the prefix call
      causal_conv1d_forward<double>(std::vector<double>(a.x.size()).data(), state.data(), a.x.data(), a.w.data(),
                                    state.data(), a.cu.data(), 2, a.shape(), silu);
      b.state = state;
      std::vector<double> state_b;
      const auto y_b = b.forward(&state_b);
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t t = 0; t < b.cu[s + 1] - b.cu[s]; ++t)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t t_full = full.cu[s] + split[s] + t;
            EXPECT_NEAR(y_b[(b.cu[s] + t) * C + c], y_full[t_full * C + c], 1e-14) << s << " " << t;
          }
      for (size_t i = 0; i < state_b.size(); ++i) EXPECT_EQ(state_b[i], full_state[i]) << i;
    }
  }
}

TEST(CausalConv1d, ResultsIndependentOfThreadCount) {
  const ConvProblem p = make_conv({0, 100, 300, 512}, true, true, 32, 4);
  const auto x = to_float(p.x), w = to_float(p.w), st = to_float(p.state), dy = to_float(p.dy);
  expect_thread_independent(
      [&] {
        std::vector<float> y(x.size()), so(st.size()), dx(x.size()), dw(w.size()), ds(st.size());
        causal_conv1d_forward<float>(y.data(), so.data(), x.data(), w.data(), st.data(), p.cu.data(), 3, p.shape(),
                                     true);
        causal_conv1d_backward<float>(dx.data(), dw.data(), ds.data(), dy.data(), x.data(), w.data(), st.data(),
                                      p.cu.data(), 3, p.shape(), true);
        for (const auto* v : {&so, &dx, &dw, &ds}) y.insert(y.end(), v->begin(), v->end());
        return y;
      },
      "causal_conv1d");
}

TEST(L2Norm, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 4, dim = 5;
  auto x = randn(rows * dim, 11);
  x[0] = x[1] = x[2] = x[3] = x[4] = 3e-3;  // a small row (Σx² = 45·eps): the eps term matters at 2%
  const auto dy = randn(rows * dim, 12);
  std::vector<double> dx(x.size());
  l2norm_backward<double>(dx.data(), dy.data(), x.data(), rows, dim);
  const auto loss = [&] {
    std::vector<double> y(x.size());
    l2norm_forward<double>(y.data(), x.data(), rows, dim);
    return dot(y, dy);
  };
  fd_check(loss, x, dx, "x");
  std::vector<double> y(x.size());
  l2norm_forward<double>(y.data(), x.data(), rows, dim);
  double ss = 0.0, xs = 0.0;
  for (int64_t d = 0; d < dim; ++d) ss += y[dim + d] * y[dim + d], xs += x[dim + d] * x[dim + d];
  EXPECT_NEAR(ss, xs / (xs + 1e-6), 1e-14);  // ‖y‖² = Σx² / (Σx² + eps)
}

TEST(L2Norm, InPlaceAndThreadIndependent) {
  const auto x = to_float(randn(4096 * 32, 13)), dy = to_float(randn(4096 * 32, 14));
  expect_thread_independent(
      [&] {
        std::vector<float> y = x, dx = dy;
        l2norm_forward<float>(y.data(), y.data(), 4096, 32);  // in place
        l2norm_backward<float>(dx.data(), dx.data(), x.data(), 4096, 32);
        y.insert(y.end(), dx.begin(), dx.end());
        return y;
      },
      "l2norm");
}

TEST(GdnGate, BackwardMatchesFiniteDifferences) {
  const int64_t T = 6, H = 3;
  for (bool neg : {false, true}) {
    auto a = randn(T * H, 21, 2.0), b = randn(T * H, 22, 2.0), A_log = randn(H, 23), dt = randn(H, 24);
    a[4] = 25.0;  // a + dt_bias above softplus's threshold 20: the linear branch
    const auto dg = randn(T * H, 25), dbeta = randn(T * H, 26);
    std::vector<double> da(a.size()), db(b.size()), dA(H), ddt(H);
    gdn_gate_backward<double>(da.data(), db.data(), dA.data(), ddt.data(), dg.data(), dbeta.data(), a.data(),
                              b.data(), A_log.data(), dt.data(), T, H, neg);
    const auto loss = [&] {
      std::vector<double> g(a.size()), beta(b.size());
      gdn_gate_forward<double>(g.data(), beta.data(), a.data(), b.data(), A_log.data(), dt.data(), T, H, neg);
      return dot(g, dg) + dot(beta, dbeta);
    };
    std::printf(" neg_eigval=%d\n", neg);
    fd_check(loss, a, da, "a");
    fd_check(loss, b, db, "b");
    fd_check(loss, A_log, dA, "A_log");
    fd_check(loss, dt, ddt, "dt_bias");
  }
}

TEST(GdnGate, ForwardMatchesTorchFormulas) {
  // torch: softplus(u) = u for u > 20, else log1p(exp(u)); g = -exp(A_log)·softplus(a + dt); β = σ(b)·(1 or 2).
  const std::vector<double> a{25.0, 20.0, -30.0, 0.0}, b{0.0, 100.0, -3.0, 1.0}, A_log{std::log(0.5)}, dt{0.0};
  std::vector<double> g(4), beta(4);
  gdn_gate_forward<double>(g.data(), beta.data(), a.data(), b.data(), A_log.data(), dt.data(), 4, 1, true);
  EXPECT_DOUBLE_EQ(g[0], -0.5 * 25.0);
  EXPECT_DOUBLE_EQ(g[1], -0.5 * std::log1p(std::exp(20.0)));
  EXPECT_DOUBLE_EQ(g[2], -0.5 * std::log1p(std::exp(-30.0)));
  EXPECT_GT(g[2], -1e-13);
  EXPECT_DOUBLE_EQ(g[3], -0.5 * std::log(2.0));
  EXPECT_DOUBLE_EQ(beta[0], 1.0);
  EXPECT_DOUBLE_EQ(beta[1], 2.0);
  EXPECT_DOUBLE_EQ(beta[3], 2.0 / (1.0 + std::exp(-1.0)));
}

TEST(GdnGate, ThreadIndependent) {
  const int64_t T = 8192, H = 16;
  const auto a = to_float(randn(T * H, 31)), b = to_float(randn(T * H, 32)), A = to_float(randn(H, 33));
  const auto dt = to_float(randn(H, 34)), dg = to_float(randn(T * H, 35)), dbeta = to_float(randn(T * H, 36));
  expect_thread_independent(
      [&] {
        std::vector<float> g(a.size()), beta(a.size()), da(a.size()), db(a.size()), dA(H), ddt(H);
        gdn_gate_forward<float>(g.data(), beta.data(), a.data(), b.data(), A.data(), dt.data(), T, H, true);
        gdn_gate_backward<float>(da.data(), db.data(), dA.data(), ddt.data(), dg.data(), dbeta.data(), a.data(),
                                 b.data(), A.data(), dt.data(), T, H, true);
        for (const auto* v : {&beta, &da, &db, &dA, &ddt}) g.insert(g.end(), v->begin(), v->end());
        return g;
      },
      "gdn_gate");
}

TEST(GatedRmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, dim = 4;
  for (double eps : {1e-5, 1e-6}) {
    auto x = randn(rows * dim, 41), z = randn(rows * dim, 42, 2.0), w = randn(dim, 43, 0.1, 1.0);
    const auto dy = randn(rows * dim, 44);
    std::vector<double> dx(x.size()), dz(z.size()), dw(w.size());
    gated_rmsnorm_backward<double>(dx.data(), dz.data(), dw.data(), dy.data(), x.data(), z.data(), w.data(), rows,
                                   dim, eps);
    const auto loss = [&] {
      std::vector<double> y(x.size());
      gated_rmsnorm_forward<double>(y.data(), x.data(), z.data(), w.data(), rows, dim, eps);
      return dot(y, dy);
    };
    std::printf(" eps=%g\n", eps);
    fd_check(loss, x, dx, "x");
    fd_check(loss, z, dz, "z");
    fd_check(loss, w, dw, "w");
  }
}

TEST(GatedRmsNorm, ForwardMatchesFormula) {
  // One row by hand: y = x / sqrt(mean x² + eps) · w · z σ(z).
  const std::vector<double> x{1.0, -2.0, 3.0}, z{0.5, -1.0, 2.0}, w{1.0, 0.5, 2.0};
  std::vector<double> y(3);
  gated_rmsnorm_forward<double>(y.data(), x.data(), z.data(), w.data(), 1, 3, 1e-5);
  const double r = 1.0 / std::sqrt((1.0 + 4.0 + 9.0) / 3.0 + 1e-5);
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(y[d], x[d] * r * w[d] * z[d] / (1.0 + std::exp(-z[d])), 1e-15);
}

TEST(GatedRmsNorm, ThreadIndependent) {
  const int64_t rows = 4096, dim = 32;
  const auto x = to_float(randn(rows * dim, 51)), z = to_float(randn(rows * dim, 52));
  const auto w = to_float(randn(dim, 53)), dy = to_float(randn(rows * dim, 54));
  expect_thread_independent(
      [&] {
        std::vector<float> y(x.size()), dx(x.size()), dz(x.size()), dw(dim);
        gated_rmsnorm_forward<float>(y.data(), x.data(), z.data(), w.data(), rows, dim, 1e-5);
        gated_rmsnorm_backward<float>(dx.data(), dz.data(), dw.data(), dy.data(), x.data(), z.data(), w.data(), rows,
                                      dim, 1e-5);
        for (const auto* v : {&dx, &dz, &dw}) y.insert(y.end(), v->begin(), v->end());
        return y;
      },
      "gated_rmsnorm");
}
