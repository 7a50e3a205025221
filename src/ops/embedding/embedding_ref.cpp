#include "ops/embedding/embedding.h"

#include "core/error.h"

namespace hlm {

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t T, int64_t V, int64_t D,
                       float multiplier) {
  for (int64_t t = 0; t < T; ++t)
    HLM_CHECK_INPUT(ids[t] >= 0 && ids[t] < V, "token id ", ids[t], " at position ", t,
                    " is outside the vocabulary [0, ", V, ")");
#pragma omp parallel for if (T * D > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* row = table + static_cast<int64_t>(ids[t]) * D;
    for (int64_t d = 0; d < D; ++d) out[t * D + d] = row[d] * multiplier;
  }
}

}  // namespace hlm
