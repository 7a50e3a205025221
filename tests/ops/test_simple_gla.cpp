// Simple GLA / Lightning Attention-2 (ops/simple_gla): the recurrent forward against the closed-form sum written out
// here, chunked = recurrent (double and float; packed sequences of 1, 7, 63, 64, 65 and 130 tokens, chunk sizes that
// do and do not divide them, with and without an initial state, a head with λ > 1), prefill + continued prefill from
// the final state = one longer prefill (and token-by-token decode), the backward against central finite differences
// in double (fd_check's tolerance: see support/finite_diff.h) for q, k, v and the initial state, the ALiBi slopes and
// the Ring decay against values written out independently, and bad arguments as input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/simple_gla/simple_gla.h"
#include "support/finite_diff.h"

using namespace hlm;

namespace {

struct Problem {
  SimpleGlaShape s;
  std::vector<int64_t> cu;
  std::vector<double> q, k, v, g, h0, dy, dhT;
  double scale = 0.0;

  int64_t n_seqs() const { return static_cast<int64_t>(cu.size()) - 1; }
  SimpleGlaInputs<double> inputs(bool with_state = true) const {
    return {q.data(), k.data(), v.data(), g.data(), with_state ? h0.data() : nullptr, cu.data(), n_seqs(), scale};
  }
  size_t out_size() const { return static_cast<size_t>(s.total_tokens * s.heads * s.value_dim); }
  size_t state_size() const { return static_cast<size_t>(n_seqs() * s.heads * s.key_dim * s.value_dim); }
  double loss() const {
    std::vector<double> o(out_size()), hT(state_size());
    simple_gla_recurrent_forward<double>({o.data(), hT.data()}, inputs(), s);
    return test::dot(o, dy) + test::dot(hT, dhT);
  }
};

// H = 3 heads: g = −0.3 (fast decay), −0.02, +0.004 (λ > 1, as the Ring decay gives layer 0); dk = 4 ≠ dv = 3.
Problem make_problem(std::vector<int64_t> cu, int64_t H = 3, int64_t K = 4, int64_t V = 3) {
  Problem p;
  const int64_t T = cu.back(), Ns = static_cast<int64_t>(cu.size()) - 1;
  p.s = {T, H, K, V};
  p.cu = std::move(cu);
  const size_t tH = static_cast<size_t>(T * H);
  p.q = test::random_doubles(tH * K, 1);
  p.k = test::random_doubles(tH * K, 2);
  p.v = test::random_doubles(tH * V, 3);
  const double gs[3] = {-0.3, -0.02, 0.004};
  for (int64_t h = 0; h < H; ++h) p.g.push_back(gs[h % 3]);
  p.h0 = test::random_doubles(static_cast<size_t>(Ns * H * K * V), 4, 0.5);
  p.dy = test::random_doubles(tH * V, 5);
  p.dhT = test::random_doubles(static_cast<size_t>(Ns * H * K * V), 6);
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

// o_t = scale·(λ^{t−t0+1}·q_t S_init + Σ_{t0≤s≤t} λ^{t−s} (q_t·k_s) v_s), written out without any state.
std::vector<double> closed_form(const Problem& p, bool with_state) {
  const int64_t H = p.s.heads, K = p.s.key_dim, V = p.s.value_dim;
  const double scale = p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(K));
  std::vector<double> o(p.out_size(), 0.0);
  for (int64_t n = 0; n < p.n_seqs(); ++n)
    for (int64_t t = p.cu[n]; t < p.cu[n + 1]; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const double* q = &p.q[(t * H + h) * K];
        double* out = &o[(t * H + h) * V];
        if (with_state) {
          const double w = std::pow(std::exp(p.g[h]), static_cast<double>(t - p.cu[n] + 1));
          for (int64_t a = 0; a < K; ++a)
            for (int64_t b = 0; b < V; ++b) out[b] += w * q[a] * p.h0[((n * H + h) * K + a) * V + b];
        }
        for (int64_t s = p.cu[n]; s <= t; ++s) {
          double qk = 0.0;
          for (int64_t a = 0; a < K; ++a) qk += q[a] * p.k[(s * H + h) * K + a];
          const double w = std::pow(std::exp(p.g[h]), static_cast<double>(t - s)) * qk;
          for (int64_t b = 0; b < V; ++b) out[b] += w * p.v[(s * H + h) * V + b];
        }
        for (int64_t b = 0; b < V; ++b) out[b] *= scale;
      }
  return o;
}

const std::vector<int64_t> kLongCu = {0, 1, 8, 71, 135, 200, 330};  // lengths 1, 7, 63, 64, 65, 130

}  // namespace

