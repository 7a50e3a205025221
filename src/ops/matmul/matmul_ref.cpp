#include "ops/matmul/matmul.h"

#include <cblas.h>

namespace hlm {

void matmul_forward(float* y, const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
                    bool accumulate) {
  if (M == 0 || N == 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M * N; ++i) y[i] = 0.0f;
  } else {
    // Row-major: y[M,N] = x[M,K] · w[N,K]^T.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), 1.0f, x, static_cast<int>(K), w, static_cast<int>(K), beta, y,
                static_cast<int>(N));
  }
  if (bias != nullptr) {
#pragma omp parallel for if (M * N > 65536)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) y[i * N + j] += bias[j];
  }
}

}  // namespace hlm
