// Mamba-2 SSD scan, CPU reference (contract in mamba2_ssd.h): recurrent forward, chunked forward, backward.
// All sums and states in double. Work item = one (sequence, head) pair; it owns its y rows and its state.
//
// Backward of the recurrent form, per (sequence, head), a_t = exp(dt_t·A), G = dL/dS_t (starts at d_state_out):
//   G += dy_t ⊗ C_t;  dC_t += S_tᵀ·dy_t;  dx_t = dt_t·G·B_t + D·dy_t;  dB_t += dt_t·Gᵀ·x_t;  dD += dy_t·x_t
//   d(dt_t) = ⟨G, x_t ⊗ B_t⟩ + A·a_t·⟨G, S_{t−1}⟩;  dA += dt_t·a_t·⟨G, S_{t−1}⟩;  G ← a_t·G   (d_state_in = G at the end)
//   d_dt_raw = d(dt)·σ(raw + bias) (1 above the softplus threshold; 0 where dt was clamped);  dA_log = dA·A.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/mamba2_ssd/mamba2_ssd.h"

namespace hlm {

namespace {

using Acc = double;

void check_shape(const Mamba2Shape& s, int64_t n_seqs, const int64_t* cu) {
  HLM_CHECK(s.heads > 0 && s.head_dim > 0 && s.state_dim > 0 && s.groups > 0, "mamba2_ssd: empty shape");
  HLM_CHECK(s.heads % s.groups == 0, "mamba2_ssd: heads ", s.heads, " not a multiple of groups ", s.groups);
  HLM_CHECK(n_seqs >= 0 && cu != nullptr && cu[0] == 0 && cu[n_seqs] == s.total_tokens,
            "mamba2_ssd: cu_seqlens do not span the tokens");
}

double softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

// dt and d(dt)/d(raw) of one (token, head).
void dt_and_slope(double raw, double bias, const Mamba2DtLimits& limits, double& dt, double& slope) {
  const double v = raw + bias;
  dt = softplus(v);
  slope = v > 20.0 ? 1.0 : 1.0 / (1.0 + std::exp(-v));
  if (limits.apply && (dt < limits.lo || dt > limits.hi)) {
    dt = std::clamp(dt, limits.lo, limits.hi);
    slope = 0.0;
  }
}

template <typename T>
struct HeadView {
  const Mamba2Inputs<T>& in;
  const Mamba2Shape& s;
  int64_t h, g;
  const T* x(int64_t t) const { return in.x + (t * s.heads + h) * s.head_dim; }
  const T* B(int64_t t) const { return in.B + (t * s.groups + g) * s.state_dim; }
  const T* C(int64_t t) const { return in.C + (t * s.groups + g) * s.state_dim; }
  double raw(int64_t t) const { return static_cast<double>(in.dt_raw[t * s.heads + h]); }
};

template <typename T>
void load_state(std::vector<Acc>& S, const Mamba2Inputs<T>& in, const Mamba2Shape& s, int64_t seq, int64_t h) {
  const int64_t PN = s.head_dim * s.state_dim;
  if (in.state_in == nullptr) {
    std::fill(S.begin(), S.end(), 0.0);
  } else {
    const T* src = in.state_in + (seq * s.heads + h) * PN;
    for (int64_t i = 0; i < PN; ++i) S[static_cast<size_t>(i)] = static_cast<Acc>(src[i]);
  }
}

template <typename T>
void store_state(T* dst_base, const std::vector<Acc>& S, const Mamba2Shape& s, int64_t seq, int64_t h) {
  if (dst_base == nullptr) return;
  const int64_t PN = s.head_dim * s.state_dim;
  T* dst = dst_base + (seq * s.heads + h) * PN;
  for (int64_t i = 0; i < PN; ++i) dst[i] = static_cast<T>(S[static_cast<size_t>(i)]);
}

}  // namespace

double mamba2_dt(double raw, double bias, const Mamba2DtLimits& limits) {
  double dt = 0.0, slope = 0.0;
  dt_and_slope(raw, bias, limits, dt, slope);
  return dt;
}

template <typename T>
void mamba2_ssd_recurrent_forward(const Mamba2Outputs<T>& out, const Mamba2Inputs<T>& in, const Mamba2Shape& s,
                                  const Mamba2DtLimits& limits) {
  check_shape(s, in.n_seqs, in.cu_seqlens);
  const int64_t P = s.head_dim, N = s.state_dim, heads_per_group = s.heads / s.groups;
  const int64_t items = in.n_seqs * s.heads;
#pragma omp parallel for schedule(dynamic)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t seq = item / s.heads, h = item % s.heads;
    const HeadView<T> v{in, s, h, h / heads_per_group};
    const double A = -std::exp(static_cast<double>(in.A_log[h]));
    const double bias = static_cast<double>(in.dt_bias[h]), Dh = static_cast<double>(in.D[h]);
    std::vector<Acc> S(static_cast<size_t>(P * N));
    load_state(S, in, s, seq, h);
    for (int64_t t = in.cu_seqlens[seq]; t < in.cu_seqlens[seq + 1]; ++t) {
      const double dt = mamba2_dt(v.raw(t), bias, limits), a = std::exp(dt * A);
      const T *x = v.x(t), *B = v.B(t), *C = v.C(t);
      T* y = out.y + (t * s.heads + h) * P;
      for (int64_t p = 0; p < P; ++p) {
        const double xp = dt * static_cast<double>(x[p]);
        Acc* row = S.data() + p * N;
        double acc = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          row[n] = a * row[n] + xp * static_cast<double>(B[n]);
          acc += row[n] * static_cast<double>(C[n]);
        }
        y[p] = static_cast<T>(acc + Dh * static_cast<double>(x[p]));
      }
    }
    store_state(out.state_out, S, s, seq, h);
  }
}

