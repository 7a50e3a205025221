// Gated RMSNorm on CUDA: launchers for the contract in gated_rmsnorm.h (norm before the gate, plain weight w; same
// formulas, aliasing rules and overwrite semantics), f32, raw device pointers, queued on `stream`, no
// synchronization.
// Numerics (the CPU reference accumulates in double): mean(x²) and Σ dy·w·silu(z)·x are fp32 sums with FMA in a
// fixed order (deterministic):
//   dim ≤ gated_rmsnorm_cuda_warp_max_dim(): one warp per row; lane l sums in order, in one accumulator, the
//     elements of the float4 vectors l, l + 32, ... when every pointer is 16-byte aligned and dim % 4 == 0 (at most
//     4·ceil(dim / 128) terms), else the elements l, l + 32, ... (ceil(dim / 32) terms); then a 5-level xor-shuffle
//     tree.
//   longer rows: one block of gated_rmsnorm_cuda_threads() threads per row; thread t sums the elements t, t + T, ...
//     in order (ceil(dim / T) terms), then block_sum (cuda_common.cuh: 5 + T/32 roundings).
// silu(z) = z / (1 + e^-z) with expf (≤ 2 ulp); 1 − σ(z) is computed as σ(−z). fp32 Σx² overflows for
// |x| ≳ 1.8e19 / sqrt(dim) (the CPU's double does not).
// dw = Σ_rows dy · x · r · silu(z), fp32, deterministic (fixed order, no atomics):
//   dim ≤ gated_rmsnorm_cuda_warp_max_dim(): fused into the backward pass (plan: gated_rmsnorm_cuda_dw_plan). The
//     rows are cut into `groups` row-groups of W · rows_per_warp consecutive rows (W = gated_rmsnorm_cuda_warp_rows()),
//     one block each; warp k of a group takes the group's rows k, k + W, ... and each lane adds, in that row order,
//     fma((dy · x) · r, silu(z), acc) for its columns; the block adds its W warp partials in warp order (shared
//     memory) into one partial row; a finish kernel then gives each column S = gated_rmsnorm_cuda_dw_finish_slices()
//     slices (slice s adds partial rows s, s + S, ... in order) and a fixed halving tree over the slices, and writes
//     the total. Longest chain of roundings: gated_rmsnorm_cuda_dw_chain.
//   longer rows: the two-pass column sum (backend/cuda/column_sum.h) of ((dy · x) · r) · silu(z) into a zeroed dw.
// Shapes: x, z, y, dy, dx, dz [rows, dim]; w, dw [dim].
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/column_sum.h"
#include "backend/cuda/row_partials.h"

namespace hlm {

struct GatedRmsnormCudaParams {
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-5f;
};

// Rows up to this length get one warp each (several rows per block); longer rows get a block of
// gated_rmsnorm_cuda_threads() threads. The tests derive their tolerances from both (summation order above).
constexpr int64_t gated_rmsnorm_cuda_warp_max_dim() { return 1024; }
constexpr int gated_rmsnorm_cuda_threads() { return 128; }
constexpr int gated_rmsnorm_cuda_warp_rows() { return 8; }  // W: warps (rows in flight) per block on the warp path

// Warp-path backward: how the rows are cut for the fused dw sum (see above; the shared plan and its bounds:
// backend/cuda/row_partials.h). A pure function of (rows, dim), so results are bit-identical run to run and
// independent of the GPU model. rows_per_warp ≥ 2 keeps the partial rows' traffic ≤ 1/40 of the pass's own (x, z, dy
// read, dx, dz written).
using GatedRmsnormCudaDwPlan = RowPartialsPlan;
constexpr int gated_rmsnorm_cuda_dw_finish_slices() { return 128; }  // S
constexpr GatedRmsnormCudaDwPlan gated_rmsnorm_cuda_dw_plan(int64_t rows, int64_t dim) {
  return row_partials_plan(rows, dim, gated_rmsnorm_cuda_warp_rows());
}

// Longest chain of fp32 roundings behind one dw element, for the tests' tolerance.
//   warp path: row_partials_chain; dw is overwritten (no final add).
//   longer rows: column_sum_path_length (its final add is onto the zeroed dw, counted there).
constexpr int64_t gated_rmsnorm_cuda_dw_chain(int64_t rows, int64_t dim) {
  if (dim > gated_rmsnorm_cuda_warp_max_dim())
    return column_sum_path_length(column_sum_plan(rows, dim, ~size_t{0} / 2));
  return row_partials_chain(rows, dim, gated_rmsnorm_cuda_warp_rows(), gated_rmsnorm_cuda_dw_finish_slices());
}

// y = x·(mean(x²) + eps)^-1/2 · w · silu(z); y may alias x or z.
void gated_rmsnorm_forward_cuda(float* y, const float* x, const float* z, const float* w,
                                const GatedRmsnormCudaParams& p, cudaStream_t stream);
// The same y rounded to bf16 (the GDN layer's bf16 compute mode, where o_proj's product is y's one reader): the bits of
// gated_rmsnorm_forward_cuda followed by cast_f32_to_bf16_cuda, without the fp32 round trip through memory (the same
// kernels, the output rounded at the store). The vector (float4) order needs x, z, w 16-byte aligned and y 8-byte
// aligned, the fp32 launcher's y 16-byte: outputs allocated alike give the same order. y may not alias x or z.
void gated_rmsnorm_forward_bf16_cuda(__nv_bfloat16* y, const float* x, const float* z, const float* w,
                                     const GatedRmsnormCudaParams& p, cudaStream_t stream);

// Bytes of device scratch gated_rmsnorm_backward_cuda needs: dim ≤ gated_rmsnorm_cuda_warp_max_dim(): the dw
// partial rows (groups · dim floats); longer rows: per-row r and the column sum's partials.
size_t gated_rmsnorm_backward_cuda_workspace_bytes(const GatedRmsnormCudaParams& p);

// dx, dz OVERWRITTEN (may not alias inputs); dw [dim] OVERWRITTEN (nullptr = not wanted). `workspace` holds
// gated_rmsnorm_backward_cuda_workspace_bytes(p) bytes, used only by work on `stream`.
void gated_rmsnorm_backward_cuda(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                 const float* w, const GatedRmsnormCudaParams& p, void* workspace,
                                 size_t workspace_bytes, cudaStream_t stream);
// The same with dz rounded to bf16 (the GDN layer's bf16 compute mode, where g_proj's backward products are dz's one
// reader): dx and dw the bits of gated_rmsnorm_backward_cuda, dz the bits of casting its dz (cast_f32_to_bf16_cuda),
// under the same alignment rule as the forward's bf16 output (dz 8-byte aligned for the vector order).
void gated_rmsnorm_backward_bf16_dz_cuda(float* dx, __nv_bfloat16* dz, float* dw, const float* dy, const float* x,
                                         const float* z, const float* w, const GatedRmsnormCudaParams& p,
                                         void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
