// Shared cases of the gated delta rule CUDA tests (cases_gated_delta_rule.cpp: the fp32 recurrence;
// cases_gated_delta_rule_chunked.cpp: the chunked tensor-core form): the case list, problem generation, the CPU
// reference runs (recurrent, float and double), the magnitude model of the fp32 test's header comment and device
// copies of the inputs, and the two case runners both tests use (forward and backward checks against the CPU, guard
// bytes, a bit-identical backward rerun) with each implementation's launcher and tolerances.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm::cuda_test::gdn {


enum class Regime { Mixed, DecayNearOne, StrongDecay, BetaNearTwo };
inline const char* regime_name(Regime r) {
  switch (r) {
    case Regime::Mixed: return "logsigmoid-g";
    case Regime::DecayNearOne: return "g~0";
    case Regime::StrongDecay: return "g~-20";
    case Regime::BetaNearTwo: return "beta~2,parallel-k";
  }
  return "?";
}

struct GdnCase {
  std::vector<int64_t> cu;
  int64_t Hk, Hv, dk, dv;
  Regime regime;
  bool with_state;  // h0 and dhT given, hT and dh0 requested
};

inline const std::vector<GdnCase> kCases = {
    {{0, 1, 18, 82, 147, 347}, 2, 2, 64, 64, Regime::Mixed, false},
    {{0, 1, 18, 82, 147, 347}, 1, 2, 40, 72, Regime::Mixed, true},
    {{0, 65, 265}, 2, 4, 64, 64, Regime::DecayNearOne, true},
    {{0, 17, 82}, 1, 1, 40, 72, Regime::StrongDecay, true},
    {{0, 64, 129}, 1, 2, 64, 64, Regime::BetaNearTwo, false},
    {{0, 200}, 1, 1, 40, 72, Regime::BetaNearTwo, true},
    {{0, 0, 3, 3, 132}, 1, 1, 128, 128, Regime::Mixed, true},
    {{0, 1, 6}, 1, 3, 7, 5, Regime::DecayNearOne, true},
};

inline std::string name(const GdnCase& c, const char* what) {
  std::string lens;
  for (size_t i = 1; i < c.cu.size(); ++i) {
    if (i > 1) lens += ',';
    lens += std::to_string(c.cu[i] - c.cu[i - 1]);
  }
  return std::string("gated_delta_rule.") + what + " lens=" + lens + " Hk=" + std::to_string(c.Hk) + " Hv=" +
         std::to_string(c.Hv) + " dk=" + std::to_string(c.dk) + " dv=" + std::to_string(c.dv) + " " +
         regime_name(c.regime) + (c.with_state ? " h0/dhT" : "");
}

struct Problem {
  GdnShape s;
  int64_t N = 0;
  float scale = 1.0f;
  std::vector<float> q, k, v, g, beta, h0, d_o, d_hT;
  size_t state_size() const { return static_cast<size_t>(N * s.v_heads * s.value_dim * s.key_dim); }
};

inline void l2_normalise_rows(std::vector<float>& x, int64_t width) {
  for (size_t r = 0; r < x.size() / static_cast<size_t>(width); ++r) {
    double ss = 0.0;
    for (int64_t d = 0; d < width; ++d) ss += static_cast<double>(x[r * width + d]) * x[r * width + d];
    for (int64_t d = 0; d < width; ++d) x[r * width + d] = static_cast<float>(x[r * width + d] / std::sqrt(ss + 1e-6));
  }
}

