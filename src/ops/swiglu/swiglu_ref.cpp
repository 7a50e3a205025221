// SwiGLU: CPU reference, forward and backward (contract in swiglu.h).
#include <cmath>

#include "core/error.h"
#include "ops/swiglu/swiglu.h"

namespace hlm {

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    out[i] = g / (T(1) + std::exp(-g)) * up[i];
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  swiglu_forward<float>(out, gate, up, n);
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* d_out, const T* gate, const T* up, int64_t n) {
  HLM_CHECK(dgate != dup, "swiglu_backward: dgate and dup may not alias");
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const auto g = static_cast<double>(gate[i]), u = static_cast<double>(up[i]), dy = static_cast<double>(d_out[i]);
    const double sig = 1.0 / (1.0 + std::exp(-g));
    dgate[i] = static_cast<T>(dy * u * sig * (1.0 + g * (1.0 - sig)));
    dup[i] = static_cast<T>(dy * g * sig);
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*, int64_t);

}  // namespace hlm
