// L2 normalisation on CUDA: launchers for the contract in l2norm.h (same formulas and aliasing rules), f32, raw
// device pointers, queued on `stream`, no synchronization.
// Numerics (the CPU reference accumulates in double): Σx² and Σx·dy are fp32 sums with FMA in a fixed order
// (deterministic):
//   dim ≤ l2norm_cuda_warp_max_dim(): one warp per row; lane l sums in order, in one accumulator, the elements of
//     the float4 vectors l, l + 32, ... when every pointer is 16-byte aligned and dim % 4 == 0 (at most
//     4·ceil(dim / 128) terms), else the elements l, l + 32, ... (ceil(dim / 32) terms); then a 5-level xor-shuffle
//     tree.
//   longer rows: one block of l2norm_cuda_threads() threads per row; thread t sums the elements t, t + T, ... in
//     order (ceil(dim / T) terms), then block_sum (cuda_common.cuh: 5 + T/32 roundings).
// fp32 Σx² overflows for |x| ≳ 1.8e19 / sqrt(dim) (the CPU's double does not).
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

// Rows up to this length get one warp each (several rows per block); longer rows get a block of
// l2norm_cuda_threads() threads. The tests derive their tolerances from both (summation order above).
constexpr int64_t l2norm_cuda_warp_max_dim() { return 1024; }
constexpr int l2norm_cuda_threads() { return 128; }

// y = x · (Σx² + eps)^-1/2; y may alias x.
void l2norm_forward_cuda(float* y, const float* x, const L2normCudaParams& p, cudaStream_t stream);

// dx = r · (dy − y · (y·dy)) OVERWRITTEN; dx may alias dy.
void l2norm_backward_cuda(float* dx, const float* dy, const float* x, const L2normCudaParams& p, cudaStream_t stream);

}  // namespace hlm
