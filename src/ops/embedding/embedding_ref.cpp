// Token embedding: CPU reference, forward and backward (contract in embedding.h).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/embedding/embedding.h"

namespace hlm {

namespace {

void check_ids(const int32_t* ids, int64_t n, int64_t V) {
  for (int64_t t = 0; t < n; ++t)
    HLM_CHECK_INPUT(ids[t] >= 0 && ids[t] < V, "token id ", ids[t], " at position ", t,
                    " is outside the vocabulary [0, ", V, ")");
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const T* table, const int32_t* ids, int64_t n, int64_t V, int64_t D,
                       double multiplier) {
  check_ids(ids, n, V);
  const T m = static_cast<T>(multiplier);  // exact for a float multiplier passed through double
#pragma omp parallel for if (n * D > 65536)
  for (int64_t t = 0; t < n; ++t) {
    const T* row = table + static_cast<int64_t>(ids[t]) * D;
    for (int64_t d = 0; d < D; ++d) out[t * D + d] = row[d] * m;
  }
}

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t T, int64_t V, int64_t D,
                       float multiplier) {
  embedding_forward<float>(out, table, ids, T, V, D, multiplier);
}

template <typename T>
void embedding_backward(T* d_table, const T* d_out, const int32_t* ids, int64_t n, int64_t V, int64_t D,
                        double multiplier) {
  check_ids(ids, n, V);
  // Stable counting sort of token positions by id: tokens_of[start[v] .. start[v+1]) are v's tokens, ascending.
  std::vector<int64_t> start(static_cast<size_t>(V + 1), 0);
  for (int64_t t = 0; t < n; ++t) ++start[static_cast<size_t>(ids[t]) + 1];
  for (int64_t v = 0; v < V; ++v) start[static_cast<size_t>(v + 1)] += start[static_cast<size_t>(v)];
  std::vector<int64_t> fill(start.begin(), start.end() - 1), tokens_of(static_cast<size_t>(n));
  std::vector<int32_t> used;  // ids present in the batch, ascending
  for (int64_t t = 0; t < n; ++t) tokens_of[static_cast<size_t>(fill[static_cast<size_t>(ids[t])]++)] = t;
  for (int64_t v = 0; v < V; ++v)
    if (start[static_cast<size_t>(v + 1)] > start[static_cast<size_t>(v)]) used.push_back(static_cast<int32_t>(v));
  const auto n_used = static_cast<int64_t>(used.size());
#pragma omp parallel if (n * D > 65536)
  {
    std::vector<double> acc(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 16)
    for (int64_t u = 0; u < n_used; ++u) {
      const int32_t v = used[static_cast<size_t>(u)];
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t i = start[static_cast<size_t>(v)]; i < start[static_cast<size_t>(v) + 1]; ++i) {
        const T* g = d_out + tokens_of[static_cast<size_t>(i)] * D;
        for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += static_cast<double>(g[d]);
      }
      T* row = d_table + static_cast<int64_t>(v) * D;
      for (int64_t d = 0; d < D; ++d) row[d] += static_cast<T>(multiplier * acc[static_cast<size_t>(d)]);
    }
  }
}

template void embedding_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, double);
template void embedding_forward<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t, double);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, double);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t, double);

}  // namespace hlm