inline double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline Problem make_problem(const GdnCase& c) {
  Problem p;
  const int64_t T = c.cu.back();
  p.s = {T, c.Hk, c.Hv, c.dk, c.dv};
  p.N = static_cast<int64_t>(c.cu.size()) - 1;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.dk)));
  const size_t nqk = static_cast<size_t>(T * c.Hk * c.dk), row = static_cast<size_t>(c.Hk * c.dk);
  p.q = make_values(nqk, Fill::Normal, 51);
  p.k = make_values(nqk, Fill::Normal, 52);
  if (c.regime == Regime::BetaNearTwo)  // consecutive keys nearly parallel: k_t = k_{t-1} + 0.05·noise (then L2)
    for (size_t t = 1; t < static_cast<size_t>(T); ++t)
      for (size_t i = 0; i < row; ++i) p.k[t * row + i] = p.k[(t - 1) * row + i] + 0.05f * p.k[t * row + i];
  l2_normalise_rows(p.q, c.dk);
  l2_normalise_rows(p.k, c.dk);
  p.v = make_values(static_cast<size_t>(T * c.Hv * c.dv), Fill::Normal, 53);
  const size_t ng = static_cast<size_t>(T * c.Hv);
  const std::vector<float> x = make_values(ng, Fill::Normal, 54, 2.0f), b = make_values(ng, Fill::Normal, 55);
  p.g.resize(ng);
  p.beta.resize(ng);
  for (size_t i = 0; i < ng; ++i) {
    switch (c.regime) {
      case Regime::Mixed: p.g[i] = static_cast<float>(-softplus(-x[i])); break;  // logsigmoid
      case Regime::DecayNearOne:
      case Regime::BetaNearTwo: p.g[i] = static_cast<float>(-std::exp(-4.0) * softplus(x[i])); break;
      case Regime::StrongDecay: p.g[i] = -20.0f - std::abs(x[i]); break;
    }
    p.beta[i] = static_cast<float>(c.regime == Regime::BetaNearTwo ? 2.0 * sigmoid(3.0 + 0.5 * b[i]) : sigmoid(b[i]));
  }
  if (c.with_state) {
    p.h0 = make_values(p.state_size(), Fill::Normal, 56, 0.5f);
    p.d_hT = make_values(p.state_size(), Fill::Normal, 57);
  }
  p.d_o = make_values(static_cast<size_t>(T * c.Hv * c.dv), Fill::Normal, 58);
  return p;
}

// Every output and gradient of one reference run.
template <typename S>
struct Result {
  std::vector<S> o, hT, dq, dk, dv, dg, dbeta, dh0;
};

template <typename S>
inline Result<S> run_reference(const GdnCase& c, const Problem& p) {
  const auto cast = [](const std::vector<float>& x) { return std::vector<S>(x.begin(), x.end()); };
  const auto q = cast(p.q), k = cast(p.k), v = cast(p.v), g = cast(p.g), beta = cast(p.beta), h0 = cast(p.h0),
             d_o = cast(p.d_o), d_hT = cast(p.d_hT);
  Result<S> r;
  r.o.resize(p.v.size());
  r.hT.resize(p.state_size());
  r.dq.resize(p.q.size());
  r.dk.resize(p.q.size());
  r.dv.resize(p.v.size());
  r.dg.resize(p.g.size());
  r.dbeta.resize(p.g.size());
  r.dh0.resize(c.with_state ? p.state_size() : 0);
  const GdnInputs<S> in{q.data(), k.data(), v.data(), g.data(), beta.data(), c.with_state ? h0.data() : nullptr,
                        c.cu.data(), p.N};
  gated_delta_rule_recurrent_forward<S>({r.o.data(), r.hT.data()}, in, p.s, static_cast<S>(p.scale));
  gated_delta_rule_recurrent_backward<S>({r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(), r.dbeta.data(),
                                          c.with_state ? r.dh0.data() : nullptr},
                                         {d_o.data(), c.with_state ? d_hT.data() : nullptr}, in, p.s,
                                         static_cast<S>(p.scale));
  return r;
}

using Mags = Result<double>;

inline double norm2(const double* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return std::sqrt(s);
}

