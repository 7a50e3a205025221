// Batches of centred kernel norms for SoftCKA (softcka.h), computed on a chosen device. `align` packs the token
// states of many (pair, language, layer, point) cells into one matrix and asks an engine for every h11 / h22 / h12
// of the batch at once; the CPU engine runs centered_kernel_sq_norm per job (OpenMP over jobs), the CUDA engine
// (analysis/cuda/softcka_cuda_engine.h, CUDA builds only) runs them all in one kernel launch.
//
// Batch: rows [n_rows, d] f32 row-major; job j is ‖H_a K H_b‖²_F for A = rows [a_row, a_row + na), B = rows
// [b_row, b_row + nb), with bandwidth sigma (RBF) — the same value centered_kernel_sq_norm returns for those rows.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "analysis/softcka.h"

namespace hlm {

struct KernelNormJob {
  int64_t a_row = 0, na = 0;
  int64_t b_row = 0, nb = 0;
  double sigma = 1.0;  // RBF bandwidth (unused by the linear kernel)
};

class KernelNormEngine {
 public:
  virtual ~KernelNormEngine() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // out[j] = ‖H_a K H_b‖²_F of jobs[j] (out.size() == jobs.size()). Jobs are checked: rows inside the batch,
  // na, nb ≥ 1, σ > 0 for RBF (input errors).
  virtual void run(const float* rows, int64_t n_rows, int64_t d, CkaKernel kernel, std::span<const KernelNormJob> jobs,
                   std::span<double> out) = 0;
};

// Checks a batch (the shared input errors of every engine).
void check_kernel_norm_batch(int64_t n_rows, int64_t d, CkaKernel kernel, std::span<const KernelNormJob> jobs,
                             std::span<const double> out);

// centered_kernel_sq_norm per job, jobs in parallel (OpenMP): bit-identical to calling it job by job.
std::unique_ptr<KernelNormEngine> make_cpu_kernel_norm_engine();

}  // namespace hlm
