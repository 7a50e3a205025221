// Chunked (WY/UT) gated delta rule: the per-chunk stages of gated_delta_rule_chunk.h and the forward
// (contract in gated_delta_rule.h). Per (sequence, v-head): loop over chunks, carry the fp32 state M [dv, dk].
// Only exponents γ_i − γ_j with i ≥ j are evaluated, so e^{±γ} of a lone cumulative decay never appears.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunk.h"
#include "ops/gated_delta_rule/gated_delta_rule_internal.h"

namespace hlm {
namespace gdn_detail {

void chunk_prepare(Chunk& ch, const GdnInputs<float>& in, const GdnShape& s, int64_t t0, int64_t c, int64_t h) {
  const Index ix{s};
  const int64_t dk = s.key_dim, dv = s.value_dim;
  const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  ch.c = c;
  ch.q.resize(sz(c * dk));
  ch.k.resize(sz(c * dk));
  ch.v.resize(sz(c * dv));
  for (auto* vec : {&ch.beta, &ch.gamma, &ch.decay_in, &ch.decay_out}) vec->resize(sz(c));
  for (auto* vec : {&ch.Gam, &ch.KK, &ch.QK, &ch.L, &ch.R}) vec->assign(sz(c * c), 0.0f);
  ch.W.resize(sz(c * dk));
  ch.Ut.resize(sz(c * dv));
  ch.U.resize(sz(c * dv));

  double cum = 0.0;  // γ in double, stored fp32
  for (int64_t i = 0; i < c; ++i) {
    const int64_t t = t0 + i;
    std::copy_n(in.q + ix.qk(t, h), dk, ch.q.data() + i * dk);
    std::copy_n(in.k + ix.qk(t, h), dk, ch.k.data() + i * dk);
    std::copy_n(in.v + ix.vo(t, h), dv, ch.v.data() + i * dv);
    ch.beta[i] = in.beta[ix.gb(t, h)];
    cum += static_cast<double>(in.g[ix.gb(t, h)]);
    ch.gamma[i] = static_cast<float>(cum);
  }
  const float gamma_last = ch.gamma[c - 1];
  for (int64_t i = 0; i < c; ++i) {
    ch.decay_in[i] = std::exp(ch.gamma[i]);                // γ_i − γ_start, γ_start = 0
    ch.decay_out[i] = std::exp(gamma_last - ch.gamma[i]);  // γ_{c-1} − γ_i, i ≤ c-1
    for (int64_t j = 0; j < c; ++j) {
      ch.KK[i * c + j] = static_cast<float>(dot(ch.k.data() + i * dk, ch.k.data() + j * dk, dk));
      ch.QK[i * c + j] = static_cast<float>(dot(ch.q.data() + i * dk, ch.k.data() + j * dk, dk));
      // Exponent only for j ≤ i (non-positive when g ≤ 0); entries above the diagonal stay exactly 0.
      if (j <= i) ch.Gam[i * c + j] = std::exp(ch.gamma[i] - ch.gamma[j]);
      if (j < i) ch.L[i * c + j] = ch.beta[i] * ch.Gam[i * c + j] * ch.KK[i * c + j];
    }
  }
  // R = (I + L)^-1 by forward substitution: R_ii = 1, R_ij = −Σ_{j≤m<i} L_im R_mj.
  for (int64_t i = 0; i < c; ++i) {
    ch.R[i * c + i] = 1.0f;
    for (int64_t j = 0; j < i; ++j) {
      double acc = 0.0;
      for (int64_t m = j; m < i; ++m) acc += static_cast<double>(ch.L[i * c + m]) * ch.R[m * c + j];
      ch.R[i * c + j] = static_cast<float>(-acc);
    }
  }
  // W = R diag(β e^γ) K;  Ũ = R diag(β) V.
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t d = 0; d < dk; ++d) {
      double acc = 0.0;
      for (int64_t j = 0; j <= i; ++j)
        acc += static_cast<double>(ch.R[i * c + j]) * ch.beta[j] * ch.decay_in[j] * ch.k[j * dk + d];
      ch.W[i * dk + d] = static_cast<float>(acc);
    }
    for (int64_t a = 0; a < dv; ++a) {
      double acc = 0.0;
      for (int64_t j = 0; j <= i; ++j) acc += static_cast<double>(ch.R[i * c + j]) * ch.beta[j] * ch.v[j * dv + a];
      ch.Ut[i * dv + a] = static_cast<float>(acc);
    }
  }
}