template <typename T>
void mamba2_ssd_chunked_forward(const Mamba2Outputs<T>& out, const Mamba2Inputs<T>& in, const Mamba2Shape& s,
                                const Mamba2DtLimits& limits, int64_t chunk) {
  check_shape(s, in.n_seqs, in.cu_seqlens);
  HLM_CHECK(chunk >= 1, "mamba2_ssd: chunk size ", chunk, " < 1");
  const int64_t P = s.head_dim, N = s.state_dim, heads_per_group = s.heads / s.groups;
  const int64_t items = in.n_seqs * s.heads;
#pragma omp parallel for schedule(dynamic)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t seq = item / s.heads, h = item % s.heads;
    const HeadView<T> v{in, s, h, h / heads_per_group};
    const double A = -std::exp(static_cast<double>(in.A_log[h]));
    const double bias = static_cast<double>(in.dt_bias[h]), Dh = static_cast<double>(in.D[h]);
    std::vector<Acc> S(static_cast<size_t>(P * N)), cum(static_cast<size_t>(chunk)), dt(static_cast<size_t>(chunk));
    std::vector<Acc> CB(static_cast<size_t>(chunk * chunk));
    load_state(S, in, s, seq, h);
    const int64_t begin = in.cu_seqlens[seq], end = in.cu_seqlens[seq + 1];
    for (int64_t c0 = begin; c0 < end; c0 += chunk) {
      const int64_t L = std::min(chunk, end - c0);
      double c = 0.0;
      for (int64_t l = 0; l < L; ++l) {
        dt[static_cast<size_t>(l)] = mamba2_dt(v.raw(c0 + l), bias, limits);
        c += dt[static_cast<size_t>(l)] * A;
        cum[static_cast<size_t>(l)] = c;
      }
      // C_t·B_s for s ≤ t inside the chunk.
      for (int64_t t = 0; t < L; ++t)
        for (int64_t u = 0; u <= t; ++u) {
          const T *Ct = v.C(c0 + t), *Bu = v.B(c0 + u);
          double d = 0.0;
          for (int64_t n = 0; n < N; ++n) d += static_cast<double>(Ct[n]) * static_cast<double>(Bu[n]);
          CB[static_cast<size_t>(t * chunk + u)] = d;
        }
      // Outputs: intra-chunk + inter-chunk (from the state before the chunk) + D skip.
      for (int64_t t = 0; t < L; ++t) {
        const T* Ct = v.C(c0 + t);
        const double ct = cum[static_cast<size_t>(t)], decay_in = std::exp(ct);
        T* y = out.y + ((c0 + t) * s.heads + h) * P;
        const T* xt = v.x(c0 + t);
        for (int64_t p = 0; p < P; ++p) {
          double inter = 0.0;
          const Acc* row = S.data() + p * N;
          for (int64_t n = 0; n < N; ++n) inter += row[n] * static_cast<double>(Ct[n]);
          double intra = 0.0;
          for (int64_t u = 0; u <= t; ++u)
            intra += CB[static_cast<size_t>(t * chunk + u)] * std::exp(ct - cum[static_cast<size_t>(u)]) *
                     dt[static_cast<size_t>(u)] * static_cast<double>(v.x(c0 + u)[p]);
          y[p] = static_cast<T>(intra + decay_in * inter + Dh * static_cast<double>(xt[p]));
        }
      }
      // Chunk-end state.
      const double c_last = cum[static_cast<size_t>(L - 1)], decay_all = std::exp(c_last);
      for (Acc& e : S) e *= decay_all;
      for (int64_t u = 0; u < L; ++u) {
        const double w = std::exp(c_last - cum[static_cast<size_t>(u)]) * dt[static_cast<size_t>(u)];
        const T *xu = v.x(c0 + u), *Bu = v.B(c0 + u);
        for (int64_t p = 0; p < P; ++p) {
          const double xp = w * static_cast<double>(xu[p]);
          Acc* row = S.data() + p * N;
          for (int64_t n = 0; n < N; ++n) row[n] += xp * static_cast<double>(Bu[n]);
        }
      }
    }
    store_state(out.state_out, S, s, seq, h);
  }
}

