// A linear projection in HF layout: weight [out, in] (f32), optional bias [out]. y[T, out] = x[T, in] · weightᵀ + bias.
#pragma once
#include "core/tensor.h"
#include "ops/matmul/matmul.h"

namespace hlm {

struct Linear {
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined

  int64_t out_features() const { return weight.dim(0); }
  int64_t in_features() const { return weight.dim(1); }
};

inline void linear_forward(float* y, const float* x, const Linear& layer, int64_t rows) {
  matmul_forward(y, x, layer.weight.f32(), layer.bias.defined() ? layer.bias.f32() : nullptr, rows,
                 layer.out_features(), layer.in_features());
}

}  // namespace hlm
