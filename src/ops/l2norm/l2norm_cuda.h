// L2 normalisation on CUDA: launchers for the contract in l2norm.h (same formulas and aliasing rules), f32, raw
// device pointers, queued on `stream`, no synchronization.
// Numerics (the CPU reference accumulates in double): Σx² and Σx·dy are fp32 block sums, l2norm_cuda_threads()
// threads per row, each summing every l2norm_cuda_threads()-th element in order, then block_sum
// (cuda_common.cuh): deterministic. fp32 Σx² overflows for |x| ≳ 1.8e19 / sqrt(dim) (the CPU's double does not).
// Shapes: x, y, dy, dx [rows, dim].
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

struct L2normCudaParams {
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;  // kL2NormEps
};

// Threads per row (one block per row); the tests derive their tolerances from it.
constexpr int l2norm_cuda_threads() { return 128; }

// y = x · (Σx² + eps)^-1/2; y may alias x.
void l2norm_forward_cuda(float* y, const float* x, const L2normCudaParams& p, cudaStream_t stream);

// dx = r · (dy − y · (y·dy)) OVERWRITTEN; dx may alias dy.
void l2norm_backward_cuda(float* dx, const float* dy, const float* x, const L2normCudaParams& p, cudaStream_t stream);

}  // namespace hlm
