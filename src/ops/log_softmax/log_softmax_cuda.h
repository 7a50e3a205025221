// Row-wise log-softmax on CUDA: launchers for the contract in log_softmax.h (same formulas, same NaN/±Inf results),
// plus the backward, which has no CPU reference yet (tests/cuda/cases_log_softmax.cpp checks it against a double
// reference). Raw device pointers, queued on `stream`, no synchronization. One block per row.
// Shapes: x, out, d_out, dx [rows, vocab]; lse [rows]. f32 storage.
//
// Forward (as the CPU): m = max_v x (NaN row → NaN everywhere; a ±inf max → log_sum = 0), log_sum = log Σ exp(double(x
// − m)) with the fp32 difference, fp64 exp and fp64 sum, rounded to f32 once; out = (x − m) − log_sum in f32, so out
// matches the CPU bit for bit except where the fp64 sums (a different order) round log_sum to a neighbouring float.
// out may alias x (every read of a row finishes before its first write).
// Backward: dx = d_out − exp(out) · Σ_v d_out, all in fp64 from the f32 inputs, rounded once (OVERWRITTEN; dx may
// alias d_out). `out` is the forward's output (the saved log-probabilities).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

struct LogSoftmaxCudaParams {
  int64_t rows = 0;
  int64_t vocab = 0;
};

// Threads per row; the tests derive their tolerances from it.
constexpr int log_softmax_cuda_threads() { return 256; }

void log_softmax_forward_cuda(float* out, const float* x, const LogSoftmaxCudaParams& p, cudaStream_t stream);
// lse[r] = m + log_sum (f32 add, as logsumexp_forward).
void logsumexp_forward_cuda(float* lse, const float* x, const LogSoftmaxCudaParams& p, cudaStream_t stream);
void log_softmax_backward_cuda(float* dx, const float* d_out, const float* out, const LogSoftmaxCudaParams& p,
                               cudaStream_t stream);

}  // namespace hlm
