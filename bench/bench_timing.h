// Helpers shared by the CUDA benchmarks (bench_cuda_kernels.cpp, bench_memory_ops.cpp): the median time of a launch
// sequence measured with CUDA events on one stream, random normal host data (core/rng.h, fixed seed), and uploads of
// host vectors as device tensors. Header-only; host C++ (CUDA runtime API), benchmarks only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_tensor.h"
#include "core/dtype.h"
#include "core/rng.h"

namespace hlm::bench {

// Median milliseconds of `fn` over `iters` runs on `stream`, after `warmup` untimed runs; `before_each` (when given)
// runs untimed before each timed run (e.g. an L2 flush).
inline double median_ms(cudaStream_t stream, const std::function<void()>& fn, int warmup, int iters,
                        const std::function<void()>& before_each = {}) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  HLM_CUDA_CHECK(cudaEventCreate(&start));
  HLM_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    if (before_each) before_each();
    HLM_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    HLM_CUDA_CHECK(cudaEventRecord(stop, stream));
    HLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0.0f;
    HLM_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  HLM_CUDA_CHECK(cudaEventDestroy(start));
  HLM_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The peer's timing (../shared/bench/peer_probe.py's `timed`): `warmup` calls, a synchronize, then `iters` calls back
// to back between two events; the mean ms per call. The host's work for a call (argument checks, cuDNN's variant
// pack, launches) overlaps the GPU's previous call there, whereas median_ms synchronizes around every sample, so each
// of its samples also holds the host latency before the first kernel starts (tens of µs for a cuDNN call): ratios
// against the peer use this one, both are printed.
inline double back_to_back_ms(cudaStream_t stream, const std::function<void()>& fn, int warmup = 3, int iters = 10) {
  for (int i = 0; i < warmup; ++i) fn();
  HLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  HLM_CUDA_CHECK(cudaEventCreate(&start));
  HLM_CUDA_CHECK(cudaEventCreate(&stop));
  HLM_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) fn();
  HLM_CUDA_CHECK(cudaEventRecord(stop, stream));
  HLM_CUDA_CHECK(cudaEventSynchronize(stop));
  float t = 0.0f;
  HLM_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
  HLM_CUDA_CHECK(cudaEventDestroy(start));
  HLM_CUDA_CHECK(cudaEventDestroy(stop));
  return static_cast<double>(t) / iters;
}

// n standard-normal values of the given rng stream (seed 1234).
inline std::vector<float> normal(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = rng_normal(1234, stream, i);
  return v;
}

inline CudaTensor upload(CudaContext& ctx, const std::vector<float>& host, Shape shape) {
  Tensor t = Tensor::zeros(shape);
  std::memcpy(t.f32(), host.data(), host.size() * sizeof(float));
  return cuda_upload(ctx, t);
}

inline CudaTensor upload_bf16(CudaContext& ctx, const std::vector<float>& host, Shape shape) {
  Tensor t = Tensor::zeros(shape, DType::BF16);
  auto* p = static_cast<uint16_t*>(t.raw());
  for (size_t i = 0; i < host.size(); ++i) p[i] = f32_to_bf16(host[i]);
  return cuda_upload(ctx, t);
}

inline CudaTensor upload_i64(CudaContext& ctx, const std::vector<int64_t>& host) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(host.size())}, DType::I64);
  std::memcpy(t.raw(), host.data(), host.size() * sizeof(int64_t));
  return cuda_upload(ctx, t);
}

}  // namespace hlm::bench