TEST(SimpleGla, RecurrentMatchesClosedForm) {
  Problem p = make_problem({0, 1, 6, 13});
  for (bool with_state : {true, false}) {
    std::vector<double> o(p.out_size());
    simple_gla_recurrent_forward<double>({o.data(), nullptr}, p.inputs(with_state), p.s);
    const double err = max_rel(o, closed_form(p, with_state));
    std::printf("  recurrent vs closed form (state %d): max rel %.2e\n", with_state, err);
    EXPECT_LT(err, 1e-13);
  }
  // An explicit scale replaces dk^−0.5.
  p.scale = 0.7;
  std::vector<double> o(p.out_size());
  simple_gla_recurrent_forward<double>({o.data(), nullptr}, p.inputs(), p.s);
  EXPECT_LT(max_rel(o, closed_form(p, true)), 1e-13);
}

TEST(SimpleGla, ChunkedEqualsRecurrentInDouble) {
  const Problem p = make_problem(kLongCu);
  for (bool with_state : {true, false}) {
    std::vector<double> o_ref(p.out_size()), h_ref(p.state_size());
    simple_gla_recurrent_forward<double>({o_ref.data(), h_ref.data()}, p.inputs(with_state), p.s);
    for (int64_t chunk : {1, 5, 16, 64, 200}) {
      std::vector<double> o(p.out_size()), h(p.state_size());
      simple_gla_chunked_forward<double>({o.data(), h.data()}, p.inputs(with_state), p.s, chunk);
      const double eo = max_rel(o, o_ref), eh = max_rel(h, h_ref);
      std::printf("  chunk %3lld state %d: o max rel %.2e, final state max rel %.2e\n", static_cast<long long>(chunk),
                  with_state, eo, eh);
      EXPECT_LT(eo, 1e-13) << "chunk " << chunk;
      EXPECT_LT(eh, 1e-13) << "chunk " << chunk;
    }
  }
  // The initial state matters (so the comparison above sees it).
  std::vector<double> a(p.out_size()), b(p.out_size());
  simple_gla_chunked_forward<double>({a.data(), nullptr}, p.inputs(true), p.s);
  simple_gla_chunked_forward<double>({b.data(), nullptr}, p.inputs(false), p.s);
  EXPECT_GT(max_rel(a, b), 1e-3);
}

TEST(SimpleGla, FloatChunkedMatchesDouble) {
  const Problem p = make_problem(kLongCu);
  std::vector<double> o_ref(p.out_size()), h_ref(p.state_size());
  simple_gla_recurrent_forward<double>({o_ref.data(), h_ref.data()}, p.inputs(), p.s);
  const auto f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const auto q = f(p.q), k = f(p.k), v = f(p.v), g = f(p.g), h0 = f(p.h0);
  const SimpleGlaInputs<float> in{q.data(), k.data(), v.data(), g.data(), h0.data(), p.cu.data(), p.n_seqs(), 0.0};
  std::vector<float> o(p.out_size()), h(p.state_size()), o_rec(p.out_size());
  simple_gla_chunked_forward<float>({o.data(), h.data()}, in, p.s);
  simple_gla_recurrent_forward<float>({o_rec.data(), nullptr}, in, p.s);
  const auto d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const double eo = max_rel(d(o), o_ref), eh = max_rel(d(h), h_ref), er = max_rel(d(o_rec), o_ref);
  std::printf("  float chunked vs double: o %.2e, state %.2e; float recurrent vs double: o %.2e\n", eo, eh, er);
  EXPECT_LT(eo, 1e-6);
  EXPECT_LT(eh, 1e-6);
  EXPECT_LT(er, 1e-6);
}

