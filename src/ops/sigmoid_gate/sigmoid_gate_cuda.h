// Sigmoid gate on CUDA: the forward of sigmoid_gate.h (out = x ⊙ sigmoid(g)), f32, raw device pointers, queued on
// `stream`; out may alias x or g. Numerics: fp32 (the CPU computes σ and the product in double, rounded once);
// CUDA's expf is within 2 ulp, so results agree with the CPU to a few ulp. No backward on CUDA yet (training a gated
// attention model on CUDA is refused, models/cuda/cuda_model.h).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

void sigmoid_gate_forward_cuda(float* out, const float* x, const float* g, int64_t n, cudaStream_t stream);

}  // namespace hlm
