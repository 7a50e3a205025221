// The CUDA kernel-norm engine (analysis/softcka_batch.h) for `hybridlm align --device cuda` and bench_softcka: one
// upload of the batch's rows, the jobs run by softcka_centered_sq_norms_cuda (src/ops/softcka/softcka_cuda.h, fp64
// throughout), one download of the results. Built only with the CUDA backend (hlm_cuda_exec).
//
// Workspace: each job needs softcka_cuda_workspace_doubles(na, nb, d) doubles on the device (its kernel matrix and
// means); jobs run in launches of at most kWorkspaceBudgetBytes of workspace each (a job larger than that runs alone).
#pragma once
#include <memory>

#include "analysis/softcka_batch.h"

namespace hlm {

// Device time of the last run() (CUDA events on the context's stream), in milliseconds.
struct CudaKernelNormTiming {
  double upload_ms = 0, kernel_ms = 0, download_ms = 0;
};

class CudaKernelNormEngine : public KernelNormEngine {
 public:
  static constexpr size_t kWorkspaceBudgetBytes = size_t{512} << 20;
  virtual CudaKernelNormTiming last_timing() const = 0;
};

// Throws an input error (exit 2 in the CLI) naming the reason when no usable GPU is present.
std::unique_ptr<CudaKernelNormEngine> make_cuda_kernel_norm_engine();

}  // namespace hlm