// The magnitudes of the header comment, from a double recurrence per (sequence, v-head).
inline Mags magnitudes(const GdnCase& c, const Problem& p) {
  const GdnShape& s = p.s;
  const int64_t dk = s.key_dim, dv = s.value_dim, Hv = s.v_heads, Hk = s.k_heads, G = Hv / Hk, n = dk * dv;
  const double sc = p.scale;
  Mags m;
  m.o.assign(p.v.size(), 0.0);
  m.dv.assign(p.v.size(), 0.0);
  m.hT.assign(p.state_size(), 0.0);
  m.dh0.assign(c.with_state ? p.state_size() : 0, 0.0);
  m.dg.assign(p.g.size(), 0.0);
  m.dbeta.assign(p.g.size(), 0.0);
  m.dq.assign(p.q.size(), 0.0);
  m.dk.assign(p.q.size(), 0.0);
  std::vector<double> dq_v(static_cast<size_t>(s.total_tokens * Hv), 0.0), dk_v(dq_v.size(), 0.0);
  for (int64_t seq = 0; seq < p.N; ++seq)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t begin = c.cu[seq], len = c.cu[seq + 1] - begin, st = (seq * Hv + h) * n;
      const auto kvec = [&](int64_t t) { return &p.k[static_cast<size_t>((t * Hk + h / G) * dk)]; };
      const auto qvec = [&](int64_t t) { return &p.q[static_cast<size_t>((t * Hk + h / G) * dk)]; };
      const auto gb = [&](int64_t t) { return static_cast<size_t>(t * Hv + h); };
      const auto vo = [&](int64_t t) { return static_cast<size_t>((t * Hv + h) * dv); };
      // Forward: per token and row ‖Ma_a‖, |u_a|, |v_a − p_a|; SM.
      std::vector<double> M(static_cast<size_t>(n), 0.0), nMa(static_cast<size_t>(len * dv)), au(nMa.size()),
          avp(nMa.size());
      if (c.with_state)
        for (int64_t i = 0; i < n; ++i) M[static_cast<size_t>(i)] = p.h0[static_cast<size_t>(st + i)];
      double SM = 0.0;
      for (int64_t a = 0; a < dv; ++a) SM = std::max(SM, norm2(&M[static_cast<size_t>(a * dk)], dk));
      for (int64_t j = 0; j < len; ++j) {
        const int64_t t = begin + j;
        const float* k = kvec(t);
        const double alpha = std::exp(static_cast<double>(p.g[gb(t)])), beta = p.beta[gb(t)];
        for (int64_t a = 0; a < dv; ++a) {
          double* row = &M[static_cast<size_t>(a * dk)];
          double dot = 0.0;
          for (int64_t d = 0; d < dk; ++d) {
            row[d] *= alpha;
            dot += row[d] * k[d];
          }
          const size_t ja = static_cast<size_t>(j * dv + a);
          nMa[ja] = norm2(row, dk);
          avp[ja] = std::abs(p.v[vo(t) + a] - dot);
          const double u = beta * (p.v[vo(t) + a] - dot);
          au[ja] = std::abs(u);
          for (int64_t d = 0; d < dk; ++d) row[d] += u * k[d];
          SM = std::max({SM, nMa[ja], norm2(row, dk)});
        }
      }
      // Reverse: per token and row |du_a|, |dp_a|, ‖dMa_a‖; SD.
      std::vector<double> D(static_cast<size_t>(n), 0.0), adu(nMa.size()), adp(nMa.size()), ndMa(nMa.size());
      if (c.with_state)
        for (int64_t i = 0; i < n; ++i) D[static_cast<size_t>(i)] = p.d_hT[static_cast<size_t>(st + i)];
      double SD = 0.0;
      for (int64_t a = 0; a < dv; ++a) SD = std::max(SD, norm2(&D[static_cast<size_t>(a * dk)], dk));
      for (int64_t j = len - 1; j >= 0; --j) {
        const int64_t t = begin + j;
        const float *k = kvec(t), *q = qvec(t);
        const double alpha = std::exp(static_cast<double>(p.g[gb(t)])), beta = p.beta[gb(t)];
        for (int64_t a = 0; a < dv; ++a) {
          double* row = &D[static_cast<size_t>(a * dk)];
          const double dO = p.d_o[vo(t) + a];
          double du = 0.0;
          for (int64_t d = 0; d < dk; ++d) {
            row[d] += sc * dO * q[d];
            du += row[d] * k[d];
          }
          const double n_inj = norm2(row, dk), dp = -beta * du;
          for (int64_t d = 0; d < dk; ++d) row[d] += dp * k[d];
          const size_t ja = static_cast<size_t>(j * dv + a);
          adu[ja] = std::abs(du);
          adp[ja] = std::abs(dp);
          ndMa[ja] = norm2(row, dk);
          for (int64_t d = 0; d < dk; ++d) row[d] *= alpha;
          SD = std::max({SD, n_inj, ndMa[ja], norm2(row, dk)});
        }
      }
      // Output magnitudes.
      for (int64_t j = 0; j < len; ++j) {
        const int64_t t = begin + j;
        const double beta = p.beta[gb(t)], nk = norm2(std::vector<double>(kvec(t), kvec(t) + dk).data(), dk),
                     nq = norm2(std::vector<double>(qvec(t), qvec(t) + dk).data(), dk);
        double dO1 = 0.0, mdk = 0.0, mdb = 0.0, mdg = 0.0;
        for (int64_t a = 0; a < dv; ++a) {
          const size_t ja = static_cast<size_t>(j * dv + a);
          m.o[vo(t) + a] = sc * SM * nq;
          m.dv[vo(t) + a] = beta * nk * SD;
          dO1 += std::abs(static_cast<double>(p.d_o[vo(t) + a]));
          mdk += au[ja] * SD + adp[ja] * SM + 2.0 * beta * nk * SM * SD;
          mdb += SD * nk * avp[ja] + adu[ja] * SM * nk;
          mdg += SM * ndMa[ja] + nMa[ja] * SD * (1.0 + beta * nk * nk);
        }
        dq_v[gb(t)] = sc * dO1 * SM;
        dk_v[gb(t)] = mdk;
        m.dbeta[gb(t)] = mdb;
        m.dg[gb(t)] = mdg;
      }
      for (int64_t i = 0; i < n; ++i) {
        m.hT[static_cast<size_t>(st + i)] = SM;
        if (c.with_state) m.dh0[static_cast<size_t>(st + i)] = SD;
      }
    }
  for (int64_t t = 0; t < s.total_tokens; ++t)  // GVA: a k-head's dq, dk add their v-heads' magnitudes
    for (int64_t h = 0; h < Hv; ++h)
      for (int64_t d = 0; d < dk; ++d) {
        const size_t i = static_cast<size_t>((t * Hk + h / G) * dk + d);
        m.dq[i] += dq_v[static_cast<size_t>(t * Hv + h)];
        m.dk[i] += dk_v[static_cast<size_t>(t * Hv + h)];
      }
  return m;
}

