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
//       longer rows up to rmsnorm_cuda_regs_max_dim() under HLM_RMSNORM_FUSED_BACKWARD (below; on by default):
//         fused into the block path's backward pass the same way with
//         W = 1 (one row in flight per block: group g = rows [g·rows_per_warp, (g + 1)·rows_per_warp), thread t adds
//         fma(d_out · x, r, acc) for its columns t, t + T, ... in row order and stores its part of the partial row),
//         then the same finish kernel. The row's x, d_out and weight are held in registers, so the pass reads x and
//         d_out once (the former row-stats, dx and column-sum kernels read them three times: ~185 µs per [8192, 2560]
//         f32 call on the H200, session 36 trace).
//       otherwise: the two-pass column sum (backend/cuda/column_sum.h) of (d_out · x) · r.
// Shapes: x, out, d_out, dx [rows, dim]; weight, dweight [dim].
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/column_sum.h"
#include "backend/cuda/row_partials.h"

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
// Rows up to this length hold the row in registers on the block path (16 elements per thread; hidden sizes up to
// 4096): the forward's register kernel and the backward's fused pass with its dweight partial rows.
constexpr int64_t rmsnorm_cuda_regs_max_dim() { return 16 * rmsnorm_cuda_threads(); }
// Rows (warps, or blocks on the block path) in flight per block of the fused backward: W of row_partials.h.
constexpr int rmsnorm_cuda_dweight_rows_in_flight(int64_t dim) {
  return dim <= rmsnorm_cuda_warp_max_dim() ? rmsnorm_cuda_warp_rows() : 1;
}

// Fused backward (dim ≤ rmsnorm_cuda_regs_max_dim()): how the rows are cut for the fused dweight sum (see Numerics;
// the shared plan and its bounds: backend/cuda/row_partials.h). A pure function of (rows, dim), so results are
// bit-identical run to run and independent of the GPU model. rows_per_warp ≥ 2 keeps the partial rows' traffic
// ≤ 1/24 of the pass's own (f32; 1/12 with bf16 rows) on the warp path; on the block path (W = 1) the groups are
// capped at clamp(2^20 / dim, 1024, 4096) = 1024 there, so a group holds max(2, ceil(rows / 1024)) rows.
using RmsnormCudaDweightPlan = RowPartialsPlan;
constexpr int rmsnorm_cuda_dweight_finish_slices() { return 128; }  // S
constexpr RmsnormCudaDweightPlan rmsnorm_cuda_dweight_plan(int64_t rows, int64_t dim) {
  return row_partials_plan(rows, dim, rmsnorm_cuda_dweight_rows_in_flight(dim));
}

// Longest chain of fp32 roundings behind one dweight element, for the tests' tolerance.
//   fused (the warp path; the block path up to rmsnorm_cuda_regs_max_dim() when `block_fused`, i.e. under
//   rmsnorm_cuda_fused_backward()): row_partials_chain, and dweight += (1).
//   otherwise: column_sum_path_length.
constexpr int64_t rmsnorm_cuda_dweight_chain(int64_t rows, int64_t dim, bool block_fused) {
  if (dim > rmsnorm_cuda_warp_max_dim() && (!block_fused || dim > rmsnorm_cuda_regs_max_dim()))
    return column_sum_path_length(column_sum_plan(rows, dim, ~size_t{0} / 2));
  return row_partials_chain(rows, dim, rmsnorm_cuda_dweight_rows_in_flight(dim),
                            rmsnorm_cuda_dweight_finish_slices()) +
         1;
}

// out = x · (mean(x²) + eps)^-1/2 · weight; out may alias x.
void rmsnorm_forward_cuda(float* out, const float* x, const float* weight, const RmsnormCudaParams& p,
                          cudaStream_t stream);
void rmsnorm_forward_cuda(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                          const RmsnormCudaParams& p, cudaStream_t stream);

// A pre-norm block's residual add and the next norm: x += scale · delta (in place; product and sum rounded
// separately, as residual_add_forward_cuda), then out = rmsnorm(x) · weight. Bit-identical to those two calls; one
// launch for rows of dim ≤ 16 · rmsnorm_cuda_threads() (hidden sizes up to 4096: the warp path up to
// rmsnorm_cuda_warp_max_dim(), the block path above), the two launches beyond. out may alias delta, never x.
void rmsnorm_residual_forward_cuda(float* out, float* x, const float* delta, float scale, const float* weight,
                                   const RmsnormCudaParams& p, cudaStream_t stream);

// The same two forwards also writing out16 [rows, dim], the bf16 rounding of `out` (cast_f32_to_bf16_cuda's bits,
// NaN payloads included) from the same registers: for a pre-norm block whose branch multiplies its normed input on
// the tensor cores, the cast launch that would follow goes away (one read of out and one launch less). Rows longer
// than 16 · rmsnorm_cuda_threads() take the cast as a second launch. out16 may alias nothing; null: exactly the
// plain launchers above (so a caller whose rounding is optional passes it through).
void rmsnorm_forward_rounded_cuda(float* out, __nv_bfloat16* out16, const float* x, const float* weight,
                                  const RmsnormCudaParams& p, cudaStream_t stream);
