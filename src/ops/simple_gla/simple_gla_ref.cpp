// Simple GLA (Lightning Attention-2), CPU reference (contract in simple_gla.h): recurrent forward, chunked forward,
// backward by the reverse recurrence, ALiBi slopes and the Ring decay. All sums and states in double.
// Work item = one (sequence, head) pair; it owns its output rows and its state.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/simple_gla/simple_gla.h"

namespace hlm {

namespace {

using Acc = double;

template <typename T>
void check_args(const SimpleGlaInputs<T>& in, const SimpleGlaShape& s) {
  HLM_CHECK_INPUT(s.total_tokens >= 0, "simple_gla: total_tokens ", s.total_tokens, " < 0");
  HLM_CHECK_INPUT(s.heads > 0, "simple_gla: heads ", s.heads, " must be > 0");
  HLM_CHECK_INPUT(s.key_dim > 0, "simple_gla: key_dim ", s.key_dim, " must be > 0");
  HLM_CHECK_INPUT(s.value_dim > 0, "simple_gla: value_dim ", s.value_dim, " must be > 0");
  HLM_CHECK_INPUT(in.n_seqs >= 0, "simple_gla: n_seqs ", in.n_seqs, " < 0");
  HLM_CHECK_INPUT(in.cu_seqlens != nullptr, "simple_gla: cu_seqlens is null");
  HLM_CHECK_INPUT(in.cu_seqlens[0] == 0, "simple_gla: cu_seqlens[0] = ", in.cu_seqlens[0], ", expected 0");
  for (int64_t i = 0; i < in.n_seqs; ++i)
    HLM_CHECK_INPUT(in.cu_seqlens[i + 1] >= in.cu_seqlens[i], "simple_gla: cu_seqlens decreases at ", i + 1, " (",
                    in.cu_seqlens[i], " -> ", in.cu_seqlens[i + 1], ")");
  HLM_CHECK_INPUT(in.cu_seqlens[in.n_seqs] == s.total_tokens, "simple_gla: cu_seqlens[", in.n_seqs,
                  "] = ", in.cu_seqlens[in.n_seqs], " does not match total_tokens ", s.total_tokens);
  HLM_CHECK_INPUT(in.g != nullptr, "simple_gla: g is null");
  HLM_CHECK_INPUT(s.total_tokens == 0 || (in.q != nullptr && in.k != nullptr && in.v != nullptr),
                  "simple_gla: q, k or v is null");
  HLM_CHECK_INPUT(std::isfinite(in.scale), "simple_gla: scale is not finite");
}

template <typename T>
double scale_of(const SimpleGlaInputs<T>& in, const SimpleGlaShape& s) {
  return in.scale != 0.0 ? in.scale : 1.0 / std::sqrt(static_cast<double>(s.key_dim));
}

template <typename T>
struct HeadView {
  const SimpleGlaInputs<T>& in;
  const SimpleGlaShape& s;
  int64_t h;
  const T* q(int64_t t) const { return in.q + (t * s.heads + h) * s.key_dim; }
  const T* k(int64_t t) const { return in.k + (t * s.heads + h) * s.key_dim; }
  const T* v(int64_t t) const { return in.v + (t * s.heads + h) * s.value_dim; }
  size_t kv_row(int64_t t) const { return static_cast<size_t>((t * s.heads + h) * s.value_dim); }
  size_t kk_row(int64_t t) const { return static_cast<size_t>((t * s.heads + h) * s.key_dim); }
};

template <typename T>
void load_state(std::vector<Acc>& S, const T* base, const SimpleGlaShape& s, int64_t seq, int64_t h) {
  const int64_t KV = s.key_dim * s.value_dim;
  if (base == nullptr) {
    std::fill(S.begin(), S.end(), 0.0);
    return;
  }
  const T* src = base + (seq * s.heads + h) * KV;
  for (int64_t i = 0; i < KV; ++i) S[static_cast<size_t>(i)] = static_cast<Acc>(src[i]);
}

template <typename T>
void store_state(T* base, const std::vector<Acc>& S, const SimpleGlaShape& s, int64_t seq, int64_t h) {
  if (base == nullptr) return;
  const int64_t KV = s.key_dim * s.value_dim;
  T* dst = base + (seq * s.heads + h) * KV;
  for (int64_t i = 0; i < KV; ++i) dst[i] = static_cast<T>(S[static_cast<size_t>(i)]);
}

// Every item's state_in is read before the item writes its state_out, and items touch disjoint (seq, h) blocks, so
// state_out may alias state_in.

}  // namespace

template <typename T>
void simple_gla_recurrent_forward(const SimpleGlaOutputs<T>& out, const SimpleGlaInputs<T>& in,
                                  const SimpleGlaShape& s) {
  check_args(in, s);
  HLM_CHECK_INPUT(s.total_tokens == 0 || out.o != nullptr, "simple_gla: o is null");
  const int64_t K = s.key_dim, V = s.value_dim, items = in.n_seqs * s.heads;
  const double scale = scale_of(in, s);
#pragma omp parallel for schedule(dynamic)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t seq = item / s.heads, h = item % s.heads;
    const HeadView<T> hv{in, s, h};
    const double lambda = std::exp(static_cast<double>(in.g[h]));
    std::vector<Acc> S(static_cast<size_t>(K * V)), o(static_cast<size_t>(V));
    load_state(S, in.state_in, s, seq, h);
    for (int64_t t = in.cu_seqlens[seq]; t < in.cu_seqlens[seq + 1]; ++t) {
      const T *q = hv.q(t), *k = hv.k(t), *v = hv.v(t);
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t a = 0; a < K; ++a) {
        Acc* row = S.data() + a * V;
        const double ka = static_cast<double>(k[a]), qa = static_cast<double>(q[a]);
        for (int64_t b = 0; b < V; ++b) {
          row[b] = lambda * row[b] + ka * static_cast<double>(v[b]);
          o[static_cast<size_t>(b)] += qa * row[b];
        }
      }
      T* orow = out.o + hv.kv_row(t);
      for (int64_t b = 0; b < V; ++b) orow[b] = static_cast<T>(scale * o[static_cast<size_t>(b)]);
    }
    store_state(out.state_out, S, s, seq, h);
  }
}

