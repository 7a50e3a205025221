// SoftCKA kernel sums on CUDA: a batch of centred kernel norms ‖H_a K H_b‖²_F, the quantity that
// centered_kernel_sq_norm (src/analysis/softcka.h, the CPU reference) computes for one (A, B), over many jobs in one
// launch (pairs, languages, layers, points: whatever the caller packs). Raw device pointers, queued on `stream`, no
// synchronization.
//
// Inputs: `rows` [n_rows, d] f32 row-major holds every token state of the batch; job j reads A = rows
// [a_row, a_row + na) and B = rows [b_row, b_row + nb) (A and B may be the same rows: h11, h22).
// Kernels (same definitions as softcka.h):
//   RBF:    K_ij = exp(−max(0, ‖a_i‖² + ‖b_j‖² − 2 a_i·b_j) / (2σ²)), σ per job; out = Σ (K_ij − r_i − c_j + ḡ)²
//           with r, c, ḡ the row, column and grand means of K (subtracted before squaring, as the CPU does).
//   Linear: out = ‖Ã B̃ᵀ‖²_F with Ã, B̃ the column-centred A, B.
// Precision: every step in fp64 (the f32 inputs are widened on load): norms, dot products, exp, means, sums. The CPU
// reference's fp32 instantiation forms the RBF dot products in fp32 (its double instantiation in fp64), so the GPU
// result sits at fp64 rounding from softcka_pair_terms<double> on the same (widened) inputs, and differs from the
// fp32 CPU path by that path's own fp32 dot-product rounding. The linear path is fp64 on both sides.
// Deterministic: fixed loop and reduction orders, no atomics.
//
// Workspace (device, doubles): job j uses [ws_offset, ws_offset + softcka_cuda_workspace_doubles(na, nb, d)):
// the kernel matrix, its row and column means and the two column-mean vectors. Jobs' regions must not overlap.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

struct SoftckaCudaJob {
  int64_t a_row = 0, na = 0;  // A = rows [a_row, a_row + na)
  int64_t b_row = 0, nb = 0;  // B = rows [b_row, b_row + nb)
  int64_t ws_offset = 0;      // start of the job's workspace region, in doubles
  double sigma = 1.0;         // RBF bandwidth σ > 0 (ignored by the linear kernel)
};

enum class SoftckaCudaKernel { Rbf, Linear };

// Doubles of workspace one job needs: na·nb kernel entries, na + nb means, 2·d column means.
constexpr int64_t softcka_cuda_workspace_doubles(int64_t na, int64_t nb, int64_t d) {
  return na * nb + na + nb + 2 * d;
}

// out[j] = ‖H_a K H_b‖²_F of job j, for j < n_jobs. `jobs` is a device array; every job needs na, nb ≥ 1 and rows
// inside `rows` (the caller checks; the kernel does not). d ≥ 1.
void softcka_centered_sq_norms_cuda(double* out, const float* rows, int64_t d, const SoftckaCudaJob* jobs,
                                    int64_t n_jobs, SoftckaCudaKernel kernel, double* workspace, cudaStream_t stream);

}  // namespace hlm
