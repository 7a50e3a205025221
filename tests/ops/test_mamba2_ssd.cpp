// Mamba-2 SSD scan (ops/mamba2_ssd): the recurrent and chunked forward agree (double and float), token-by-token
// decode with a carried state equals the whole-sequence forward, a one-token case against the formula written out,
// and the backward against central finite differences in double (fd_check's tolerance: see support/finite_diff.h).
// Shapes: G = 2 groups of 2 heads (nh = 4), P = 3 ≠ N = 5, packed sequences of 1, 5 and 7 tokens, chunk sizes that
// do not divide the lengths, an initial state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/mamba2_ssd/mamba2_ssd.h"
#include "support/finite_diff.h"

using namespace hlm;

namespace {

struct Problem {
  Mamba2Shape s;
  std::vector<int64_t> cu;
  std::vector<double> x, dt_raw, dt_bias, A_log, B, C, D, h0, dy, dhT;
  Mamba2DtLimits limits;

  int64_t n_seqs() const { return static_cast<int64_t>(cu.size()) - 1; }
  Mamba2Inputs<double> inputs(bool with_state = true) const {
    return {x.data(), dt_raw.data(), dt_bias.data(), A_log.data(), B.data(), C.data(), D.data(),
            with_state ? h0.data() : nullptr, cu.data(), n_seqs()};
  }
  size_t state_size() const { return static_cast<size_t>(n_seqs() * s.heads * s.head_dim * s.state_dim); }
  double loss() const {
    std::vector<double> y(x.size()), hT(state_size());
    mamba2_ssd_recurrent_forward<double>({y.data(), hT.data()}, inputs(), s, limits);
    return test::dot(y, dy) + test::dot(hT, dhT);
  }
};

Problem make_problem(std::vector<int64_t> cu, Mamba2DtLimits limits = {}) {
  Problem p;
  const int64_t T = cu.back(), Ns = static_cast<int64_t>(cu.size()) - 1;
  p.s = {T, 4, 3, 2, 5};
  p.cu = std::move(cu);
  p.limits = limits;
  const size_t nh = 4, P = 3, G = 2, N = 5;
  p.x = test::random_doubles(T * nh * P, 1);
  p.dt_raw = test::random_doubles(T * nh, 2);
  p.dt_bias = test::random_doubles(nh, 3, 0.5, -1.0);
  p.A_log = test::random_doubles(nh, 4, 0.5);
  p.B = test::random_doubles(T * G * N, 5);
  p.C = test::random_doubles(T * G * N, 6);
  p.D = test::random_doubles(nh, 7);
  p.h0 = test::random_doubles(Ns * nh * P * N, 8, 0.5);
  p.dy = test::random_doubles(T * nh * P, 9);
  p.dhT = test::random_doubles(Ns * nh * P * N, 10);
  return p;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 1e-30, e = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::abs(b[i]));
    e = std::max(e, std::abs(a[i] - b[i]));
  }
  return e / m;
}

}  // namespace

TEST(Mamba2Ssd, ChunkedEqualsRecurrentInDouble) {
  const Problem p = make_problem({0, 1, 6, 13});
  std::vector<double> y_ref(p.x.size()), h_ref(p.state_size());
  mamba2_ssd_recurrent_forward<double>({y_ref.data(), h_ref.data()}, p.inputs(), p.s, p.limits);
  for (int64_t chunk : {1, 2, 3, 4, 64}) {
    std::vector<double> y(p.x.size()), h(p.state_size());
    mamba2_ssd_chunked_forward<double>({y.data(), h.data()}, p.inputs(), p.s, p.limits, chunk);
    EXPECT_LT(max_rel(y, y_ref), 1e-13) << "chunk " << chunk;
    EXPECT_LT(max_rel(h, h_ref), 1e-13) << "chunk " << chunk;
  }
  // Without an initial state too.
  std::vector<double> y0(p.x.size()), y1(p.x.size());
  mamba2_ssd_recurrent_forward<double>({y0.data(), nullptr}, p.inputs(false), p.s, p.limits);
  mamba2_ssd_chunked_forward<double>({y1.data(), nullptr}, p.inputs(false), p.s, p.limits, 4);
  EXPECT_LT(max_rel(y1, y0), 1e-13);
  EXPECT_GT(max_rel(y0, y_ref), 1e-3);  // the initial state matters
}

TEST(Mamba2Ssd, FloatChunkedMatchesDouble) {
  const Problem p = make_problem({0, 1, 6, 13});
  std::vector<double> y_ref(p.x.size());
  mamba2_ssd_recurrent_forward<double>({y_ref.data(), nullptr}, p.inputs(), p.s, p.limits);
  const auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto x = f(p.x), dt = f(p.dt_raw), bias = f(p.dt_bias), al = f(p.A_log), B = f(p.B), C = f(p.C), D = f(p.D),
             h0 = f(p.h0);
  std::vector<float> y(p.x.size());
  mamba2_ssd_chunked_forward<float>(
      {y.data(), nullptr},
      {x.data(), dt.data(), bias.data(), al.data(), B.data(), C.data(), D.data(), h0.data(), p.cu.data(), 3}, p.s,
      p.limits, 4);
  EXPECT_LT(max_rel(std::vector<double>(y.begin(), y.end()), y_ref), 1e-5);
}