template <typename T>
void simple_gla_chunked_forward(const SimpleGlaOutputs<T>& out, const SimpleGlaInputs<T>& in, const SimpleGlaShape& s,
                                int64_t chunk) {
  check_args(in, s);
  HLM_CHECK_INPUT(chunk >= 1, "simple_gla: chunk size ", chunk, " < 1");
  HLM_CHECK_INPUT(s.total_tokens == 0 || out.o != nullptr, "simple_gla: o is null");
  const int64_t K = s.key_dim, V = s.value_dim, items = in.n_seqs * s.heads;
  const double scale = scale_of(in, s);
#pragma omp parallel for schedule(dynamic)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t seq = item / s.heads, h = item % s.heads;
    const HeadView<T> hv{in, s, h};
    const double g = static_cast<double>(in.g[h]);
    // pw[m] = λ^m for m = 0..chunk: the decay matrix is D_ij = pw[i − j] (j ≤ i).
    std::vector<double> pw(static_cast<size_t>(chunk + 1));
    for (int64_t m = 0; m <= chunk; ++m) pw[static_cast<size_t>(m)] = std::exp(g * static_cast<double>(m));
    std::vector<Acc> S(static_cast<size_t>(K * V)), S_next(static_cast<size_t>(K * V)), o(static_cast<size_t>(V));
    load_state(S, in.state_in, s, seq, h);
    const int64_t begin = in.cu_seqlens[seq], end = in.cu_seqlens[seq + 1];
    for (int64_t c0 = begin; c0 < end; c0 += chunk) {
      const int64_t n = std::min(chunk, end - c0);
      // Outputs: inter-chunk term from S_prev, intra-chunk term (q_i·k_j)·D_ij·v_j.
      for (int64_t i = 0; i < n; ++i) {
        const T* q = hv.q(c0 + i);
        const double inter = pw[static_cast<size_t>(i + 1)];
        for (int64_t b = 0; b < V; ++b) {
          double acc = 0.0;
          for (int64_t a = 0; a < K; ++a) acc += static_cast<double>(q[a]) * S[static_cast<size_t>(a * V + b)];
          o[static_cast<size_t>(b)] = inter * acc;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const T *k = hv.k(c0 + j), *v = hv.v(c0 + j);
          double qk = 0.0;
          for (int64_t a = 0; a < K; ++a) qk += static_cast<double>(q[a]) * static_cast<double>(k[a]);
          const double w = qk * pw[static_cast<size_t>(i - j)];
          for (int64_t b = 0; b < V; ++b) o[static_cast<size_t>(b)] += w * static_cast<double>(v[b]);
        }
        T* orow = out.o + hv.kv_row(c0 + i);
        for (int64_t b = 0; b < V; ++b) orow[b] = static_cast<T>(scale * o[static_cast<size_t>(b)]);
      }
      // State: S_end = λ^n·S_prev + Σ_j λ^{n−1−j} k_jᵀ v_j.
      for (size_t x = 0; x < S.size(); ++x) S_next[x] = pw[static_cast<size_t>(n)] * S[x];
      for (int64_t j = 0; j < n; ++j) {
        const T *k = hv.k(c0 + j), *v = hv.v(c0 + j);
        const double w = pw[static_cast<size_t>(n - 1 - j)];
        for (int64_t a = 0; a < K; ++a) {
          const double ka = w * static_cast<double>(k[a]);
          for (int64_t b = 0; b < V; ++b) S_next[static_cast<size_t>(a * V + b)] += ka * static_cast<double>(v[b]);
        }
      }
      S.swap(S_next);
    }
    store_state(out.state_out, S, s, seq, h);
  }
}