// Device copies of a problem's inputs (h0 / dhT empty when the case has none).
struct DeviceProblem {
  DeviceBuffer q, k, v, g, beta, h0, d_o, d_hT, cu;
  DeviceProblem(const GdnCase& c, const Problem& p)
      : q(DeviceBuffer::from(p.q, "q")), k(DeviceBuffer::from(p.k, "k")), v(DeviceBuffer::from(p.v, "v")),
        g(DeviceBuffer::from(p.g, "g")), beta(DeviceBuffer::from(p.beta, "beta")), h0(DeviceBuffer::from(p.h0, "h0")),
        d_o(DeviceBuffer::from(p.d_o, "dO")), d_hT(DeviceBuffer::from(p.d_hT, "dhT")),
        cu(DeviceBuffer::from(c.cu, "cu_seqlens")) {}
  GdnInputs<float> inputs(const GdnCase& c, const Problem& p) const {
    return {q.as<float>(), k.as<float>(), v.as<float>(), g.as<float>(), beta.as<float>(),
            c.with_state ? h0.as<float>() : nullptr, cu.as<int64_t>(), p.N};
  }
};


// Per-output k (harness units of u = 2^-24) of one implementation on one case.
struct GdnTolerances {
  double o, state, qk, grad, dg;  // o; hT and dh0; dq and dk; dv and dbeta; dg
};

// The CPU side of a case: its problem, the float and double references and the magnitudes.
struct ReferenceRun {
  Problem p;
  Result<float> cpu;
  Result<double> ref;
  Mags mag;
  explicit ReferenceRun(const GdnCase& c)
      : p(make_problem(c)), cpu(run_reference<float>(c, p)), ref(run_reference<double>(c, p)), mag(magnitudes(c, p)) {}
};

// launch(outputs, inputs, shape, scale, workspace, workspace_bytes) queues the GPU forward; o (and hT with state) are
// checked against the references, then the guards of outputs and inputs. `label` prefixes every check name.
template <typename Launch>
void check_forward_case(const std::string& label, const GdnCase& c, const GdnTolerances& tol, size_t ws_bytes,
                        Launch launch) {
  const ReferenceRun r(c);
  const Problem& p = r.p;
  const DeviceProblem dev(c, p);
  DeviceBuffer o(p.v.size() * 4, "o"), hT(c.with_state ? p.state_size() * 4 : 0, "hT"), ws(ws_bytes, "workspace");
  launch(GdnOutputs<float>{o.as<float>(), c.with_state ? hT.as<float>() : nullptr}, dev.inputs(c, p), p.s, p.scale,
         ws.as<void>(), ws.bytes());
  EXPECT_TRUE(check_f32(label + name(c, "fwd o"), o.download<float>(), r.cpu.o, r.ref.o, r.mag.o, {tol.o}));
  if (c.with_state) {
    EXPECT_TRUE(check_f32(label + name(c, "fwd hT"), hT.download<float>(), r.cpu.hT, r.ref.hT, r.mag.hT, {tol.state}));
  }
  EXPECT_TRUE(buffers_ok({&o, &hT, &ws}, {&dev.q, &dev.k, &dev.v, &dev.g, &dev.beta, &dev.h0, &dev.cu}))
      << label << name(c, "fwd");
}