TEST(SimpleGla, ContinuedPrefillEqualsOneLongerPrefill) {
  // Three sequences of 70, 9 and 130 tokens, prefilled whole vs in two parts (40 + 30, 5 + 4, 64 + 66) with the
  // first part's final state as the second part's initial state (state_out aliasing state_in), then vs
  // token-by-token decode of the last sequence.
  const Problem p = make_problem({0, 70, 79, 209});
  const int64_t H = p.s.heads, K = p.s.key_dim, V = p.s.value_dim;
  std::vector<double> o_ref(p.out_size()), h_ref(p.state_size());
  simple_gla_chunked_forward<double>({o_ref.data(), h_ref.data()}, p.inputs(), p.s);

  const int64_t split[3] = {40, 5, 64};
  // Gather the per-sequence parts into packed buffers.
  const auto gather = [&](const std::vector<double>& src, int64_t width, bool first) {
    std::vector<double> out;
    for (int64_t n = 0; n < 3; ++n) {
      const int64_t b = first ? p.cu[n] : p.cu[n] + split[n], e = first ? p.cu[n] + split[n] : p.cu[n + 1];
      out.insert(out.end(), src.begin() + b * H * width, src.begin() + e * H * width);
    }
    return out;
  };
  std::vector<double> state = p.h0, o_parts[2];
  for (int part = 0; part < 2; ++part) {
    const bool first = part == 0;
    const auto q = gather(p.q, K, first), k = gather(p.k, K, first), v = gather(p.v, V, first);
    std::vector<int64_t> cu = {0};
    for (int64_t n = 0; n < 3; ++n) cu.push_back(cu.back() + (first ? split[n] : p.cu[n + 1] - p.cu[n] - split[n]));
    const SimpleGlaShape s{cu.back(), H, K, V};
    o_parts[part].resize(static_cast<size_t>(cu.back() * H * V));
    simple_gla_chunked_forward<double>({o_parts[part].data(), state.data()},
                                       {q.data(), k.data(), v.data(), p.g.data(), state.data(), cu.data(), 3, 0.0}, s);
  }
  std::vector<double> o_split(p.out_size());
  size_t off[2] = {0, 0};
  for (int64_t n = 0; n < 3; ++n)
    for (int part = 0; part < 2; ++part) {
      const int64_t len = part == 0 ? split[n] : p.cu[n + 1] - p.cu[n] - split[n];
      const int64_t dst = (part == 0 ? p.cu[n] : p.cu[n] + split[n]) * H * V;
      std::copy_n(o_parts[part].begin() + static_cast<int64_t>(off[part]), len * H * V, o_split.begin() + dst);
      off[part] += static_cast<size_t>(len * H * V);
    }
  const double eo = max_rel(o_split, o_ref), eh = max_rel(state, h_ref);
  std::printf("  prefill in two parts vs one: o %.2e, state %.2e\n", eo, eh);
  EXPECT_LT(eo, 1e-13);
  EXPECT_LT(eh, 1e-13);

  // Token-by-token (recurrent, one token per call) over the third sequence.
  const int64_t KV = K * V;
  std::vector<double> st(p.h0.begin() + 2 * H * KV, p.h0.begin() + 3 * H * KV), o(static_cast<size_t>(H * V));
  double ed = 0.0;
  for (int64_t t = p.cu[2]; t < p.cu[3]; ++t) {
    const int64_t cu1[2] = {0, 1};
    simple_gla_recurrent_forward<double>(
        {o.data(), st.data()},
        {&p.q[t * H * K], &p.k[t * H * K], &p.v[t * H * V], p.g.data(), st.data(), cu1, 1, 0.0}, {1, H, K, V});
    for (int64_t i = 0; i < H * V; ++i) ed = std::max(ed, std::abs(o[i] - o_ref[t * H * V + i]));
  }
  std::vector<double> h_last(h_ref.begin() + 2 * H * KV, h_ref.end());
  std::printf("  token-by-token vs prefill: o max abs %.2e, state max rel %.2e\n", ed, max_rel(st, h_last));
  EXPECT_LT(ed, 1e-12);
  EXPECT_LT(max_rel(st, h_last), 1e-13);
}

