// Backward of the chunked gated delta rule (gdn.md §3), per (sequence, v-head):
//   pass 1 (forward over chunks): recompute the state M0 entering every chunk (stored, [n_chunks, dv, dk] fp32);
//   pass 2 (reverse over chunks): with D = dL/dM leaving the chunk (dhT for the last one),
//     (a) dU_j = scale Σ_{i≥j} (q_i·k_j) Γ_ij dO_i + e^{γ_c − γ_j} D k_j
//     (c) dq_i = scale (e^{γ_i} M0ᵀ dO_i + Σ_{j≤i} (dO_i·U_j) Γ_ij k_j)
//     (d) dk_j = scale Σ_{i≥j} (dO_i·U_j) Γ_ij q_i + e^{γ_c − γ_j} Dᵀ U_j
//     (e) dW = −dU M0;  X = Rᵀ dW;  Y = Rᵀ dŨ (dŨ = dU)
//     (g) dv_i = β_i y_i;  dβ_i = y_i·v_i + e^{γ_i} x_i·k_i;  dk_i += β_i e^{γ_i} x_i;
//         E = −(X Wᵀ + Y Ũᵀ) strictly below the diagonal (= −Rᵀ dR Rᵀ), through L_ij = β_i Γ_ij k_i·k_j
//     (f) dγ from every e^{γ} factor: output, state decay, W and L (differences add to i, subtract from j)
//     (b) D ← e^{γ_c} D + scale Σ_i e^{γ_i} dO_i q_iᵀ − Σ_i dU_i W_iᵀ   (dh0 = D after the first chunk)
//     (h) dg_t = Σ_{i ≥ t in the chunk} dγ_i
// Here γ_c is γ of the chunk's last position. dq/dk go to per-v-head scratch, summed over GVA groups afterwards.
#include <algorithm>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunk.h"
#include "ops/gated_delta_rule/gated_delta_rule_internal.h"

