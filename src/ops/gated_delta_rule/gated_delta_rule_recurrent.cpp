// Token-by-token gated delta rule, forward and backward (contract in gated_delta_rule.h). The plainest statement of
// the math: the reference for the chunked form and for finite-difference checks (instantiated for float and double;
// the state and all sums are double either way).
//
// Per token, state M [dv, dk]:   Ma = α M;  p = Ma k;  u = β (v − p);  M' = Ma + u kᵀ;  o = scale · M' q
// Reverse step, D = dL/dM' (starts at dhT):
//   D += scale · dO qᵀ;  dq = scale · M'ᵀ dO;  du = D k;  dk = Dᵀ u;  dβ = du·(v − p);  dv = β du;  dp = −β du;
//   dMa = D + dp kᵀ;  dk += Maᵀ dp;  dg = ⟨Ma, dMa⟩ (α = e^g);  D ← α dMa        (dh0 = D after the first token)
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gated_delta_rule_internal.h"

namespace hlm {

namespace {

using Acc = double;

template <typename T>
void load_state(Acc* M, const T* h0, int64_t n) {
  for (int64_t i = 0; i < n; ++i) M[i] = h0 ? static_cast<Acc>(h0[i]) : 0.0;
}

// One token on M [dv, dk] in place: M ← α M, then the delta write. Leaves p = Ma k in p[dv] and u in u[dv].
template <typename T>
void token_step(Acc* M, Acc* p, Acc* u, const T* k, const T* v, T g, T beta, int64_t dk, int64_t dv) {
  const Acc alpha = std::exp(static_cast<Acc>(g));
  for (int64_t a = 0; a < dv; ++a) {
    Acc* row = M + a * dk;
    Acc dot = 0.0;
    for (int64_t d = 0; d < dk; ++d) {
      row[d] *= alpha;
      dot += row[d] * static_cast<Acc>(k[d]);
    }
    p[a] = dot;
    u[a] = static_cast<Acc>(beta) * (static_cast<Acc>(v[a]) - dot);
    for (int64_t d = 0; d < dk; ++d) row[d] += u[a] * static_cast<Acc>(k[d]);
  }
}

template <typename T>
void forward_item(const GdnOutputs<T>& out, const GdnInputs<T>& in, const GdnShape& s, T scale, int64_t seq,
                  int64_t h, std::vector<Acc>& M, std::vector<Acc>& p, std::vector<Acc>& u) {
  const gdn_detail::Index ix{s};
  const int64_t dk = s.key_dim, dv = s.value_dim;
  load_state(M.data(), in.h0 ? in.h0 + ix.state(seq, h) : nullptr, dv * dk);
  for (int64_t t = in.cu_seqlens[seq]; t < in.cu_seqlens[seq + 1]; ++t) {
    const T* k = in.k + ix.qk(t, h);
    const T* q = in.q + ix.qk(t, h);
    token_step(M.data(), p.data(), u.data(), k, in.v + ix.vo(t, h), in.g[ix.gb(t, h)], in.beta[ix.gb(t, h)], dk, dv);
    T* o = out.o + ix.vo(t, h);
    for (int64_t a = 0; a < dv; ++a) {
      Acc dot = 0.0;
      for (int64_t d = 0; d < dk; ++d) dot += M[a * dk + d] * static_cast<Acc>(q[d]);
      o[a] = static_cast<T>(static_cast<Acc>(scale) * dot);
    }
  }
  if (out.hT)
    for (int64_t i = 0; i < dv * dk; ++i) out.hT[ix.state(seq, h) + i] = static_cast<T>(M[i]);
}

// Scratch of one work item in the backward.
struct BackwardScratch {
  std::vector<Acc> checkpoints;  // [n_segments, dv, dk]: state before each segment of kGdnRecurrentCheckpoint tokens
  std::vector<Acc> states;       // [segment length, dv, dk]: state before each token of the current segment
  std::vector<Acc> D, Ma, p, u, du, dp;
};

// dq_v, dk_v: per-v-head scratch [T, Hv, dk], reduced over the GVA group afterwards.
template <typename T>
void backward_item(const GdnInputGrads<T>& gr, Acc* dq_v, Acc* dk_v, const GdnOutputGrads<T>& dout,
                   const GdnInputs<T>& in, const GdnShape& s, T scale, int64_t seq, int64_t h, BackwardScratch& w) {
  const gdn_detail::Index ix{s};
  const int64_t dk = s.key_dim, dv = s.value_dim, n = dk * dv, K = kGdnRecurrentCheckpoint;
  const int64_t begin = in.cu_seqlens[seq], len = in.cu_seqlens[seq + 1] - begin;
  const int64_t n_seg = (len + K - 1) / K;
  const Acc sc = static_cast<Acc>(scale);
  w.checkpoints.resize(static_cast<size_t>(std::max<int64_t>(n_seg, 1) * n));
  w.states.resize(static_cast<size_t>(std::min(len, K) * n + n));
  for (auto* vec : {&w.D, &w.Ma}) vec->resize(static_cast<size_t>(n));
  for (auto* vec : {&w.p, &w.u, &w.du, &w.dp}) vec->resize(static_cast<size_t>(dv));

  // Sweep 1 (forward): state checkpoints at segment starts.
  Acc* M = w.states.data();  // reused as the running state here
  load_state(M, in.h0 ? in.h0 + ix.state(seq, h) : nullptr, n);
  for (int64_t i = 0; i < len; ++i) {
    const int64_t t = begin + i;
    if (i % K == 0) std::copy(M, M + n, w.checkpoints.data() + (i / K) * n);
    token_step(M, w.p.data(), w.u.data(), in.k + ix.qk(t, h), in.v + ix.vo(t, h), in.g[ix.gb(t, h)],
               in.beta[ix.gb(t, h)], dk, dv);
  }

  // Sweep 2 (reverse): D = dL/dM after the current token.
  Acc* D = w.D.data();
  load_state(D, dout.d_hT ? dout.d_hT + ix.state(seq, h) : nullptr, n);
  for (int64_t seg = n_seg - 1; seg >= 0; --seg) {
    const int64_t i0 = seg * K, seg_len = std::min(K, len - i0);
    // states[j] = state before token i0 + j; states[seg_len] is a throwaway.
    std::copy(w.checkpoints.data() + seg * n, w.checkpoints.data() + (seg + 1) * n, w.states.data());
    for (int64_t j = 0; j < seg_len - 1; ++j) {
      const int64_t t = begin + i0 + j;
      Acc* next = w.states.data() + (j + 1) * n;
      std::copy(next - n, next, next);
      token_step(next, w.p.data(), w.u.data(), in.k + ix.qk(t, h), in.v + ix.vo(t, h), in.g[ix.gb(t, h)],
                 in.beta[ix.gb(t, h)], dk, dv);
    }
    for (int64_t j = seg_len - 1; j >= 0; --j) {
      const int64_t t = begin + i0 + j;
      const T* q = in.q + ix.qk(t, h);
      const T* k = in.k + ix.qk(t, h);
      const T* v = in.v + ix.vo(t, h);
      const T* dO = dout.d_o + ix.vo(t, h);
      const Acc alpha = std::exp(static_cast<Acc>(in.g[ix.gb(t, h)]));
      const Acc beta = static_cast<Acc>(in.beta[ix.gb(t, h)]);
      const Acc* Mprev = w.states.data() + j * n;
      Acc *Ma = w.Ma.data(), *p = w.p.data(), *u = w.u.data(), *du = w.du.data(), *dp = w.dp.data();
      for (int64_t a = 0; a < dv; ++a) {  // recompute Ma, p, u
        Acc dot = 0.0;
        for (int64_t d = 0; d < dk; ++d) {
          Ma[a * dk + d] = alpha * Mprev[a * dk + d];
          dot += Ma[a * dk + d] * static_cast<Acc>(k[d]);
        }
        p[a] = dot;
        u[a] = beta * (static_cast<Acc>(v[a]) - dot);
      }
      Acc* dq = dq_v + ix.qk_per_v(t, h);
      Acc* dkt = dk_v + ix.qk_per_v(t, h);
      Acc u_dot_dO = 0.0, dbeta = 0.0;
      for (int64_t a = 0; a < dv; ++a) u_dot_dO += u[a] * static_cast<Acc>(dO[a]);
      for (int64_t d = 0; d < dk; ++d) {  // dq = scale · (Ma + u kᵀ)ᵀ dO
        Acc dot = 0.0;
        for (int64_t a = 0; a < dv; ++a) dot += Ma[a * dk + d] * static_cast<Acc>(dO[a]);
        dq[d] = sc * (dot + static_cast<Acc>(k[d]) * u_dot_dO);
      }
      for (int64_t a = 0; a < dv; ++a) {  // D += scale dO qᵀ; du = D k
        Acc dot = 0.0;
        for (int64_t d = 0; d < dk; ++d) {
          D[a * dk + d] += sc * static_cast<Acc>(dO[a]) * static_cast<Acc>(q[d]);
          dot += D[a * dk + d] * static_cast<Acc>(k[d]);
        }
        du[a] = dot;
        dbeta += dot * (static_cast<Acc>(v[a]) - p[a]);
        gr.dv[ix.vo(t, h) + a] = static_cast<T>(beta * dot);
        dp[a] = -beta * dot;
      }
      for (int64_t d = 0; d < dk; ++d) {  // dk = Dᵀ u + Maᵀ dp
        Acc dot = 0.0;
        for (int64_t a = 0; a < dv; ++a) dot += D[a * dk + d] * u[a] + Ma[a * dk + d] * dp[a];
        dkt[d] = dot;
      }
      Acc dg = 0.0;
      for (int64_t a = 0; a < dv; ++a)  // dMa = D + dp kᵀ; dg = ⟨Ma, dMa⟩; D ← α dMa
        for (int64_t d = 0; d < dk; ++d) {
          const Acc dMa = D[a * dk + d] + dp[a] * static_cast<Acc>(k[d]);
          dg += Ma[a * dk + d] * dMa;
          D[a * dk + d] = alpha * dMa;
        }
      gr.dg[ix.gb(t, h)] = static_cast<T>(dg);
      gr.dbeta[ix.gb(t, h)] = static_cast<T>(dbeta);
    }
  }
  if (gr.dh0)
    for (int64_t i = 0; i < n; ++i) gr.dh0[ix.state(seq, h) + i] = static_cast<T>(D[i]);
}

}  // namespace

template <typename T>
void gated_delta_rule_recurrent_forward(const GdnOutputs<T>& out, const GdnInputs<T>& in, const GdnShape& s,
                                        T scale) {
  gdn_detail::check_contract(in, s);
  HLM_CHECK(out.o != nullptr, "output o missing");
  const int64_t items = gdn_detail::work_items(in.n_seqs, s);
#pragma omp parallel if (gdn_detail::worth_threads(items, s))
  {
    std::vector<Acc> M(static_cast<size_t>(s.value_dim * s.key_dim)), p(static_cast<size_t>(s.value_dim)), u(p);
#pragma omp for schedule(dynamic)
    for (int64_t it = 0; it < items; ++it) forward_item(out, in, s, scale, it / s.v_heads, it % s.v_heads, M, p, u);
  }
}

template <typename T>
void gated_delta_rule_recurrent_backward(const GdnInputGrads<T>& gr, const GdnOutputGrads<T>& dout,
                                         const GdnInputs<T>& in, const GdnShape& s, T scale) {
  gdn_detail::check_contract(in, s);
  HLM_CHECK(gr.dq && gr.dk && gr.dv && gr.dg && gr.dbeta && dout.d_o, "missing GDN gradient buffer");
  const size_t per_v = static_cast<size_t>(s.total_tokens * s.v_heads * s.key_dim);
  std::vector<Acc> dq_v(per_v, 0.0), dk_v(per_v, 0.0);
  const int64_t items = gdn_detail::work_items(in.n_seqs, s);
#pragma omp parallel if (gdn_detail::worth_threads(items, s))
  {
    BackwardScratch w;
#pragma omp for schedule(dynamic)
    for (int64_t it = 0; it < items; ++it)
      backward_item(gr, dq_v.data(), dk_v.data(), dout, in, s, scale, it / s.v_heads, it % s.v_heads, w);
  }
  gdn_detail::reduce_gva(gr.dq, dq_v.data(), s);
  gdn_detail::reduce_gva(gr.dk, dk_v.data(), s);
}

template void gated_delta_rule_recurrent_forward<float>(const GdnOutputs<float>&, const GdnInputs<float>&,
                                                        const GdnShape&, float);
template void gated_delta_rule_recurrent_forward<double>(const GdnOutputs<double>&, const GdnInputs<double>&,
                                                         const GdnShape&, double);
template void gated_delta_rule_recurrent_backward<float>(const GdnInputGrads<float>&, const GdnOutputGrads<float>&,
                                                         const GdnInputs<float>&, const GdnShape&, float);
template void gated_delta_rule_recurrent_backward<double>(const GdnInputGrads<double>&,
                                                          const GdnOutputGrads<double>&, const GdnInputs<double>&,
                                                          const GdnShape&, double);

}  // namespace hlm