TEST(SimpleGla, BackwardMatchesFiniteDifferences) {
  // Tiny shapes: H 3 (one head with λ > 1), dk 3, dv 2, sequences of 1, 3 and 5 tokens, with the initial state and a
  // final-state cotangent; then without either.
  for (bool full : {true, false}) {
    Problem p = make_problem({0, 1, 4, 9}, 3, 3, 2);
    if (!full) std::fill(p.dhT.begin(), p.dhT.end(), 0.0);
    std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dh0(p.h0.size());
    simple_gla_backward<double>({dq.data(), dk.data(), dv.data(), full ? dh0.data() : nullptr}, p.dy.data(),
                                full ? p.dhT.data() : nullptr, p.inputs(full), p.s);
    const auto loss = [&] {
      std::vector<double> o(p.out_size()), hT(p.state_size());
      simple_gla_recurrent_forward<double>({o.data(), hT.data()}, p.inputs(full), p.s);
      return test::dot(o, p.dy) + test::dot(hT, p.dhT);
    };
    std::printf(" %s:\n", full ? "with initial state and d_state_out" : "zero initial state, no d_state_out");
    test::fd_check(loss, p.q, dq, "q");
    test::fd_check(loss, p.k, dk, "k");
    test::fd_check(loss, p.v, dv, "v");
    if (full) test::fd_check(loss, p.h0, dh0, "state_in");
  }
}

TEST(SimpleGla, BackwardFloatMatchesDouble) {
  const Problem p = make_problem(kLongCu);
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dh0(p.h0.size());
  simple_gla_backward<double>({dq.data(), dk.data(), dv.data(), dh0.data()}, p.dy.data(), p.dhT.data(), p.inputs(),
                              p.s);
  const auto f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const auto q = f(p.q), k = f(p.k), v = f(p.v), g = f(p.g), h0 = f(p.h0), dy = f(p.dy), dhT = f(p.dhT);
  std::vector<float> fq(q.size()), fk(k.size()), fv(v.size()), fh(h0.size());
  simple_gla_backward<float>({fq.data(), fk.data(), fv.data(), fh.data()}, dy.data(), dhT.data(),
                             {q.data(), k.data(), v.data(), g.data(), h0.data(), p.cu.data(), p.n_seqs(), 0.0}, p.s);
  const auto d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  EXPECT_LT(max_rel(d(fq), dq), 1e-6);
  EXPECT_LT(max_rel(d(fk), dk), 1e-6);
  EXPECT_LT(max_rel(d(fv), dv), 1e-6);
  EXPECT_LT(max_rel(d(fh), dh0), 1e-6);
}

