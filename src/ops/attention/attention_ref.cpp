// Causal GQA softmax attention: CPU reference, forward and backward (contract in attention.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/attention/attention.h"

namespace hlm {

namespace {

// Token-major view of one (sequence, query head): rows of q/out for head h and k/v for kv head kvh.
struct HeadView {
  int64_t seq_begin, h, kvh;
};

// Probabilities P [nq, q0+nq] (row i holds the keys in query q0+i's window, the rest 0) of queries [q0, q0+nq) of a sequence:
// scores in T, max subtracted, exp in T, row sum in double, p = e · (1/Σ) — the forward's exact operation order.
template <typename T>
void attention_probs(std::vector<T>& probs, const T* q, const T* k, const HeadView& hv, int64_t q0, int64_t nq,
                     const AttentionShape& s, T scale) {
  const int64_t D = s.head_dim;
  const int64_t nk = q0 + nq;  // keys the last query of the block can see
  probs.assign(static_cast<size_t>(nq * nk), T(0));
  for (int64_t i = 0; i < nq; ++i) {
    const T* qi = q + ((hv.seq_begin + q0 + i) * s.q_heads + hv.h) * D;
    T* row = probs.data() + i * nk;
    const int64_t visible = q0 + i + 1, lo = attention_window_begin(q0 + i, s.window);  // keys [lo, visible)
    T max_score = -std::numeric_limits<T>::infinity();
    for (int64_t j = lo; j < visible; ++j) {
      const T* kj = k + ((hv.seq_begin + j) * s.kv_heads + hv.kvh) * D;
      T dot = T(0);
      for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
      row[j] = dot * scale;
      max_score = std::max(max_score, row[j]);
    }
    double denom = 0.0;
    for (int64_t j = lo; j < visible; ++j) {
      row[j] = std::exp(row[j] - max_score);
      denom += row[j];
    }
    const T inv = static_cast<T>(1.0 / denom);
    for (int64_t j = lo; j < visible; ++j) row[j] *= inv;
  }
}

void check_shape(const int64_t* cu_seqlens, int64_t n_seqs, const AttentionShape& s, int64_t query_block) {
  HLM_CHECK(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0, "q heads ", s.q_heads, " not a multiple of kv heads ",
            s.kv_heads);
  HLM_CHECK(query_block > 0, "query_block must be positive");
  HLM_CHECK(cu_seqlens[0] == 0 && cu_seqlens[n_seqs] == s.total_tokens, "cu_seqlens must span [0, T]");
  for (int64_t seq = 0; seq < n_seqs; ++seq)
    HLM_CHECK(cu_seqlens[seq + 1] >= cu_seqlens[seq], "cu_seqlens must be non-decreasing");
}

}  // namespace

template <typename T>
void attention_forward(T* out, const T* q, const T* k, const T* v, const int64_t* cu_seqlens, int64_t n_seqs,
                       const AttentionShape& s, double scale, int64_t query_block) {
  check_shape(cu_seqlens, n_seqs, s, query_block);
  const int64_t group = s.q_heads / s.kv_heads, D = s.head_dim;
  // Work items: (sequence, head, query block), flattened so OpenMP balances uneven sequence lengths.
  struct Item {
    int64_t seq, h, q0, nq;
  };
  std::vector<Item> items;
  int64_t work = 0;  // score entries times D: opens a thread team only when it pays
  for (int64_t seq = 0; seq < n_seqs; ++seq) {
    const int64_t len = cu_seqlens[seq + 1] - cu_seqlens[seq];
    for (int64_t h = 0; h < s.q_heads; ++h)
      for (int64_t q0 = 0; q0 < len; q0 += query_block) {
        items.push_back({seq, h, q0, std::min(query_block, len - q0)});
        work += items.back().nq * (q0 + items.back().nq) * D;
      }
  }
#pragma omp parallel if (work > 32768)
  {
    std::vector<T> probs;
#pragma omp for schedule(dynamic)
    for (size_t n = 0; n < items.size(); ++n) {
      const Item& it = items[n];
      const HeadView hv{cu_seqlens[it.seq], it.h, it.h / group};
      attention_probs(probs, q, k, hv, it.q0, it.nq, s, static_cast<T>(scale));
      const int64_t nk = it.q0 + it.nq;
      for (int64_t i = 0; i < it.nq; ++i) {  // out = P · V
        T* oi = out + ((hv.seq_begin + it.q0 + i) * s.q_heads + it.h) * D;
        std::fill(oi, oi + D, T(0));
        for (int64_t j = attention_window_begin(it.q0 + i, s.window); j < it.q0 + i + 1; ++j) {
          const T p = probs[static_cast<size_t>(i * nk + j)];
          const T* vj = v + ((hv.seq_begin + j) * s.kv_heads + hv.kvh) * D;
          for (int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
        }
      }
    }
  }
}

void attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* cu_seqlens,
                       int64_t n_seqs, const AttentionShape& s, float scale, int64_t query_block) {
  attention_forward<float>(out, q, k, v, cu_seqlens, n_seqs, s, scale, query_block);
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* d_out, const T* q, const T* k, const T* v,
                        const int64_t* cu_seqlens, int64_t n_seqs, const AttentionShape& s, double scale,
                        int64_t query_block) {
  check_shape(cu_seqlens, n_seqs, s, query_block);
  const int64_t group = s.q_heads / s.kv_heads, D = s.head_dim, Hq = s.q_heads, Hkv = s.kv_heads;
  const T scale_t = static_cast<T>(scale);
  const auto scale_d = static_cast<double>(scale_t);  // the scale the forward applied
  const int64_t n_items = n_seqs * Hkv;  // (sequence, kv head)
  int64_t work = 0;                       // score entries times D: opens a thread team only when it pays
  for (int64_t seq = 0; seq < n_seqs; ++seq) {
    const int64_t len = cu_seqlens[seq + 1] - cu_seqlens[seq];
    work += len * (len + 1) / 2 * Hq * D;
  }
#pragma omp parallel if (work > 32768)
  {
    std::vector<T> probs;
    std::vector<double> dk_acc, dv_acc, ds_row, dqi(static_cast<size_t>(D));
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t seq = item / Hkv, kvh = item % Hkv;
      const int64_t begin = cu_seqlens[seq], len = cu_seqlens[seq + 1] - begin;
      dk_acc.assign(static_cast<size_t>(len * D), 0.0);  // [len, D] for this kv head
      dv_acc.assign(static_cast<size_t>(len * D), 0.0);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const HeadView hv{begin, h, kvh};
        for (int64_t q0 = 0; q0 < len; q0 += query_block) {
          const int64_t nq = std::min(query_block, len - q0), nk = q0 + nq;
          attention_probs(probs, q, k, hv, q0, nq, s, scale_t);
          for (int64_t i = 0; i < nq; ++i) {
            const int64_t tq = begin + q0 + i, visible = q0 + i + 1;
            const int64_t lo = attention_window_begin(q0 + i, s.window);  // keys outside [lo, visible) are masked
            const T* doi = d_out + (tq * Hq + h) * D;
            const T* qi = q + (tq * Hq + h) * D;
            const T* p = probs.data() + i * nk;
            // dP_ij = dO_i · v_j; rowsum(dO ⊙ O) = Σ_j P_ij dP_ij.
            ds_row.assign(static_cast<size_t>(visible), 0.0);
            double p_dp = 0.0;
            for (int64_t j = lo; j < visible; ++j) {
              const T* vj = v + ((begin + j) * Hkv + kvh) * D;
              double dp = 0.0;
              for (int64_t d = 0; d < D; ++d) dp += static_cast<double>(doi[d]) * static_cast<double>(vj[d]);
              ds_row[static_cast<size_t>(j)] = dp;
              p_dp += static_cast<double>(p[j]) * dp;
            }
            std::fill(dqi.begin(), dqi.end(), 0.0);
            for (int64_t j = lo; j < visible; ++j) {
              const double pj = static_cast<double>(p[j]);
              const double ds = pj * (ds_row[static_cast<size_t>(j)] - p_dp) * scale_d;  // scale · dS_ij
              const T* kj = k + ((begin + j) * Hkv + kvh) * D;
              double* dkj = dk_acc.data() + j * D;
              double* dvj = dv_acc.data() + j * D;
              for (int64_t d = 0; d < D; ++d) {
                dqi[static_cast<size_t>(d)] += ds * static_cast<double>(kj[d]);
                dkj[d] += ds * static_cast<double>(qi[d]);
                dvj[d] += pj * static_cast<double>(doi[d]);
              }
            }
            T* dq_out = dq + (tq * Hq + h) * D;
            for (int64_t d = 0; d < D; ++d) dq_out[d] = static_cast<T>(dqi[static_cast<size_t>(d)]);
          }
        }
      }
      for (int64_t j = 0; j < len; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const size_t a = static_cast<size_t>(j * D + d);
          dk[((begin + j) * Hkv + kvh) * D + d] = static_cast<T>(dk_acc[a]);
          dv[((begin + j) * Hkv + kvh) * D + d] = static_cast<T>(dv_acc[a]);
        }
    }
  }
}

template void attention_forward<float>(float*, const float*, const float*, const float*, const int64_t*, int64_t,
                                       const AttentionShape&, double, int64_t);
template void attention_forward<double>(double*, const double*, const double*, const double*, const int64_t*,
                                        int64_t, const AttentionShape&, double, int64_t);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const int64_t*, int64_t, const AttentionShape&, double,
                                        int64_t);
template void attention_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const int64_t*, int64_t, const AttentionShape&, double,
                                         int64_t);

}  // namespace hlm