namespace hlm {

namespace {

using gdn_detail::dot;

struct ChunkGrads {
  std::vector<double> dq, dk;      // [c, dk]
  std::vector<float> dU, dW, X, Y;  // [c, dv], [c, dk], [c, dk], [c, dv]
  std::vector<double> dgamma;      // [c]
  std::vector<float> states, D, Dnew;
};

// Gradients of one chunk; D [dv, dk] = dL/dM leaving the chunk on entry, dL/dM0 on return.
void chunk_backward(const GdnInputGrads<float>& gr, float* dq_v, float* dk_v, const float* dO_rows,
                    const gdn_detail::Chunk& ch, const float* M0, ChunkGrads& w, const GdnShape& s, float scale,
                    int64_t t0, int64_t h) {
  const gdn_detail::Index ix{s};
  const int64_t c = ch.c, dk = s.key_dim, dv = s.value_dim, HvDv = s.v_heads * dv;
  const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  const auto dO = [&](int64_t i) { return dO_rows + i * HvDv; };  // row i of dO for this head
  w.dq.assign(sz(c * dk), 0.0);
  w.dk.assign(sz(c * dk), 0.0);
  w.dgamma.assign(sz(c), 0.0);
  w.dU.resize(sz(c * dv));
  w.dW.resize(sz(c * dk));
  w.X.resize(sz(c * dk));
  w.Y.resize(sz(c * dv));
  const float* D = w.D.data();
  const int64_t last = c - 1;

  // (a) dU, (c)/(d) output and state paths of dq, dk, and the matching dγ terms.
  for (int64_t j = 0; j < c; ++j)
    for (int64_t a = 0; a < dv; ++a) {
      double acc = ch.decay_out[j] * dot(D + a * dk, ch.k.data() + j * dk, dk);
      for (int64_t i = j; i < c; ++i) acc += scale * static_cast<double>(ch.QK[i * c + j]) * ch.Gam[i * c + j] * dO(i)[a];
      w.dU[j * dv + a] = static_cast<float>(acc);
    }
  for (int64_t i = 0; i < c; ++i) {
    // e^{γ_i} M0 q_i term: dq_i += scale e^{γ_i} M0ᵀ dO_i, dγ_i += scale e^{γ_i} dO_i·(M0 q_i).
    for (int64_t a = 0; a < dv; ++a) {
      const double coef = scale * static_cast<double>(ch.decay_in[i]) * dO(i)[a];
      for (int64_t d = 0; d < dk; ++d) w.dq[i * dk + d] += coef * M0[a * dk + d];
    }
    for (int64_t d = 0; d < dk; ++d) w.dgamma[i] += w.dq[i * dk + d] * ch.q[i * dk + d];
    for (int64_t j = 0; j <= i; ++j) {  // Γ_ij (q_i·k_j) U_j term
      const double dA = scale * dot(dO(i), ch.U.data() + j * dv, dv) * ch.Gam[i * c + j];  // dL/d(q_i·k_j)
      for (int64_t d = 0; d < dk; ++d) {
        w.dq[i * dk + d] += dA * ch.k[j * dk + d];
        w.dk[j * dk + d] += dA * ch.q[i * dk + d];
      }
      const double dexp = dA * ch.QK[i * c + j];  // dL/dΓ_ij · Γ_ij
      w.dgamma[i] += dexp;
      w.dgamma[j] -= dexp;
    }
    // State path: M_C ∋ e^{γ_c − γ_i} U_i k_iᵀ  →  dk_i += e^{γ_c − γ_i} Dᵀ U_i, dγ_c += B_i, dγ_i −= B_i.
    double B = 0.0;
    for (int64_t d = 0; d < dk; ++d) {
      double acc = 0.0;
      for (int64_t a = 0; a < dv; ++a) acc += static_cast<double>(D[a * dk + d]) * ch.U[i * dv + a];
      acc *= ch.decay_out[i];
      w.dk[i * dk + d] += acc;
      B += acc * ch.k[i * dk + d];
    }
    w.dgamma[last] += B;
    w.dgamma[i] -= B;
  }
  w.dgamma[last] += ch.decay_in[last] * dot(M0, D, dk * dv);  // e^{γ_c} M0 term

  // (e) dW = −dU M0, then X = Rᵀ dW, Y = Rᵀ dU (R unit lower triangular: x_j = Σ_{i≥j} R_ij dW_i).
  for (int64_t i = 0; i < c; ++i)
    for (int64_t d = 0; d < dk; ++d) {
      double acc = 0.0;
      for (int64_t a = 0; a < dv; ++a) acc += static_cast<double>(w.dU[i * dv + a]) * M0[a * dk + d];
      w.dW[i * dk + d] = static_cast<float>(-acc);
    }
  for (int64_t j = 0; j < c; ++j) {
    for (int64_t d = 0; d < dk; ++d) {
      double acc = 0.0;
      for (int64_t i = j; i < c; ++i) acc += static_cast<double>(ch.R[i * c + j]) * w.dW[i * dk + d];
      w.X[j * dk + d] = static_cast<float>(acc);
    }
    for (int64_t a = 0; a < dv; ++a) {
      double acc = 0.0;
      for (int64_t i = j; i < c; ++i) acc += static_cast<double>(ch.R[i * c + j]) * w.dU[i * dv + a];
      w.Y[j * dv + a] = static_cast<float>(acc);
    }
  }
  // (g) WY part: W = R diag(βe^γ) K, Ũ = R diag(β) V, and L through E.
  for (int64_t i = 0; i < c; ++i) {
    const int64_t t = t0 + i;
    const double beta = ch.beta[i], ein = ch.decay_in[i];
    for (int64_t a = 0; a < dv; ++a) gr.dv[ix.vo(t, h) + a] = static_cast<float>(beta * w.Y[i * dv + a]);
    const double xk = dot(w.X.data() + i * dk, ch.k.data() + i * dk, dk);
    double dbeta = dot(w.Y.data() + i * dv, ch.v.data() + i * dv, dv) + ein * xk;
    w.dgamma[i] += beta * ein * xk;
    for (int64_t d = 0; d < dk; ++d) w.dk[i * dk + d] += beta * ein * w.X[i * dk + d];
    for (int64_t j = 0; j < i; ++j) {
      const double E = -(dot(w.X.data() + i * dk, ch.W.data() + j * dk, dk) +
                         dot(w.Y.data() + i * dv, ch.Ut.data() + j * dv, dv));
      const double EG = E * ch.Gam[i * c + j];
      dbeta += EG * ch.KK[i * c + j];
      for (int64_t d = 0; d < dk; ++d) {
        w.dk[i * dk + d] += beta * EG * ch.k[j * dk + d];
        w.dk[j * dk + d] += beta * EG * ch.k[i * dk + d];
      }
      const double EL = E * ch.L[i * c + j];
      w.dgamma[i] += EL;
      w.dgamma[j] -= EL;
    }
    gr.dbeta[ix.gb(t, h)] = static_cast<float>(dbeta);
  }
  // (h) dg = reverse cumsum of dγ within the chunk; dq, dk to the per-v-head scratch.
  double run = 0.0;
  for (int64_t i = last; i >= 0; --i) {
    run += w.dgamma[i];
    gr.dg[ix.gb(t0 + i, h)] = static_cast<float>(run);
  }
  for (int64_t i = 0; i < c; ++i)
    for (int64_t d = 0; d < dk; ++d) {
      dq_v[ix.qk_per_v(t0 + i, h) + d] = static_cast<float>(w.dq[i * dk + d]);
      dk_v[ix.qk_per_v(t0 + i, h) + d] = static_cast<float>(w.dk[i * dk + d]);
    }
  // (b) D ← e^{γ_c} D + scale Σ_i e^{γ_i} dO_i q_iᵀ − Σ_i dU_i W_iᵀ.
  for (int64_t a = 0; a < dv; ++a)
    for (int64_t d = 0; d < dk; ++d) {
      double acc = static_cast<double>(ch.decay_in[last]) * D[a * dk + d];
      for (int64_t i = 0; i < c; ++i)
        acc += scale * static_cast<double>(ch.decay_in[i]) * dO(i)[a] * ch.q[i * dk + d] -
               static_cast<double>(w.dU[i * dv + a]) * ch.W[i * dk + d];
      w.Dnew[a * dk + d] = static_cast<float>(acc);
    }
  std::swap(w.D, w.Dnew);
}

void chunked_backward_item(const GdnInputGrads<float>& gr, float* dq_v, float* dk_v, const GdnOutputGrads<float>& dout,
                           const GdnInputs<float>& in, const GdnShape& s, float scale, int64_t chunk, int64_t seq,
                           int64_t h, gdn_detail::Chunk& ch, ChunkGrads& w) {
  const gdn_detail::Index ix{s};
  const int64_t n = s.key_dim * s.value_dim;
  const int64_t begin = in.cu_seqlens[seq], end = in.cu_seqlens[seq + 1];
  const int64_t n_chunks = (end - begin + chunk - 1) / chunk;
  // Pass 1: states[c] = M entering chunk c; states[n_chunks] = final state (unused).
  w.states.resize(static_cast<size_t>((n_chunks + 1) * n));
  if (in.h0)
    std::copy_n(in.h0 + ix.state(seq, h), n, w.states.data());
  else
    std::fill_n(w.states.data(), n, 0.0f);
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    const int64_t t0 = begin + ci * chunk;
    gdn_detail::chunk_prepare(ch, in, s, t0, std::min(chunk, end - t0), h);
    float* M = w.states.data() + (ci + 1) * n;
    std::copy_n(M - n, n, M);
    gdn_detail::chunk_write_vectors(ch, M - n, s);
    gdn_detail::chunk_advance_state(M, ch, s);
  }
  // Pass 2: reverse over chunks.
  w.D.resize(static_cast<size_t>(n));
  w.Dnew.resize(static_cast<size_t>(n));
  if (dout.d_hT)
    std::copy_n(dout.d_hT + ix.state(seq, h), n, w.D.data());
  else
    std::fill(w.D.begin(), w.D.end(), 0.0f);
  for (int64_t ci = n_chunks - 1; ci >= 0; --ci) {
    const int64_t t0 = begin + ci * chunk;
    const float* M0 = w.states.data() + ci * n;
    gdn_detail::chunk_prepare(ch, in, s, t0, std::min(chunk, end - t0), h);
    gdn_detail::chunk_write_vectors(ch, M0, s);
    chunk_backward(gr, dq_v, dk_v, dout.d_o + ix.vo(t0, h), ch, M0, w, s, scale, t0, h);
  }
  if (gr.dh0) std::copy_n(w.D.data(), n, gr.dh0 + ix.state(seq, h));
}

}  // namespace

