// nccl_selfcheck: the NcclCommunicator's collectives on device buffers against the rank-order sums of communicator.h,
// bit for bit, on however many ranks it is started with (one: `./nccl_selfcheck`; several: `mpirun -np N
// ./nccl_selfcheck`), then the time of an all-reduce of a bucket (16 MiB) averaged over 20 calls. Exit 0 when every
// check passes. Built with CUDA + MPI + NCCL (CMake target nccl_selfcheck); run on the GPU machine.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/cuda/nccl_communicator.h"

using namespace hlm;

namespace {

float value(int rank, size_t i) {
  const float big = (i % 3 == 0) ? 1e8f : 1.0f;
  return big * static_cast<float>((rank + 1) * 0.1 + static_cast<double>(i) * 1e-3) * (rank % 2 ? -1.0f : 1.0f);
}

}  // namespace

int check() {
  const std::unique_ptr<Communicator> host = make_host_communicator();
  const std::unique_ptr<Communicator> nccl = make_nccl_communicator(*host);
  const int W = nccl->size(), me = nccl->rank();
  const size_t n = static_cast<size_t>(W) * 1000 + (W > 1 ? 1 : 0);
  std::vector<float> mine(n), expected(n), got(n);
  for (size_t i = 0; i < n; ++i) {
    mine[i] = value(me, i);
    float sum = value(0, i);
    for (int r = 1; r < W; ++r) sum += value(r, i);
    expected[i] = sum;
  }
  float* d = nullptr;
  float* c = nullptr;
  cudaMalloc(&d, n * sizeof(float));
  cudaMalloc(&c, n * sizeof(float));
  int failures = 0;
  cudaMemcpy(d, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  nccl->all_reduce_sum(d, n);
  cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) failures += got[i] != expected[i];
  cudaMemcpy(d, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  nccl->reduce_scatter_sum(d, c, n);
  std::vector<float> chunk(chunk_size(n, W, me));
  cudaMemcpy(chunk.data(), c, chunk.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t k = 0; k < chunk.size(); ++k) failures += chunk[k] != expected[chunk_begin(n, W, me) + k];
  nccl->all_gather(c, d, n);
  cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) failures += got[i] != expected[i];
  nccl->barrier();

  const size_t bucket = size_t{4} << 20;
  float* b = nullptr;
  cudaMalloc(&b, bucket * sizeof(float));
  cudaMemset(b, 0, bucket * sizeof(float));
  nccl->all_reduce_sum(b, bucket);
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < 20; ++k) nccl->all_reduce_sum(b, bucket);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20;
  std::printf("rank %d of %d: %d mismatches; all-reduce of 16 MiB: %.3f ms\n", me, W, failures, ms);
  cudaFree(b);
  cudaFree(c);
  cudaFree(d);
  return failures == 0 ? 0 : 1;
}

int main() {
  try {
    return check();
  } catch (const Error& e) {
    std::fprintf(stderr, "nccl_selfcheck: error: %s\n", e.what());
    return e.exit_code();
  }
}