TEST(SimpleGla, AlibiSlopes) {
  // Power of two: 2^(−8(h+1)/H).  H = 8: 1/2, 1/4, ..., 1/256.  H = 16: 2^(−(h+1)/2).
  const auto s8 = alibi_slopes(8);
  ASSERT_EQ(s8.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s8[h], 1.0 / static_cast<double>(2 << h)) << h;
  const auto s16 = alibi_slopes(16);
  ASSERT_EQ(s16.size(), 16u);
  for (int h = 0; h < 16; ++h) EXPECT_NEAR(s16[h], std::pow(std::sqrt(0.5), h + 1), 1e-15) << h;
  EXPECT_DOUBLE_EQ(s16[0], 0.70710678118654752);
  // H = 12: the 8 slopes of H = 8, then slopes 0, 2, 4, 6 of H = 16: 2^−0.5, 2^−1.5, 2^−2.5, 2^−3.5.
  const auto s12 = alibi_slopes(12);
  const double r = std::sqrt(0.5);
  const std::vector<double> want12 = {0.5,    0.25,   0.125,  0.0625, 0.03125, 0.015625,
                                      0.0078125, 0.00390625, r, r / 2, r / 4, r / 8};
  ASSERT_EQ(s12.size(), want12.size());
  for (size_t i = 0; i < want12.size(); ++i) EXPECT_NEAR(s12[i], want12[i], 1e-15) << i;
  // H = 6: slopes of 4 (2^−2, 2^−4, 2^−6, 2^−8), then slopes 0, 2 of 8 (2^−1, 2^−3). H = 1: 2^−8.
  const std::vector<double> want6 = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  const auto s6 = alibi_slopes(6);
  ASSERT_EQ(s6.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(s6[i], want6[i]) << i;
  EXPECT_DOUBLE_EQ(alibi_slopes(1)[0], 1.0 / 256);
}

TEST(SimpleGla, RingLinearDecay) {
  // g = −s·(1 − (ℓ−1)/(L−1) + 1e−5), L = 20, H = 16.
  const auto g0 = ring_linear_decay(0, 20, 16), g1 = ring_linear_decay(1, 20, 16), g19 = ring_linear_decay(19, 20, 16);
  ASSERT_EQ(g0.size(), 16u);
  for (int h = 0; h < 16; ++h) {
    const double s = std::pow(2.0, -0.5 * (h + 1));
    EXPECT_NEAR(g0[h], -s * (1.0 + 1.0 / 19.0 + 1e-5), 1e-15) << h;  // layer 0: factor > 1
    EXPECT_NEAR(g1[h], -s * (1.0 + 1e-5), 1e-15) << h;
    EXPECT_NEAR(g19[h], -s * (1.0 - 18.0 / 19.0 + 1e-5), 1e-15) << h;
  }
  EXPECT_LT(g0[0], g1[0]);  // stronger decay in earlier layers
}

TEST(SimpleGla, BadArgumentsAreInputErrors) {
  Problem p = make_problem({0, 3, 7});
  std::vector<double> o(p.out_size());
  const auto expect_input_error = [&](const SimpleGlaInputs<double>& in, const SimpleGlaShape& s,
                                      const std::string& needle, int64_t chunk = kSimpleGlaChunk) {
    const bool chunk_only = chunk != kSimpleGlaChunk;  // a bad chunk concerns the chunked form only
    for (int form = 0; form < 3; ++form) {
      if (chunk_only && form != 1) continue;
      try {
        if (form == 0) simple_gla_recurrent_forward<double>({o.data(), nullptr}, in, s);
        if (form == 1) simple_gla_chunked_forward<double>({o.data(), nullptr}, in, s, chunk);
        if (form == 2) simple_gla_backward<double>({nullptr, nullptr, nullptr, nullptr}, p.dy.data(), nullptr, in, s);
        ADD_FAILURE() << "no error for " << needle << " (form " << form << ")";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    }
  };
  SimpleGlaShape s = p.s;
  s.total_tokens = -1;
  expect_input_error(p.inputs(), s, "total_tokens");
  s = p.s;
  s.heads = -2;
  expect_input_error(p.inputs(), s, "heads");
  s = p.s;
  s.key_dim = 0;
  expect_input_error(p.inputs(), s, "key_dim");
  s = p.s;
  s.value_dim = -1;
  expect_input_error(p.inputs(), s, "value_dim");
  s = p.s;
  s.total_tokens = 8;  // cu_seqlens end at 7
  expect_input_error(p.inputs(), s, "does not match total_tokens");
  auto in = p.inputs();
  in.n_seqs = -1;
  expect_input_error(in, p.s, "n_seqs");
  const int64_t bad_start[3] = {1, 3, 7}, decreasing[3] = {0, 5, 4}, short_end[3] = {0, 3, 6};
  in = p.inputs();
  in.cu_seqlens = bad_start;
  expect_input_error(in, p.s, "cu_seqlens[0]");
  in.cu_seqlens = decreasing;
  expect_input_error(in, p.s, "decreases");
  in.cu_seqlens = short_end;
  expect_input_error(in, p.s, "does not match total_tokens");
  in.cu_seqlens = nullptr;
  expect_input_error(in, p.s, "cu_seqlens is null");
  in = p.inputs();
  in.g = nullptr;
  expect_input_error(in, p.s, "g is null");
  in = p.inputs();
  in.k = nullptr;
  expect_input_error(in, p.s, "q, k or v");
  // Chunk < 1 (only the chunked form takes it).
  expect_input_error(p.inputs(), p.s, "chunk size", 0);
  EXPECT_THROW(alibi_slopes(0), Error);
  EXPECT_THROW(ring_linear_decay(0, 1, 16), Error);
  EXPECT_THROW(ring_linear_decay(20, 20, 16), Error);
  EXPECT_THROW(ring_linear_decay(-1, 20, 16), Error);
  // Valid arguments do not throw, and an empty batch (no tokens, no sequences) is valid.
  EXPECT_NO_THROW(simple_gla_chunked_forward<double>({o.data(), nullptr}, p.inputs(), p.s));
  const int64_t cu0[1] = {0};
  EXPECT_NO_THROW(simple_gla_recurrent_forward<double>(
      {nullptr, nullptr}, {nullptr, nullptr, nullptr, p.g.data(), nullptr, cu0, 0, 0.0}, {0, 3, 4, 3}));
}
