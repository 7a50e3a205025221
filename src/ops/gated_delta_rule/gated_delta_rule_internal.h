// Private helpers shared by the recurrent and chunked gated-delta-rule references: contract checks, the
// (sequence, v-head) work list, index arithmetic and the fixed-order GVA reduction of dq/dk. Not a public header.
#pragma once
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm::gdn_detail {

template <typename T>
inline void check_contract(const GdnInputs<T>& in, const GdnShape& s) {
  HLM_CHECK(s.total_tokens >= 0 && s.key_dim > 0 && s.value_dim > 0, "bad GDN shape");
  HLM_CHECK(s.k_heads > 0 && s.v_heads % s.k_heads == 0, "v heads ", s.v_heads, " not a multiple of k heads ",
            s.k_heads);
  HLM_CHECK(in.n_seqs >= 0 && in.cu_seqlens != nullptr, "cu_seqlens missing");
  HLM_CHECK(in.q && in.k && in.v && in.g && in.beta, "missing GDN input");
  HLM_CHECK_INPUT(in.cu_seqlens[0] == 0 && in.cu_seqlens[in.n_seqs] == s.total_tokens, "cu_seqlens must span [0, ",
                  s.total_tokens, "], got [", in.cu_seqlens[0], ", ", in.cu_seqlens[in.n_seqs], "]");
  for (int64_t i = 0; i < in.n_seqs; ++i)
    HLM_CHECK_INPUT(in.cu_seqlens[i + 1] >= in.cu_seqlens[i], "cu_seqlens must be non-decreasing at ", i);
}

// Index helpers (element offsets into the packed arrays of gated_delta_rule.h).
struct Index {
  const GdnShape& s;
  int64_t group() const { return s.v_heads / s.k_heads; }
  int64_t qk(int64_t t, int64_t h) const { return (t * s.k_heads + h / group()) * s.key_dim; }  // h = v-head
  int64_t vo(int64_t t, int64_t h) const { return (t * s.v_heads + h) * s.value_dim; }
  int64_t gb(int64_t t, int64_t h) const { return t * s.v_heads + h; }
  int64_t state(int64_t seq, int64_t h) const { return (seq * s.v_heads + h) * s.value_dim * s.key_dim; }
  int64_t qk_per_v(int64_t t, int64_t h) const { return (t * s.v_heads + h) * s.key_dim; }  // scratch [T, Hv, dk]
};

// dst [T, Hk, dk] = Σ over the G v-heads of each k-head of src [T, Hv, dk], in v-head order.
template <typename Dst, typename Src>
void reduce_gva(Dst* dst, const Src* src, const GdnShape& s) {
  const int64_t G = s.v_heads / s.k_heads, dk = s.key_dim;
#pragma omp parallel for if (s.total_tokens * s.v_heads * dk > 65536)
  for (int64_t t = 0; t < s.total_tokens; ++t)
    for (int64_t hk = 0; hk < s.k_heads; ++hk)
      for (int64_t d = 0; d < dk; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < G; ++j) acc += static_cast<double>(src[((t * s.v_heads) + hk * G + j) * dk + d]);
        dst[(t * s.k_heads + hk) * dk + d] = static_cast<Dst>(acc);
      }
}

inline int64_t work_items(int64_t n_seqs, const GdnShape& s) { return n_seqs * s.v_heads; }

// Whether a call is big enough to open an OpenMP team: tiny calls (decode steps, finite-difference loops) would
// spend more on the fork/join than on the math. Results are identical either way.
inline bool worth_threads(int64_t items, const GdnShape& s) {
  return items > 1 && s.total_tokens * s.v_heads * s.key_dim * s.value_dim > 16384;
}

}  // namespace hlm::gdn_detail
