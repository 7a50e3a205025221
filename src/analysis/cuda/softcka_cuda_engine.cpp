// CUDA kernel-norm engine (softcka_cuda_engine.h): upload, launches bounded by the workspace budget, download.
#include "analysis/cuda/softcka_cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_query.h"
#include "core/error.h"
#include "ops/softcka/softcka_cuda.h"

namespace hlm {
namespace {

// A pair of CUDA events around work queued on one stream.
class EventTimer {
 public:
  EventTimer() {
    HLM_CUDA_CHECK(cudaEventCreate(&start_));
    HLM_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(cudaStream_t s) { HLM_CUDA_CHECK(cudaEventRecord(start_, s)); }
  void stop(cudaStream_t s) { HLM_CUDA_CHECK(cudaEventRecord(stop_, s)); }
  double elapsed_ms() const {  // after the stream has been synchronized
    float ms = 0;
    HLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

class CudaEngine final : public CudaKernelNormEngine {
 public:
  explicit CudaEngine(CudaContext& ctx) : ctx_(ctx) {}
  std::string name() const override { return "cuda"; }
  CudaKernelNormTiming last_timing() const override { return timing_; }

  void run(const float* rows, int64_t n_rows, int64_t d, CkaKernel kernel, std::span<const KernelNormJob> jobs,
           std::span<double> out) override {
    check_kernel_norm_batch(n_rows, d, kernel, jobs, out);
    timing_ = {};
    if (jobs.empty()) return;
    ctx_.make_current();
    const cudaStream_t stream = ctx_.stream();
    EventTimer upload, compute, download;

    upload.start(stream);
    CudaBuffer d_rows(ctx_.allocator(), size_t(n_rows * d) * sizeof(float));
    cuda_copy_to_device(ctx_, d_rows.data(), rows, d_rows.bytes());
    upload.stop(stream);

    // Launches over consecutive jobs whose workspace fits the budget.
    const int64_t budget = static_cast<int64_t>(kWorkspaceBudgetBytes / sizeof(double));
    std::vector<SoftckaCudaJob> device_jobs(jobs.size());
    std::vector<std::pair<size_t, size_t>> launches;  // [first, last) job of each launch
    int64_t ws_used = 0, ws_max = 0;
    size_t first = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int64_t need = softcka_cuda_workspace_doubles(jobs[j].na, jobs[j].nb, d);
      if (j > first && ws_used + need > budget) {
        launches.emplace_back(first, j);
        first = j;
        ws_used = 0;
      }
      device_jobs[j] = {jobs[j].a_row, jobs[j].na, jobs[j].b_row, jobs[j].nb, ws_used, jobs[j].sigma};
      ws_used += need;
      ws_max = std::max(ws_max, ws_used);
    }
    launches.emplace_back(first, jobs.size());

    CudaBuffer d_jobs(ctx_.allocator(), device_jobs.size() * sizeof(SoftckaCudaJob));
    CudaBuffer d_out(ctx_.allocator(), jobs.size() * sizeof(double));
    CudaBuffer d_ws(ctx_.allocator(), size_t(ws_max) * sizeof(double));
    cuda_copy_to_device(ctx_, d_jobs.data(), device_jobs.data(), d_jobs.bytes());
    const SoftckaCudaKernel k = kernel == CkaKernel::Linear ? SoftckaCudaKernel::Linear : SoftckaCudaKernel::Rbf;
    compute.start(stream);
    // Launches run in stream order, so each reuses the whole workspace after the previous one.
    for (const auto& [a, b] : launches)
      softcka_centered_sq_norms_cuda(d_out.as<double>() + a, d_rows.as<float>(), d, d_jobs.as<SoftckaCudaJob>() + a,
                                     static_cast<int64_t>(b - a), k, d_ws.as<double>(), stream);
    compute.stop(stream);

    download.start(stream);
    cuda_copy_to_host(ctx_, out.data(), d_out.data(), d_out.bytes());  // waits: kernel faults surface here
    download.stop(stream);
    ctx_.synchronize();
    timing_ = {upload.elapsed_ms(), compute.elapsed_ms(), download.elapsed_ms()};
  }

 private:
  CudaContext& ctx_;
  CudaKernelNormTiming timing_;
};

}  // namespace

std::unique_ptr<CudaKernelNormEngine> make_cuda_kernel_norm_engine() {
  HLM_CHECK_INPUT(cuda_available(), "--device cuda: no usable GPU (", cuda_unavailable_reason(), ")");
  return std::make_unique<CudaEngine>(cuda_context());
}

}  // namespace hlm
