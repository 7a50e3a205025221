// Linear product: CPU reference, forward and backward via OpenBLAS (contract in matmul.h).
#include <cblas.h>

#include "ops/matmul/matmul.h"

namespace hlm {

namespace {

// Row-major C[M, N] = op(A) · op(B) + beta · C with op(A) [M, K], op(B) [K, N]; K = 0 still applies beta (BLAS
// implementations disagree on that degenerate case).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float beta, float* C) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), 1.0f, A, static_cast<int>(ta ? M : K), B,
              static_cast<int>(tb ? K : N), beta, C, static_cast<int>(N));
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, const double* B, double beta,
          double* C) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), 1.0, A, static_cast<int>(ta ? M : K), B,
              static_cast<int>(tb ? K : N), beta, C, static_cast<int>(N));
}
template <typename T>
void gemm_safe(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, T beta, T* C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == T(0))
      for (int64_t i = 0; i < M * N; ++i) C[i] = T(0);
    return;  // beta is 0 or 1 here
  }
  gemm(ta, tb, M, N, K, A, B, beta, C);
}

}  // namespace

template <typename T>
void matmul_forward(T* y, const T* x, const T* w, std::type_identity_t<const T*> bias, int64_t M, int64_t N,
                    int64_t K, bool accumulate) {
  gemm_safe(false, true, M, N, K, x, w, accumulate ? T(1) : T(0), y);  // y[M,N] = x[M,K] · w[N,K]ᵀ
  if (bias != nullptr && M > 0) {
#pragma omp parallel for if (M * N > 65536)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) y[i * N + j] += bias[j];
  }
}

void matmul_forward(float* y, const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
                    bool accumulate) {
  matmul_forward<float>(y, x, w, bias, M, N, K, accumulate);
}

template <typename T>
void matmul_backward(std::type_identity_t<T*> dx, std::type_identity_t<T*> dw, std::type_identity_t<T*> dbias,
                     const T* dy, const T* x, const T* w, int64_t M, int64_t N, int64_t K, bool accumulate_dx) {
  if (dx != nullptr) gemm_safe(false, false, M, K, N, dy, w, accumulate_dx ? T(1) : T(0), dx);  // dy[M,N] · w[N,K]
  if (dw != nullptr) gemm_safe(true, false, N, K, M, dy, x, T(1), dw);                          // dyᵀ[N,M] · x[M,K]
  if (dbias != nullptr) {
#pragma omp parallel for if (M * N > 65536)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < M; ++i) acc += static_cast<double>(dy[i * N + j]);
      dbias[j] += static_cast<T>(acc);
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                    bool);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                     bool);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                     int64_t, int64_t, bool);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int64_t, int64_t, int64_t, bool);

}  // namespace hlm