TEST(Mamba2Ssd, DecodeWithCarriedStateEqualsWholeSequence) {
  // One 7-token sequence: forward all at once vs one token at a time (state_out aliasing state_in).
  const Problem p = make_problem({0, 7});
  std::vector<double> y_ref(p.x.size()), h_ref(p.state_size());
  mamba2_ssd_chunked_forward<double>({y_ref.data(), h_ref.data()}, p.inputs(), p.s, p.limits, 4);
  std::vector<double> state = p.h0, y(p.x.size());
  const int64_t step = p.s.heads * p.s.head_dim;
  for (int64_t t = 0; t < 7; ++t) {
    const int64_t cu1[2] = {0, 1};
    const int64_t GN = p.s.groups * p.s.state_dim;
    Mamba2Shape s1 = p.s;
    s1.total_tokens = 1;
    mamba2_ssd_recurrent_forward<double>(
        {y.data() + t * step, state.data()},
        {p.x.data() + t * step, p.dt_raw.data() + t * p.s.heads, p.dt_bias.data(), p.A_log.data(),
         p.B.data() + t * GN, p.C.data() + t * GN, p.D.data(), state.data(), cu1, 1},
        s1, p.limits);
  }
  EXPECT_LT(max_rel(y, y_ref), 1e-13);
  EXPECT_LT(max_rel(state, h_ref), 1e-13);
}

TEST(Mamba2Ssd, OneTokenMatchesTheFormula) {
  // Zero state, one token: y = dt·(B_g·C_g)·x + D·x with dt = softplus(raw + bias), head h in group h / 2.
  const Problem p = make_problem({0, 1});
  std::vector<double> y(p.x.size());
  mamba2_ssd_recurrent_forward<double>({y.data(), nullptr}, p.inputs(false), p.s, p.limits);
  for (int64_t h = 0; h < 4; ++h) {
    const int64_t g = h / 2;
    double bc = 0.0;
    for (int64_t n = 0; n < 5; ++n) bc += p.B[g * 5 + n] * p.C[g * 5 + n];
    const double dt = std::log1p(std::exp(p.dt_raw[h] + p.dt_bias[h]));
    for (int64_t q = 0; q < 3; ++q)
      EXPECT_NEAR(y[h * 3 + q], dt * bc * p.x[h * 3 + q] + p.D[h] * p.x[h * 3 + q], 1e-12);
  }
}

TEST(Mamba2Ssd, DtLimitsClamp) {
  EXPECT_DOUBLE_EQ(mamba2_dt(0.0, 0.0, {}), std::log(2.0));
  EXPECT_DOUBLE_EQ(mamba2_dt(30.0, 0.0, {}), 30.0);  // above torch's softplus threshold
  EXPECT_DOUBLE_EQ(mamba2_dt(0.0, 0.0, {0.0, 0.5, true}), 0.5);
  EXPECT_DOUBLE_EQ(mamba2_dt(-10.0, 0.0, {0.1, 0.5, true}), 0.1);
  EXPECT_NEAR(mamba2_dt(0.0, 0.0, {0.0, 0.5, false}), std::log(2.0), 1e-15);
}

namespace {

void run_fd(Problem p) {
  const size_t T = static_cast<size_t>(p.s.total_tokens);
  std::vector<double> dx(p.x.size()), ddt(p.dt_raw.size()), dbias(4), dA(4), dB(p.B.size()), dC(p.C.size()), dD(4),
      dh0(p.h0.size());
  mamba2_ssd_backward<double>(
      {dx.data(), ddt.data(), dbias.data(), dA.data(), dB.data(), dC.data(), dD.data(), dh0.data()}, p.dy.data(),
      p.dhT.data(), p.inputs(), p.s, p.limits);
  const auto loss = [&] { return p.loss(); };
  test::fd_check(loss, p.x, dx, "x");
  test::fd_check(loss, p.dt_raw, ddt, "dt_raw");
  test::fd_check(loss, p.dt_bias, dbias, "dt_bias");
  test::fd_check(loss, p.A_log, dA, "A_log");
  test::fd_check(loss, p.B, dB, "B");
  test::fd_check(loss, p.C, dC, "C");
  test::fd_check(loss, p.D, dD, "D");
  test::fd_check(loss, p.h0, dh0, "h0");
  EXPECT_EQ(ddt.size(), T * 4);
}

}  // namespace

TEST(Mamba2Ssd, BackwardMatchesFiniteDifferences) { run_fd(make_problem({0, 1, 6, 13})); }

TEST(Mamba2Ssd, BackwardWithDtLimitsMatchesFiniteDifferences) {
  // Limits [0.15, 0.6] clamp some dt on both sides; none lies within 1e-4 of a bound (checked), where the finite
  // difference would straddle the kink.
  Problem p = make_problem({0, 5, 12}, {0.15, 0.6, true});
  int clamped = 0;
  for (size_t i = 0; i < p.dt_raw.size(); ++i) {
    const double dt = mamba2_dt(p.dt_raw[i], p.dt_bias[i % 4], {});
    ASSERT_GT(std::min(std::abs(dt - 0.15), std::abs(dt - 0.6)), 1e-4);
    clamped += dt < 0.15 || dt > 0.6;
  }
  EXPECT_GT(clamped, 0);
  EXPECT_LT(clamped, static_cast<int>(p.dt_raw.size()));
  run_fd(std::move(p));
}