// launch(grads, output_grads, inputs, shape, scale, workspace, workspace_bytes) queues the GPU backward; every gradient
// is checked against the references, then the guards; a second run must give bit-identical dq, dk, dg (fixed
// reduction orders, no atomics).
template <typename Launch>
void check_backward_case(const std::string& label, const GdnCase& c, const GdnTolerances& tol, size_t ws_bytes,
                         Launch launch) {
  const ReferenceRun r(c);
  const Problem& p = r.p;
  const DeviceProblem dev(c, p);
  const size_t nqk = p.q.size() * 4, nv = p.v.size() * 4, ng = p.g.size() * 4;
  DeviceBuffer dq(nqk, "dq"), dk(nqk, "dk"), dv(nv, "dv"), dg(ng, "dg"), dbeta(ng, "dbeta"),
      dh0(c.with_state ? p.state_size() * 4 : 0, "dh0"), ws(ws_bytes, "workspace");
  const GdnInputGrads<float> grads{dq.as<float>(), dk.as<float>(),    dv.as<float>(),
                                   dg.as<float>(), dbeta.as<float>(), c.with_state ? dh0.as<float>() : nullptr};
  const GdnOutputGrads<float> dout{dev.d_o.as<float>(), c.with_state ? dev.d_hT.as<float>() : nullptr};
  const auto run = [&] { launch(grads, dout, dev.inputs(c, p), p.s, p.scale, ws.as<void>(), ws.bytes()); };
  run();
  const std::vector<float> dq_gpu = dq.download<float>(), dk_gpu = dk.download<float>(), dg_gpu = dg.download<float>();
  const Result<float>& cpu = r.cpu;
  const Result<double>& ref = r.ref;
  const Mags& mag = r.mag;
  EXPECT_TRUE(check_f32(label + name(c, "bwd dq"), dq_gpu, cpu.dq, ref.dq, mag.dq, {tol.qk}));
  EXPECT_TRUE(check_f32(label + name(c, "bwd dk"), dk_gpu, cpu.dk, ref.dk, mag.dk, {tol.qk}));
  EXPECT_TRUE(check_f32(label + name(c, "bwd dv"), dv.download<float>(), cpu.dv, ref.dv, mag.dv, {tol.grad}));
  EXPECT_TRUE(
      check_f32(label + name(c, "bwd dbeta"), dbeta.download<float>(), cpu.dbeta, ref.dbeta, mag.dbeta, {tol.grad}));
  EXPECT_TRUE(check_f32(label + name(c, "bwd dg"), dg_gpu, cpu.dg, ref.dg, mag.dg, {tol.dg}));
  if (c.with_state) {
    EXPECT_TRUE(check_f32(label + name(c, "bwd dh0"), dh0.download<float>(), cpu.dh0, ref.dh0, mag.dh0, {tol.state}));
  }
  EXPECT_TRUE(buffers_ok({&dq, &dk, &dv, &dg, &dbeta, &dh0, &ws},
                         {&dev.q, &dev.k, &dev.v, &dev.g, &dev.beta, &dev.h0, &dev.d_o, &dev.d_hT, &dev.cu}))
      << label << name(c, "bwd");
  run();
  EXPECT_TRUE(check_exact(label + name(c, "bwd dq rerun"), dq.download<float>(), dq_gpu));
  EXPECT_TRUE(check_exact(label + name(c, "bwd dk rerun"), dk.download<float>(), dk_gpu));
  EXPECT_TRUE(check_exact(label + name(c, "bwd dg rerun"), dg.download<float>(), dg_gpu));
}

}  // namespace hlm::cuda_test::gdn
