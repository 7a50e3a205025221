// Linear layer product in the HF weight layout: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]), via OpenBLAS gemm (sgemm:
// fp32 accumulation; dgemm for the double instantiation used by gradient checks). `accumulate` adds into y instead of
// overwriting it. CPU reference, forward and backward.
//
// Backward: needs x and w (nothing else saved). Every output pointer may be nullptr (= not wanted).
//   dx [M, K] = dy · w               (OVERWRITTEN, or ADDED when accumulate_dx: sums the fan-out of x)
//   dw [N, K] += dyᵀ · x             (ACCUMULATED, parameter gradient)
//   dbias [N] += Σ_rows dy           (ACCUMULATED; summed per column in double, fixed row order)
// dx may not alias dy or w; dw may not alias x or dy. Results do not depend on the OpenMP thread count (OpenBLAS
// gemm is deterministic for a fixed build and thread count; the bias sum is column-parallel).
#pragma once
#include <cstdint>
#include <type_traits>

namespace hlm {

void matmul_forward(float* y, const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
                    bool accumulate = false);

// Templated forward (T = float or double); bias may be nullptr.
template <typename T>
void matmul_forward(T* y, const T* x, const T* w, std::type_identity_t<const T*> bias, int64_t M, int64_t N,
                    int64_t K, bool accumulate = false);

template <typename T>
void matmul_backward(std::type_identity_t<T*> dx, std::type_identity_t<T*> dw, std::type_identity_t<T*> dbias,
                     const T* dy, const T* x, const T* w, int64_t M, int64_t N, int64_t K,
                     bool accumulate_dx = false);

}  // namespace hlm
