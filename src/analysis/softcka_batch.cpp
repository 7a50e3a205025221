// Batch checks and the CPU engine (softcka_batch.h).
#include "analysis/softcka_batch.h"

#include <cmath>

#include "core/error.h"

namespace hlm {

void check_kernel_norm_batch(int64_t n_rows, int64_t d, CkaKernel kernel, std::span<const KernelNormJob> jobs,
                             std::span<const double> out) {
  HLM_CHECK_INPUT(d > 0 && n_rows >= 0, "kernel-norm batch: bad shape [", n_rows, ", ", d, "]");
  HLM_CHECK_INPUT(out.size() == jobs.size(), "kernel-norm batch: ", jobs.size(), " jobs but ", out.size(), " outputs");
  for (size_t j = 0; j < jobs.size(); ++j) {
    const KernelNormJob& jb = jobs[j];
    HLM_CHECK_INPUT(jb.na > 0 && jb.nb > 0 && jb.a_row >= 0 && jb.b_row >= 0 && jb.a_row + jb.na <= n_rows &&
                        jb.b_row + jb.nb <= n_rows,
                    "kernel-norm batch: job ", j, " reads rows [", jb.a_row, ", +", jb.na, ") and [", jb.b_row, ", +",
                    jb.nb, ") of ", n_rows);
    HLM_CHECK_INPUT(kernel == CkaKernel::Linear || (jb.sigma > 0 && std::isfinite(jb.sigma)),
                    "kernel-norm batch: job ", j, ": RBF bandwidth must be positive, got ", jb.sigma);
  }
}

namespace {

class CpuKernelNormEngine final : public KernelNormEngine {
 public:
  std::string name() const override { return "cpu"; }
  void run(const float* rows, int64_t n_rows, int64_t d, CkaKernel kernel, std::span<const KernelNormJob> jobs,
           std::span<double> out) override {
    check_kernel_norm_batch(n_rows, d, kernel, jobs, out);
    const int64_t n = static_cast<int64_t>(jobs.size());
#pragma omp parallel for schedule(dynamic)
    for (int64_t j = 0; j < n; ++j) {
      const KernelNormJob& jb = jobs[size_t(j)];
      out[size_t(j)] =
          centered_kernel_sq_norm(rows + jb.a_row * d, jb.na, rows + jb.b_row * d, jb.nb, d, {kernel, jb.sigma});
    }
  }
};

}  // namespace

std::unique_ptr<KernelNormEngine> make_cpu_kernel_norm_engine() { return std::make_unique<CpuKernelNormEngine>(); }

}  // namespace hlm
