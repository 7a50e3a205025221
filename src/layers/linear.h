// A linear projection in HF layout: weight [out, in] (f32), optional bias [out]. y[T, out] = x[T, in] · weightᵀ + bias.
#pragma once
#include <cstring>

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

// Weight rows [begin, begin + rows) of a fused projection as a Linear of their own (a copy; the bias is not copied:
// callers that cut fused rows refuse biased projections first).
inline Linear linear_row_block(const Linear& l, int64_t begin, int64_t rows) {
  const int64_t in = l.in_features();
  Linear out;
  out.weight = Tensor::zeros({rows, in});
  std::memcpy(out.weight.f32(), l.weight.f32() + begin * in, sizeof(float) * static_cast<size_t>(rows * in));
  return out;
}

}  // namespace hlm
