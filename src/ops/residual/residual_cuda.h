// Residual add on CUDA (contract: residual.h): x += scale · delta, f32, raw device pointers, queued on `stream`.
// Bit-identical to the CPU reference: the product and the sum are rounded separately (no FMA contraction), as the
// ISO C++ build of residual_ref.cpp does.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

void residual_add_forward_cuda(float* x, const float* delta, float scale, int64_t n, cudaStream_t stream);

}  // namespace hlm
