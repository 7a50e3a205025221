// RMSNorm on CUDA: launchers for the contract in rmsnorm.h (same formulas, aliasing rules and accumulate/overwrite
// semantics), raw device pointers, queued on `stream`, no synchronization.
//
// Storage: f32, or bf16 activations (x, out, d_out, dx, weight) with fp32 compute; in the bf16 variant the parameter
// gradient dweight is fp32 (a master gradient), and the output is rounded to bf16 once (HF rounds twice: the
// normalized x, then weight · it; the two differ by at most one bf16 ulp).
// Numerics (differences from the CPU reference, which accumulates in double):
//   - mean(x²) and Σ g·x are fp32 sums in a fixed order (deterministic), with FMA:
//       dim ≤ rmsnorm_cuda_warp_max_dim(): one warp per row; lane l sums in order, in one accumulator, the elements
//         of the vectors l, l + 32, l + 64, ... of V = 16 / sizeof(storage) elements (4 f32, 8 bf16) when x, weight,
//         out / d_out, dx are 16-byte aligned and dim % V == 0 (at most V·ceil(dim / 32V) terms), else the
//         elements l, l + 32, ... (ceil(dim / 32) terms); then a 5-level xor-shuffle tree.
//       longer rows: one block of rmsnorm_cuda_threads() threads per row; thread t sums the elements t, t + T, ...
//         in order (ceil(dim / T) terms), then block_sum (cuda_common.cuh: 5 + T/32 roundings).
//   - fp32 sums overflow where the CPU's double ones do not: rows with |x| ≳ 1.8e19 / sqrt(D) give 0 (x · rsqrt(inf))
//     on the GPU, finite values on the CPU. HF computes the variance in fp32 too.
//   - dweight += Σ_rows d_out · x · r, fp32, deterministic (fixed order, no atomics):
//       dim ≤ rmsnorm_cuda_warp_max_dim(): fused into the backward pass (plan: rmsnorm_cuda_dweight_plan). The rows
//         are cut into `groups` row-groups of W · rows_per_warp consecutive rows (W = rmsnorm_cuda_warp_rows()), one
//         block each; warp k of a group takes the group's rows k, k + W, ... and each lane adds, in that row order,
//         fma(d_out · x, r, acc) for its columns; the block adds its W warp partials in warp order (shared memory)
//         into one partial row; a finish kernel then gives each column S = rmsnorm_cuda_dweight_finish_slices()
//         slices (slice s adds partial rows s, s + S, ... in order), a fixed halving tree over the slices, and one
//         add into dweight. Longest chain of roundings: rmsnorm_cuda_dweight_chain.
//       longer rows: the two-pass column sum (backend/cuda/column_sum.h) of (d_out · x) · r.
// Shapes: x, out, d_out, dx [rows, dim]; weight, dweight [dim].
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/column_sum.h"

namespace hlm {

struct RmsnormCudaParams {
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;
};

// Rows up to this length get one warp each (several rows per block); longer rows get a block of
// rmsnorm_cuda_threads() threads. The tests derive their tolerances from both (summation order above).
constexpr int64_t rmsnorm_cuda_warp_max_dim() { return 1024; }
constexpr int rmsnorm_cuda_threads() { return 256; }
constexpr int rmsnorm_cuda_warp_rows() { return 8; }  // W: warps (rows in flight) per block on the warp path

// Warp-path backward: how the rows are cut for the fused dweight sum (see Numerics). A pure function of (rows, dim),
// so results are bit-identical run to run and independent of the GPU model. rows_per_warp ≥ 2 keeps the partial
// rows' traffic (write + read of groups · dim floats) ≤ 1/24 of the pass's own (f32; 1/12 with bf16 rows); groups ≤
// clamp(2^20 / dim, 1024, 4096) bounds the workspace (≤ 4096 · dim floats, ≤ 4 MiB for dim ≥ 256) and the finish
// pass, and leaves many blocks per SM for the hardware to balance.
struct RmsnormCudaDweightPlan {
  int64_t rows_per_warp = 0;  // rows one warp sums into its lanes' partials, in row order
  int64_t groups = 0;         // blocks = partial rows; group g holds rows [g·W·rows_per_warp, (g + 1)·W·rows_per_warp)
};
constexpr int rmsnorm_cuda_dweight_finish_slices() { return 128; }  // S
constexpr RmsnormCudaDweightPlan rmsnorm_cuda_dweight_plan(int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return {};
  const int64_t W = rmsnorm_cuda_warp_rows();
  const int64_t max_groups = std::clamp<int64_t>((int64_t{1} << 20) / dim, 1024, 4096);
  const int64_t rows_per_warp = std::max<int64_t>(2, (rows + W * max_groups - 1) / (W * max_groups));
  return {rows_per_warp, (rows + W * rows_per_warp - 1) / (W * rows_per_warp)};
}

// Longest chain of fp32 roundings behind one dweight element (the term's own products not counted, except the
// fma of the first row, which is counted as an add), for the tests' tolerance. Additions of an exact zero (a warp,
// slice or tree operand that received no rows) round nothing and are not counted.
//   warp path: a lane's fmas (≤ min(rows_per_warp, ceil(rows / W))), the block's adds of its warps (min(W, rows) − 1),
//     a finish slice's adds (ceil(groups / S) − 1), the tree levels that add two non-empty operands
//     (ceil(log2(min(groups, S)))), and dweight += (1).
//   longer rows: column_sum_path_length.
constexpr int64_t rmsnorm_cuda_dweight_chain(int64_t rows, int64_t dim) {
  if (dim > rmsnorm_cuda_warp_max_dim()) return column_sum_path_length(column_sum_plan(rows, dim, ~size_t{0} / 2));
  if (rows <= 0 || dim <= 0) return 1;
  const int64_t W = rmsnorm_cuda_warp_rows(), S = rmsnorm_cuda_dweight_finish_slices();
  const RmsnormCudaDweightPlan plan = rmsnorm_cuda_dweight_plan(rows, dim);
  int64_t tree = 0;
  while ((int64_t{1} << tree) < std::min(plan.groups, S)) ++tree;
  return std::min(plan.rows_per_warp, (rows + W - 1) / W) + (std::min(W, rows) - 1) + ((plan.groups + S - 1) / S - 1) +
         tree + 1;
}

// out = x · (mean(x²) + eps)^-1/2 · weight; out may alias x.
void rmsnorm_forward_cuda(float* out, const float* x, const float* weight, const RmsnormCudaParams& p,
                          cudaStream_t stream);
void rmsnorm_forward_cuda(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                          const RmsnormCudaParams& p, cudaStream_t stream);

// Bytes of device scratch rmsnorm_backward_cuda needs: dim ≤ rmsnorm_cuda_warp_max_dim(): the dweight partial rows
// (groups · dim floats); longer rows: per-row statistics and the column sum's partials.
size_t rmsnorm_backward_cuda_workspace_bytes(const RmsnormCudaParams& p);

// dx = r · (g − n · mean(g · n)) OVERWRITTEN (dx may alias d_out); dweight += Σ_rows d_out · n ACCUMULATED
// (nullptr = not wanted). `workspace` holds rmsnorm_backward_cuda_workspace_bytes(p) bytes, used only by work on
// `stream`.
void rmsnorm_backward_cuda(float* dx, float* dweight, const float* d_out, const float* x, const float* weight,
                           const RmsnormCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
void rmsnorm_backward_cuda(__nv_bfloat16* dx, float* dweight, const __nv_bfloat16* d_out, const __nv_bfloat16* x,
                           const __nv_bfloat16* weight, const RmsnormCudaParams& p, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
