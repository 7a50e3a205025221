// Rank-order sums of NcclCommunicator (contract in rank_order_sum.h): one thread per element, a grid-stride loop.
#include <cuda_runtime.h>

#include "dist/cuda/rank_order_sum.h"

namespace hlm {

namespace {

template <typename T>
__global__ void rank_order_sum_kernel(const T* pieces, int world, size_t count, T* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    T sum = pieces[i];
    for (int r = 1; r < world; ++r) sum += pieces[static_cast<size_t>(r) * count + i];
    out[i] = sum;
  }
}

template <typename T>
void launch(const T* pieces, int world, size_t count, T* out, void* stream) {
  if (count == 0) return;
  const int threads = 256;
  const size_t blocks = (count + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  rank_order_sum_kernel<T><<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(pieces, world, count, out);
}

}  // namespace

void rank_order_sum_f32(const float* pieces, int world, size_t count, float* out, void* stream) {
  launch(pieces, world, count, out, stream);
}

void rank_order_sum_f64(const double* pieces, int world, size_t count, double* out, void* stream) {
  launch(pieces, world, count, out, stream);
}

}  // namespace hlm