void chunk_write_vectors(Chunk& ch, const float* M0, const GdnShape& s) {
  const int64_t dk = s.key_dim, dv = s.value_dim;
  for (int64_t i = 0; i < ch.c; ++i)
    for (int64_t a = 0; a < dv; ++a)
      ch.U[i * dv + a] = static_cast<float>(ch.Ut[i * dv + a] - dot(ch.W.data() + i * dk, M0 + a * dk, dk));
}

void chunk_advance_state(float* M, const Chunk& ch, const GdnShape& s) {
  const int64_t dk = s.key_dim, dv = s.value_dim;
  const double decay_all = ch.decay_in[ch.c - 1];
  for (int64_t a = 0; a < dv; ++a)
    for (int64_t d = 0; d < dk; ++d) {
      double acc = decay_all * M[a * dk + d];
      for (int64_t i = 0; i < ch.c; ++i)
        acc += static_cast<double>(ch.decay_out[i]) * ch.U[i * dv + a] * ch.k[i * dk + d];
      M[a * dk + d] = static_cast<float>(acc);
    }
}

}  // namespace gdn_detail

namespace {

void chunked_forward_item(const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& s, float scale,
                          int64_t chunk, int64_t seq, int64_t h, gdn_detail::Chunk& ch, std::vector<float>& M) {
  const gdn_detail::Index ix{s};
  const int64_t dk = s.key_dim, dv = s.value_dim, n = dk * dv;
  if (in.h0)
    std::copy_n(in.h0 + ix.state(seq, h), n, M.data());
  else
    std::fill(M.begin(), M.end(), 0.0f);
  const int64_t end = in.cu_seqlens[seq + 1];
  for (int64_t t0 = in.cu_seqlens[seq]; t0 < end; t0 += chunk) {
    const int64_t c = std::min(chunk, end - t0);
    gdn_detail::chunk_prepare(ch, in, s, t0, c, h);
    gdn_detail::chunk_write_vectors(ch, M.data(), s);
    // O_i = scale · (e^{γ_i} M0 q_i + Σ_{j≤i} (q_i·k_j) Γ_ij U_j), M still holds M0 here.
    for (int64_t i = 0; i < c; ++i) {
      float* o = out.o + ix.vo(t0 + i, h);
      for (int64_t a = 0; a < dv; ++a) {
        double acc = ch.decay_in[i] * gdn_detail::dot(M.data() + a * dk, ch.q.data() + i * dk, dk);
        for (int64_t j = 0; j <= i; ++j)
          acc += static_cast<double>(ch.QK[i * c + j]) * ch.Gam[i * c + j] * ch.U[j * dv + a];
        o[a] = static_cast<float>(scale * acc);
      }
    }
    gdn_detail::chunk_advance_state(M.data(), ch, s);
  }
  if (out.hT) std::copy_n(M.data(), n, out.hT + ix.state(seq, h));
}

}  // namespace

void gated_delta_rule_chunked_forward(const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& s,
                                      float scale, int64_t chunk) {
  gdn_detail::check_contract(in, s);
  HLM_CHECK(out.o != nullptr, "output o missing");
  HLM_CHECK(chunk > 0, "chunk size must be positive, got ", chunk);
  const int64_t items = gdn_detail::work_items(in.n_seqs, s);
#pragma omp parallel if (gdn_detail::worth_threads(items, s))
  {
    gdn_detail::Chunk ch;
    std::vector<float> M(static_cast<size_t>(s.key_dim * s.value_dim));
#pragma omp for schedule(dynamic)
    for (int64_t it = 0; it < items; ++it)
      chunked_forward_item(out, in, s, scale, chunk, it / s.v_heads, it % s.v_heads, ch, M);
  }
}

}  // namespace hlm
