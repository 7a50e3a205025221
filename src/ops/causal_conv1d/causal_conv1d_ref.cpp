// Depthwise causal conv (+ SiLU) over packed sequences: CPU reference, forward and backward (contract in
// causal_conv1d.h). With pre = Σ_j w[c,j]·in(t−K+1+j, c) and dpre = dy · silu'(pre):
//   dx[t, c]      = Σ_j w[c, j] · dpre[t + K−1−j, c]     (only tokens t + K−1−j of t's own sequence)
//   dw[c, j]      = Σ_t dpre[t, c] · in(t − K + 1 + j, c)
//   dstate[s,c,i] = Σ_{m=0..i} w[c, i − m] · dpre[start_s + m, c]   (state slot i = position start_s − (K−1) + i)
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/causal_conv1d/causal_conv1d.h"

namespace hlm {

namespace {

using Acc = double;

void check_contract(const int64_t* cu, int64_t n_seqs, const CausalConv1dShape& s) {
  HLM_CHECK(s.total_tokens >= 0 && s.channels > 0 && s.kernel >= 1, "bad causal conv shape");
  HLM_CHECK(cu != nullptr && n_seqs >= 0, "cu_seqlens missing");
  HLM_CHECK_INPUT(cu[0] == 0 && cu[n_seqs] == s.total_tokens, "cu_seqlens must span [0, ", s.total_tokens, "]");
  for (int64_t i = 0; i < n_seqs; ++i) HLM_CHECK_INPUT(cu[i + 1] >= cu[i], "cu_seqlens must be non-decreasing");
}

// Index of the sequence holding token t (the last s with cu[s] ≤ t; empty sequences are skipped).
int64_t sequence_of(const int64_t* cu, int64_t n_seqs, int64_t t) {
  return static_cast<int64_t>(std::upper_bound(cu, cu + n_seqs + 1, t) - cu) - 1;
}

Acc sigmoid(Acc x) { return 1.0 / (1.0 + std::exp(-x)); }

// Raw input at absolute position p for a token of sequence s (start = cu[s]); p ≥ start − (K−1).
template <typename T>
Acc input_at(const T* x, const T* state_in, int64_t p, int64_t start, int64_t s, int64_t c, int64_t C, int64_t Km1) {
  if (p >= start) return static_cast<Acc>(x[p * C + c]);
  if (state_in == nullptr) return 0.0;
  return static_cast<Acc>(state_in[(s * C + c) * Km1 + (Km1 + p - start)]);
}

template <typename T>
Acc pre_activation(const T* x, const T* w, const T* state_in, int64_t t, int64_t start, int64_t s, int64_t c,
                   const CausalConv1dShape& sh) {
  const int64_t K = sh.kernel, Km1 = K - 1;
  Acc acc = 0.0;
  for (int64_t j = 0; j < K; ++j)
    acc += static_cast<Acc>(w[c * K + j]) * input_at(x, state_in, t - Km1 + j, start, s, c, sh.channels, Km1);
  return acc;
}

bool worth_threads(const CausalConv1dShape& s) { return s.total_tokens * s.channels * s.kernel > 32768; }

}  // namespace

template <typename T>
void causal_conv1d_forward(T* y, T* state_out, const T* x, const T* w, const T* state_in, const int64_t* cu,
                           int64_t n_seqs, const CausalConv1dShape& sh, bool silu) {
  check_contract(cu, n_seqs, sh);
  HLM_CHECK(w && ((y && x && y != x) || sh.total_tokens == 0), "causal conv: missing or aliased buffer");
  const int64_t C = sh.channels, Km1 = sh.kernel - 1;
#pragma omp parallel for if (worth_threads(sh))
  for (int64_t t = 0; t < sh.total_tokens; ++t) {
    const int64_t s = sequence_of(cu, n_seqs, t), start = cu[s];
    for (int64_t c = 0; c < C; ++c) {
      const Acc pre = pre_activation(x, w, state_in, t, start, s, c, sh);
      y[t * C + c] = static_cast<T>(silu ? pre * sigmoid(pre) : pre);
    }
  }
  if (state_out == nullptr || Km1 == 0) return;
#pragma omp parallel for if (n_seqs * C * Km1 > 65536)
  for (int64_t item = 0; item < n_seqs * C; ++item) {
    const int64_t s = item / C, c = item % C, start = cu[s], end = cu[s + 1];
    Acc row[64];  // the new state row, built before writing so state_out may alias state_in
    std::vector<Acc> big;
    Acc* buf = row;
    if (Km1 > 64) {
      big.resize(static_cast<size_t>(Km1));
      buf = big.data();
    }
    for (int64_t i = 0; i < Km1; ++i) buf[i] = input_at(x, state_in, end - Km1 + i, start, s, c, C, Km1);
    for (int64_t i = 0; i < Km1; ++i) state_out[item * Km1 + i] = static_cast<T>(buf[i]);
  }
}

template <typename T>
void causal_conv1d_backward(T* dx, T* dw, T* d_state_in, const T* dy, const T* x, const T* w, const T* state_in,
                            const int64_t* cu, int64_t n_seqs, const CausalConv1dShape& sh, bool silu) {
  check_contract(cu, n_seqs, sh);
  HLM_CHECK(w && ((dx && dy && x) || sh.total_tokens == 0), "causal conv backward: missing buffer");
  const int64_t T_ = sh.total_tokens, C = sh.channels, K = sh.kernel, Km1 = K - 1;
  // dpre [T, C]: gradient at the pre-activation (recomputed forward).
  std::vector<Acc> dpre(static_cast<size_t>(T_ * C));
#pragma omp parallel for if (worth_threads(sh))
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t s = sequence_of(cu, n_seqs, t), start = cu[s];
    for (int64_t c = 0; c < C; ++c) {
      Acc g = static_cast<Acc>(dy[t * C + c]);
      if (silu) {
        const Acc pre = pre_activation(x, w, state_in, t, start, s, c, sh), sg = sigmoid(pre);
        g *= sg * (1.0 + pre * (1.0 - sg));
      }
      dpre[t * C + c] = g;
    }
  }
  // dx: transposed stencil inside the sequence.
#pragma omp parallel for if (worth_threads(sh))
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t end = cu[sequence_of(cu, n_seqs, t) + 1];
    for (int64_t c = 0; c < C; ++c) {
      Acc acc = 0.0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t tp = t + Km1 - j;  // the output token that reads x[t] through tap j
        if (tp < end) acc += static_cast<Acc>(w[c * K + j]) * dpre[tp * C + c];
      }
      dx[t * C + c] = static_cast<T>(acc);
    }
  }
  if (dw != nullptr) {
#pragma omp parallel for if (worth_threads(sh))
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < K; ++j) {
        Acc acc = 0.0;
        for (int64_t s = 0; s < n_seqs; ++s)
          for (int64_t t = cu[s]; t < cu[s + 1]; ++t)
            acc += dpre[t * C + c] * input_at(x, state_in, t - Km1 + j, cu[s], s, c, C, Km1);
        dw[c * K + j] = static_cast<T>(acc);
      }
  }
  if (d_state_in != nullptr && state_in != nullptr && Km1 > 0) {
#pragma omp parallel for if (n_seqs * C * Km1 > 65536)
    for (int64_t item = 0; item < n_seqs * C; ++item) {
      const int64_t s = item / C, c = item % C, start = cu[s], len = cu[s + 1] - start;
      for (int64_t i = 0; i < Km1; ++i) {
        Acc acc = 0.0;
        for (int64_t m = 0; m <= i && m < len; ++m) acc += static_cast<Acc>(w[c * K + i - m]) * dpre[(start + m) * C + c];
        d_state_in[item * Km1 + i] = static_cast<T>(acc);
      }
    }
  }
}

template void causal_conv1d_forward<float>(float*, float*, const float*, const float*, const float*, const int64_t*,
                                           int64_t, const CausalConv1dShape&, bool);
template void causal_conv1d_forward<double>(double*, double*, const double*, const double*, const double*,
                                            const int64_t*, int64_t, const CausalConv1dShape&, bool);
template void causal_conv1d_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, const int64_t*, int64_t, const CausalConv1dShape&, bool);
template void causal_conv1d_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                             const double*, const int64_t*, int64_t, const CausalConv1dShape&, bool);

}  // namespace hlm
