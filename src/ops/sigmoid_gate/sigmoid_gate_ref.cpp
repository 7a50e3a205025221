// Sigmoid gate, CPU reference (contract: sigmoid_gate.h).
#include "ops/sigmoid_gate/sigmoid_gate.h"

#include <cmath>

namespace hlm {

template <typename T>
void sigmoid_gate_forward(T* out, const T* x, const T* g, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(g[i])));
    out[i] = static_cast<T>(static_cast<double>(x[i]) * sig);
  }
}

template <typename T>
void sigmoid_gate_backward(T* dx, T* dg, const T* d_out, const T* x, const T* g, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]), xi = static_cast<double>(x[i]), dy = static_cast<double>(d_out[i]);
    const double sig = 1.0 / (1.0 + std::exp(-gi));
    const double one_minus_sig = 1.0 / (1.0 + std::exp(gi));
    dx[i] = static_cast<T>(dy * sig);
    dg[i] = static_cast<T>(dy * xi * sig * one_minus_sig);
  }
}

template void sigmoid_gate_forward<float>(float*, const float*, const float*, int64_t);
template void sigmoid_gate_forward<double>(double*, const double*, const double*, int64_t);
template void sigmoid_gate_backward<float>(float*, float*, const float*, const float*, const float*, int64_t);
template void sigmoid_gate_backward<double>(double*, double*, const double*, const double*, const double*, int64_t);

}  // namespace hlm