void gated_delta_rule_chunked_backward(const GdnInputGrads<float>& gr, const GdnOutputGrads<float>& dout,
                                       const GdnInputs<float>& in, const GdnShape& s, float scale, int64_t chunk) {
  gdn_detail::check_contract(in, s);
  HLM_CHECK(gr.dq && gr.dk && gr.dv && gr.dg && gr.dbeta && dout.d_o, "missing GDN gradient buffer");
  HLM_CHECK(chunk > 0, "chunk size must be positive, got ", chunk);
  const size_t per_v = static_cast<size_t>(s.total_tokens * s.v_heads * s.key_dim);
  std::vector<float> dq_v(per_v, 0.0f), dk_v(per_v, 0.0f);
  const int64_t items = gdn_detail::work_items(in.n_seqs, s);
#pragma omp parallel if (gdn_detail::worth_threads(items, s))
  {
    gdn_detail::Chunk ch;
    ChunkGrads w;
#pragma omp for schedule(dynamic)
    for (int64_t it = 0; it < items; ++it)
      chunked_backward_item(gr, dq_v.data(), dk_v.data(), dout, in, s, scale, chunk, it / s.v_heads,
                            it % s.v_heads, ch, w);
  }
  gdn_detail::reduce_gva(gr.dq, dq_v.data(), s);
  gdn_detail::reduce_gva(gr.dk, dk_v.data(), s);
}

}  // namespace hlm