template <typename T>
void mamba2_ssd_backward(const Mamba2Grads<T>& grads, const T* dy, const T* d_state_out, const Mamba2Inputs<T>& in,
                         const Mamba2Shape& s, const Mamba2DtLimits& limits) {
  check_shape(s, in.n_seqs, in.cu_seqlens);
  const int64_t T_ = s.total_tokens, P = s.head_dim, N = s.state_dim, PN = P * N;
  const int64_t heads_per_group = s.heads / s.groups, items = in.n_seqs * s.heads;
  // Per-head contributions, reduced into the group sums / per-head parameter sums afterwards in a fixed order.
  std::vector<Acc> dB_head(static_cast<size_t>(T_ * s.heads * N), 0.0), dC_head(dB_head.size(), 0.0);
  std::vector<Acc> dA_item(static_cast<size_t>(items), 0.0), dbias_item(dA_item.size(), 0.0),
      dD_item(dA_item.size(), 0.0);
#pragma omp parallel for schedule(dynamic)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t seq = item / s.heads, h = item % s.heads;
    const HeadView<T> v{in, s, h, h / heads_per_group};
    const double A = -std::exp(static_cast<double>(in.A_log[h]));
    const double bias = static_cast<double>(in.dt_bias[h]), Dh = static_cast<double>(in.D[h]);
    const int64_t begin = in.cu_seqlens[seq], end = in.cu_seqlens[seq + 1], L = end - begin;
    // Forward with every state kept: states[l] = S after token begin + l − 1 (states[0] = initial).
    std::vector<Acc> states(static_cast<size_t>((L + 1) * PN)), dts(static_cast<size_t>(L)),
        slopes(static_cast<size_t>(L));
    std::vector<Acc> S(static_cast<size_t>(PN));
    load_state(S, in, s, seq, h);
    std::copy(S.begin(), S.end(), states.begin());
    for (int64_t l = 0; l < L; ++l) {
      const int64_t t = begin + l;
      dt_and_slope(v.raw(t), bias, limits, dts[static_cast<size_t>(l)], slopes[static_cast<size_t>(l)]);
      const double dt = dts[static_cast<size_t>(l)], a = std::exp(dt * A);
      const T *x = v.x(t), *B = v.B(t);
      const Acc* prev = states.data() + l * PN;
      Acc* next = states.data() + (l + 1) * PN;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n)
          next[p * N + n] = a * prev[p * N + n] + dt * static_cast<double>(x[p]) * static_cast<double>(B[n]);
    }
    std::vector<Acc> G(static_cast<size_t>(PN), 0.0);
    if (d_state_out != nullptr) {
      const T* src = d_state_out + (seq * s.heads + h) * PN;
      for (int64_t i = 0; i < PN; ++i) G[static_cast<size_t>(i)] = static_cast<Acc>(src[i]);
    }
    double dA = 0.0, dbias = 0.0, dD = 0.0;
    for (int64_t l = L - 1; l >= 0; --l) {
      const int64_t t = begin + l;
      const double dt = dts[static_cast<size_t>(l)], a = std::exp(dt * A);
      const T *x = v.x(t), *B = v.B(t), *C = v.C(t);
      const T* dyt = dy + (t * s.heads + h) * P;
      const Acc* St = states.data() + (l + 1) * PN;
      const Acc* Sp = states.data() + l * PN;
      Acc* dBt = dB_head.data() + (t * s.heads + h) * N;
      Acc* dCt = dC_head.data() + (t * s.heads + h) * N;
      for (int64_t p = 0; p < P; ++p) {
        const double g = static_cast<double>(dyt[p]);
        dD += g * static_cast<double>(x[p]);
        for (int64_t n = 0; n < N; ++n) {
          G[static_cast<size_t>(p * N + n)] += g * static_cast<double>(C[n]);
          dCt[n] += St[p * N + n] * g;
        }
      }
      double d_dt = 0.0, gs = 0.0;
      for (int64_t p = 0; p < P; ++p) {
        const Acc* Gp = G.data() + p * N;
        double gb = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          gb += Gp[n] * static_cast<double>(B[n]);
          dBt[n] += dt * Gp[n] * static_cast<double>(x[p]);
          gs += Gp[n] * Sp[p * N + n];
        }
        d_dt += gb * static_cast<double>(x[p]);
        if (grads.dx) grads.dx[(t * s.heads + h) * P + p] = static_cast<T>(dt * gb + Dh * static_cast<double>(dyt[p]));
      }
      d_dt += A * a * gs;
      dA += dt * a * gs;
      const double d_raw = d_dt * slopes[static_cast<size_t>(l)];
      if (grads.d_dt_raw) grads.d_dt_raw[t * s.heads + h] = static_cast<T>(d_raw);
      dbias += d_raw;
      for (Acc& e : G) e *= a;
    }
    if (grads.d_state_in != nullptr && in.state_in != nullptr) store_state(grads.d_state_in, G, s, seq, h);
    dA_item[static_cast<size_t>(item)] = dA;
    dbias_item[static_cast<size_t>(item)] = dbias;
    dD_item[static_cast<size_t>(item)] = dD;
  }
  // Group sums over the heads of each group (increasing head), per-head sums over sequences (increasing).
  const auto reduce_groups = [&](T* dst, const std::vector<Acc>& src) {
    if (dst == nullptr) return;
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t g = 0; g < s.groups; ++g)
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0.0;
          for (int64_t j = 0; j < heads_per_group; ++j)
            acc += src[static_cast<size_t>((t * s.heads + g * heads_per_group + j) * N + n)];
          dst[(t * s.groups + g) * N + n] = static_cast<T>(acc);
        }
  };
  reduce_groups(grads.dB, dB_head);
  reduce_groups(grads.dC, dC_head);
  for (int64_t h = 0; h < s.heads; ++h) {
    double dA = 0.0, dbias = 0.0, dD = 0.0;
    for (int64_t seq = 0; seq < in.n_seqs; ++seq) {
      dA += dA_item[static_cast<size_t>(seq * s.heads + h)];
      dbias += dbias_item[static_cast<size_t>(seq * s.heads + h)];
      dD += dD_item[static_cast<size_t>(seq * s.heads + h)];
    }
    const double A = -std::exp(static_cast<double>(in.A_log[h]));
    if (grads.d_A_log) grads.d_A_log[h] = static_cast<T>(dA * A);
    if (grads.d_dt_bias) grads.d_dt_bias[h] = static_cast<T>(dbias);
    if (grads.dD) grads.dD[h] = static_cast<T>(dD);
  }
}

#define HLM_INSTANTIATE_MAMBA2(T)                                                                                 \
  template void mamba2_ssd_recurrent_forward<T>(const Mamba2Outputs<T>&, const Mamba2Inputs<T>&,               \
                                                const Mamba2Shape&, const Mamba2DtLimits&);                      \
  template void mamba2_ssd_chunked_forward<T>(const Mamba2Outputs<T>&, const Mamba2Inputs<T>&, const Mamba2Shape&, \
                                              const Mamba2DtLimits&, int64_t);                                   \
  template void mamba2_ssd_backward<T>(const Mamba2Grads<T>&, const T*, const T*, const Mamba2Inputs<T>&,        \
                                       const Mamba2Shape&, const Mamba2DtLimits&);
HLM_INSTANTIATE_MAMBA2(float)
HLM_INSTANTIATE_MAMBA2(double)
#undef HLM_INSTANTIATE_MAMBA2

}  // namespace hlm