void rmsnorm_residual_forward_rounded_cuda(float* out, __nv_bfloat16* out16, float* x, const float* delta,
                                           float scale, const float* weight, const RmsnormCudaParams& p,
                                           cudaStream_t stream);

// The residual add out of place: x_out = x + scale · delta (x only read), then out = rmsnorm(x_out) · weight, and
// out16 as above when given: the same bits as rmsnorm_residual_forward_rounded_cuda on a copy of x (one launch where
// that is one; rows longer than 16 · rmsnorm_cuda_threads() take a copy of x into x_out first). On the warp path
// (dim ≤ rmsnorm_cuda_warp_max_dim(), a multiple of 4) with 16-byte aligned x, out, weight and delta, x_out must be 16-byte aligned
// too (else a contract error: the in-place call's vector slices decide out's bits and store 16-byte rows). For a
// decoder whose training trace keeps the residual stream at every layer: the add writes the next snapshot, so none is
// copied (CudaModel::run_decoder). x_out may equal x (then exactly rmsnorm_residual_forward_rounded_cuda); it may
// alias nothing else, nor may out alias x or x_out.
void rmsnorm_residual_into_forward_rounded_cuda(float* out, __nv_bfloat16* out16, float* x_out, const float* x,
                                                const float* delta, float scale, const float* weight,
                                                const RmsnormCudaParams& p, cudaStream_t stream);

// A post-norm block's norm of its branch and the residual add of the result: out = rmsnorm(x) · weight, then
// residual += scale · out (product and sum rounded separately, as residual_add_forward_cuda). Bit-identical to
// rmsnorm_forward_cuda followed by residual_add_forward_cuda(residual, out, scale); one launch where the plain
// forward is one (rows up to 16 · rmsnorm_cuda_threads(), with `residual` 16-byte aligned whenever the warp path takes
// its vector slices), the two launches otherwise. At batch-1 decode of a post-norm model (OLMo 3: two per layer) the
// residual add's launch and its gap before the next GEMV go away. out may alias x; residual may alias nothing.
void rmsnorm_post_residual_forward_cuda(float* out, float* residual, const float* x, float scale,
                                        const float* weight, const RmsnormCudaParams& p, cudaStream_t stream);

// HLM_RMSNORM_FUSED_BACKWARD=on|off (core/env_switch.h; on by default since session 39: the whole GPU suites passed
// with it on, test_cuda_ops 125/125 and test_cuda_models 107/107 on an H100, and the 4B step under the seed's recipe
// took 0.8-1.0 % less time, 8,786.9 -> 8,703.0 ms per 96 rows at micro-batch 2, docs/benchmarks.md): whether rows
// longer than a warp's and up to rmsnorm_cuda_regs_max_dim() take the fused backward (Numerics) or the three passes
// (row stats, the column sum, dx: the same r, m and dx bits, dweight summed in the column sum's order);
// bench_distill_step --norm-fused-backward A/Bs it. The workspace size follows it. The setter overrides the variable
// for the process (1 / 0; −1: the environment again).
bool rmsnorm_cuda_fused_backward();
void rmsnorm_cuda_set_fused_backward(int on);

// Bytes of device scratch rmsnorm_backward_cuda needs: on the fused paths (dim ≤ rmsnorm_cuda_warp_max_dim(), and up
// to rmsnorm_cuda_regs_max_dim() under rmsnorm_cuda_fused_backward()) the dweight partial rows (groups · dim floats);
// otherwise per-row statistics and the column sum's partials.
size_t rmsnorm_backward_cuda_workspace_bytes(const RmsnormCudaParams& p);

// dx = r · (g − n · mean(g · n)) OVERWRITTEN (dx may alias d_out); dweight += Σ_rows d_out · n ACCUMULATED
// (nullptr = not wanted). `workspace` holds rmsnorm_backward_cuda_workspace_bytes(p) bytes, used only by work on
// `stream`. accumulate_dx (f32 only): dx += that value instead, one fp32 addition, the bits of the overwriting call
// followed by residual_add_forward_cuda(dx_before, dx, 1) (a pre-norm block's residual gradient in one pass); dx
// may then not alias d_out.
void rmsnorm_backward_cuda(float* dx, float* dweight, const float* d_out, const float* x, const float* weight,
                           const RmsnormCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                           bool accumulate_dx = false);
// The f32 backward also writing dx16 [rows, dim], the bf16 rounding of the dx it stores (after the accumulation;
// cast_f32_to_bf16_cuda's bits, NaN payloads included), from the same registers on the fused paths (the warp path;
// the block path under rmsnorm_cuda_fused_backward()), else by a cast launch after the dx kernel: for a pre-norm
// block's residual gradient, whose next readers (the branch's output projection backward) multiply its bf16 rounding
// on the tensor cores. dx16 needs dx and may alias none of dx, d_out, x; null: exactly rmsnorm_backward_cuda.
void rmsnorm_backward_rounded_cuda(float* dx, __nv_bfloat16* dx16, float* dweight, const float* d_out, const float* x,
                                   const float* weight, const RmsnormCudaParams& p, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream, bool accumulate_dx = false);
void rmsnorm_backward_cuda(__nv_bfloat16* dx, float* dweight, const __nv_bfloat16* d_out, const __nv_bfloat16* x,
                           const __nv_bfloat16* weight, const RmsnormCudaParams& p, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