template <typename T>
void simple_gla_backward(const SimpleGlaGrads<T>& grads, const T* d_out, const T* d_state_out,
                         const SimpleGlaInputs<T>& in, const SimpleGlaShape& s) {
  check_args(in, s);
  HLM_CHECK_INPUT(s.total_tokens == 0 || d_out != nullptr, "simple_gla: d_out is null");
  const int64_t K = s.key_dim, V = s.value_dim, items = in.n_seqs * s.heads;
  const double scale = scale_of(in, s);
#pragma omp parallel for schedule(dynamic)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t seq = item / s.heads, h = item % s.heads;
    const HeadView<T> hv{in, s, h};
    const double lambda = std::exp(static_cast<double>(in.g[h]));
    const int64_t begin = in.cu_seqlens[seq], end = in.cu_seqlens[seq + 1];
    std::vector<Acc> M(static_cast<size_t>(K * V));
    // Forward sweep: dq_t = scale · S_t do_tᵀ.
    if (grads.dq != nullptr) {
      load_state(M, in.state_in, s, seq, h);
      for (int64_t t = begin; t < end; ++t) {
        const T *k = hv.k(t), *v = hv.v(t), *dy = d_out + hv.kv_row(t);
        T* dq = grads.dq + hv.kk_row(t);
        for (int64_t a = 0; a < K; ++a) {
          Acc* row = M.data() + a * V;
          const double ka = static_cast<double>(k[a]);
          double acc = 0.0;
          for (int64_t b = 0; b < V; ++b) {
            row[b] = lambda * row[b] + ka * static_cast<double>(v[b]);
            acc += row[b] * static_cast<double>(dy[b]);
          }
          dq[a] = static_cast<T>(scale * acc);
        }
      }
    }
    // Reverse sweep: G = dL/dS_t.
    load_state(M, d_state_out, s, seq, h);
    for (int64_t t = end - 1; t >= begin; --t) {
      const T *q = hv.q(t), *k = hv.k(t), *v = hv.v(t), *dy = d_out + hv.kv_row(t);
      for (int64_t a = 0; a < K; ++a) {
        const double qa = scale * static_cast<double>(q[a]);
        Acc* row = M.data() + a * V;
        for (int64_t b = 0; b < V; ++b) row[b] += qa * static_cast<double>(dy[b]);
      }
      if (grads.dk != nullptr) {
        T* dk = grads.dk + hv.kk_row(t);
        for (int64_t a = 0; a < K; ++a) {
          double acc = 0.0;
          for (int64_t b = 0; b < V; ++b) acc += M[static_cast<size_t>(a * V + b)] * static_cast<double>(v[b]);
          dk[a] = static_cast<T>(acc);
        }
      }
      if (grads.dv != nullptr) {
        T* dv = grads.dv + hv.kv_row(t);
        for (int64_t b = 0; b < V; ++b) {
          double acc = 0.0;
          for (int64_t a = 0; a < K; ++a) acc += static_cast<double>(k[a]) * M[static_cast<size_t>(a * V + b)];
          dv[b] = static_cast<T>(acc);
        }
      }
      for (double& x : M) x *= lambda;
    }
    store_state(grads.d_state_in, M, s, seq, h);
  }
}

std::vector<double> alibi_slopes(int64_t heads) {
  HLM_CHECK_INPUT(heads >= 1, "alibi_slopes: heads ", heads, " must be >= 1");
  const auto power_of_two = [](int64_t n) {
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      out[static_cast<size_t>(i)] = std::exp2(-8.0 * static_cast<double>(i + 1) / static_cast<double>(n));
    return out;
  };
  int64_t p = 1;
  while (p * 2 <= heads) p *= 2;
  std::vector<double> out = power_of_two(p);
  if (p == heads) return out;
  const std::vector<double> doubled = power_of_two(2 * p);
  for (int64_t i = 0; i < heads - p; ++i) out.push_back(doubled[static_cast<size_t>(2 * i)]);
  return out;
}

std::vector<double> ring_linear_decay(int64_t layer, int64_t num_layers, int64_t heads) {
  HLM_CHECK_INPUT(num_layers >= 2, "ring_linear_decay: num_layers ", num_layers, " must be >= 2");
  HLM_CHECK_INPUT(layer >= 0 && layer < num_layers, "ring_linear_decay: layer ", layer, " outside [0, ", num_layers,
                  ")");
  std::vector<double> g = alibi_slopes(heads);
  const double factor =
      1.0 - static_cast<double>(layer - 1) / static_cast<double>(num_layers - 1) + 1e-5;
  for (double& x : g) x = -x * factor;
  return g;
}

#define HLM_INSTANTIATE_SIMPLE_GLA(T)                                                                        \
  template void simple_gla_recurrent_forward<T>(const SimpleGlaOutputs<T>&, const SimpleGlaInputs<T>&,      \
                                                const SimpleGlaShape&);                                      \
  template void simple_gla_chunked_forward<T>(const SimpleGlaOutputs<T>&, const SimpleGlaInputs<T>&,        \
                                              const SimpleGlaShape&, int64_t);                               \
  template void simple_gla_backward<T>(const SimpleGlaGrads<T>&, const T*, const T*, const SimpleGlaInputs<T>&, \
                                       const SimpleGlaShape&);
HLM_INSTANTIATE_SIMPLE_GLA(float)
HLM_INSTANTIATE_SIMPLE_GLA(double)
#undef HLM_INSTANTIATE_SIMPLE_GLA

}  // namespace hlm
