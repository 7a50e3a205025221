// A linear projection on the device (HF layout, as layers/linear.h): weight [out, in], optional bias [out], f32.
// y [rows, out] = x [rows, in] · weightᵀ + bias through cuBLASLt with fp32 accumulation, in one of two modes:
//   fp32 (weight_bf16 empty): matmul_forward_cuda, fp32 operands and products;
//   bf16 compute (weight_bf16 holds the weight rounded to bf16, cuda_linear_refresh_bf16 after every update of the
//     fp32 master weight): the products run on bf16 tensor cores with fp32 results (matmul_forward_mixed_cuda /
//     matmul_backward_mixed_cuda) on x and dy rounded to bf16. dy is rounded in scratch by each call; x is read as
//     a CudaLinearInput: its bf16 rounding when the caller has it (a layer rounds an x that feeds several
//     projections once, cuda_linear_round_input, or keeps an activation that only GEMMs read in bf16 only), else
//     rounded in scratch here. The rounding is deterministic (cast_f32_to_bf16_cuda, bit-identical to
//     core/dtype.h), so a pre-rounded x gives the same bits as rounding inside the call. Which activations are bf16:
//     docs/cuda.md (bf16 compute mode); everything else between ops, the bias, the gradients and the master weights
//     stay fp32.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <span>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_tensor.h"
#include "layers/linear.h"
#include "ops/matmul/gemv_cuda.h"

namespace hlm {

struct CudaLinear {
  CudaTensor weight;  // [out, in]
  CudaTensor bias;    // [out] or empty (numel 0, never read)
  CudaTensor weight_bf16;  // [out, in] bf16 copy of weight in the bf16 compute mode, else empty
  bool has_bias = false;
  int64_t out_features = 0;
  int64_t in_features = 0;
  // Gradient holders only: `weight` is known to hold zeros (CudaModel::set_zero sets this after its memset; the next
  // cuda_linear_backward into the holder clears it). A bf16 holder is then OVERWRITTEN with the product's bf16
  // rounding instead of taking the add-and-round path (matmul_backward_mixed_bf16_overwrite_cuda).
  bool weight_zeroed = false;
};

// Uploads a host Linear (contiguous f32; input error otherwise).
CudaLinear cuda_upload_linear(CudaContext& ctx, const Linear& host, const char* name);

// Uploads a contiguous f32 host tensor (input error naming `name` otherwise).
CudaTensor cuda_upload_f32(CudaContext& ctx, const Tensor& host, const char* name);
// The same for a tensor that must hold exactly n values (input error naming `name` when absent or of another size).
CudaTensor cuda_upload_f32_sized(CudaContext& ctx, const Tensor& host, int64_t n, const char* name);

// Switches the bf16 compute mode on (allocates weight_bf16 and fills it from weight) or off (frees it).
void cuda_linear_set_bf16(CudaContext& ctx, CudaLinear& layer, bool on);
// Re-rounds weight_bf16 from the fp32 weight (after an optimizer step); nothing in the fp32 mode.
void cuda_linear_refresh_bf16(CudaContext& ctx, CudaLinear& layer);

// Rounds n floats into a new bf16 scratch tensor (cast_f32_to_bf16_cuda), queued on ctx's stream.
CudaTensor cuda_round_bf16(CudaContext& ctx, const float* src, int64_t n);
// Rounds a whole f32 tensor into a new bf16 tensor of the same shape (an activation kept in bf16 only).
CudaTensor cuda_round_bf16(CudaContext& ctx, const CudaTensor& src);

// A linear's input x [rows, in]: the fp32 tensor, its bf16 rounding, or both (nullptr = not held).
//   fp32 mode: f32 is read (required unless rows == 0); bf16 is ignored.
//   bf16 compute mode: bf16 is read when set; it MUST hold exactly x rounded by cast_f32_to_bf16_cuda (or written by
//     a kernel that rounds the same way), so the products are bit-identical to rounding f32 inside the call. When
//     bf16 is nullptr, f32 is rounded into scratch (one cast per call).
//   norm (nullable): x is the output of a row RMSNorm not launched yet (CudaDeferredNorm, below); f32 / bf16 name
//     where it will be. The first reader computes it: the small-row GEMV in its prologue when it takes the norm, any
//     other reader by launching it first (cuda_linear_settle). Every function here that reads x settles it.
struct CudaDeferredNorm;
struct CudaLinearInput {
  const float* f32 = nullptr;
  const __nv_bfloat16* bf16 = nullptr;
  const CudaDeferredNorm* norm = nullptr;
};

// A row RMSNorm (with its residual add) left for the first reader of its output (the batch-1 decode's input norms,
// CudaModel::run_decoder): `op` says what to compute (gemv_cuda.h, GemvNorm: the pre-norm input form, or a post-norm
// branch's norm with the residual add whose result is the next input), over rows × dim. `issued` turns true once a
// reader has queued it; readers after that read the memory. The GEMV's prologue and the separate launches give the
// same bits (gemv_cuda.h).
struct CudaDeferredNorm {
  GemvNorm op;
  int64_t rows = 0, dim = 0;
  mutable bool issued = false;
};

// Queues x's deferred norm when one is set and not yet queued (rmsnorm_cuda.h's launchers: the pre form as
// rmsnorm_forward_rounded_cuda / rmsnorm_residual_into_forward_rounded_cuda, the post form as a copy of h into h_out
// and rmsnorm_post_residual_forward_cuda there); nothing otherwise.
void cuda_linear_settle(CudaContext& ctx, const CudaLinearInput& x);
// Deferred norms a GEMV took into its prologue in this process (host calls, not graph replays): the tests' proof.
int64_t cuda_linear_prologue_norms();

// Whether `layer` runs in the bf16 compute mode (weight_bf16 allocated).
bool cuda_linear_is_bf16(const CudaLinear& layer);

// The input held by an fp32 and/or a bf16 tensor (an empty tensor, e.g. the one not kept in the current mode,
// gives nullptr).
CudaLinearInput cuda_linear_input(const CudaTensor& f32, const CudaTensor& bf16);

// Rounds a shared input once for all the linears that read it (`reader`: any of them; they run in one mode): x itself
// when it already carries its bf16 rounding or `reader` runs in fp32 (`rounded` untouched); otherwise {x.f32, x.f32
// rounded into `rounded`, a new bf16 scratch tensor [rows·in]}. Keep `rounded` alive while the result is used.
CudaLinearInput cuda_linear_round_input(CudaContext& ctx, CudaTensor& rounded, const CudaLinearInput& x,
                                        const CudaLinear& reader, int64_t rows);

// y [rows, out] OVERWRITTEN from x [rows, in]; queued on ctx's stream.
void cuda_linear_forward(CudaContext& ctx, float* y, const CudaLinearInput& x, const CudaLinear& layer, int64_t rows);
// The same from an fp32 x (rounded in scratch in the bf16 compute mode).
void cuda_linear_forward(CudaContext& ctx, float* y, const float* x, const CudaLinear& layer, int64_t rows);

// The bf16 compute mode's product written as bf16: y16 [rows, out] OVERWRITTEN with x · Wᵀ rounded once from
// cuBLASLt's fp32 sum (matmul_forward_cuda's bf16 output; the row-by-row fp32 sums of cuda_linear_forward's cuBLASLt
// path, though cuBLASLt may pick another algorithm for the other output type, so equal to rounding its fp32 y to
// within the sums' order, not bit for bit). For consumers that read only the rounding (mlp_bf16_gate_up.h); never
// takes the small-row GEMV. `layer` must be in the bf16 mode and have no bias (internal error otherwise).
void cuda_linear_forward_bf16_out(CudaContext& ctx, __nv_bfloat16* y16, const CudaLinearInput& x,
                                  const CudaLinear& layer, int64_t rows);
// Whether cuda_linear_forward / _group take the small-row GEMV for `rows` rows (HLM_GEMV; 1 row by default), given
// bf16 linears of a shape it supports.
bool cuda_linear_gemv_may_take(int64_t rows);

// Several linears reading the same x [rows, in], each into its own y [rows, out_i] (OVERWRITTEN). In the bf16 compute
// mode with ONE row (batch-1 decode steps) they run as ONE launch of the small-row GEMV (ops/matmul/gemv_cuda.h: x
// rounded inside it, no cast launch); otherwise one cuda_linear_forward each with x rounded once. cuda_linear_forward
// with one row takes the same GEMV. HLM_GEMV in the environment: off (or 0) keeps every product on cuBLASLt, N (≤ 4)
// takes the GEMV up to N rows (A/B measurements). The two paths agree to fp32 summation order, not bit for bit.
struct CudaLinearOut {
  float* y = nullptr;
  const CudaLinear* layer = nullptr;
};
void cuda_linear_forward_group(CudaContext& ctx, std::span<const CudaLinearOut> outs, const CudaLinearInput& x,
                               int64_t rows);

// A SwiGLU MLP's h [rows, F] = silu(x · gateᵀ) ⊙ (x · upᵀ) as ONE launch of the small-row GEMV with SwiGLU in its
// epilogue (ops/matmul/gemv_cuda.h, gemv_bf16_swiglu_cuda: bit-identical to cuda_linear_forward_group's GEMV of the
// two products followed by swiglu_forward_cuda / swiglu_forward_bf16_cuda), h as fp32 (h_f32) or its bf16 rounding
// (h_bf16), exactly one non-null. Taken where that GEMV would be (bf16 mode, rows within HLM_GEMV's limit) and the
// fold is on; false: nothing launched, the caller runs the separate ops. On by default since session 31 measured it
// on the H200 (batch-1 decode at L 1024: olmo3_7b 4.66 -> 4.60 ms per step, olmo_hybrid_7b 4.71 -> 4.64, qwen3_4b
// 3.32 -> 3.33; the logits' bytes equal with it off): HLM_GATE_UP_SWIGLU=on|off (core/env_switch.h), or the setter.
bool cuda_linear_try_swiglu_gemv(CudaContext& ctx, float* h_f32, __nv_bfloat16* h_bf16, const CudaLinearInput& x,
                                 const CudaLinear& gate, const CudaLinear& up, int64_t rows);
bool cuda_linear_swiglu_gemv_enabled();
void cuda_linear_set_swiglu_gemv(bool on);
// Launches cuda_linear_try_swiglu_gemv has queued in this process (host calls: a CUDA graph's replays do not count),
// so tests can tell that the fold ran.
int64_t cuda_linear_swiglu_gemv_launches();

// The backward of cuda_linear_forward (matmul_backward_cuda): dx [rows, in] = dy · W, OVERWRITTEN (ADDED when
// accumulate_dx; nullptr = not wanted); grad.weight += dyᵀ · x and grad.bias += Σ_rows dy (ACCUMULATED). grad has
// the layout of `layer` (a device gradient holder uploaded like the weights). x as in the forward; dy is fp32 and is
// rounded in scratch in the bf16 compute mode.
void cuda_linear_backward(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy, const CudaLinearInput& x,
                          const CudaLinear& layer, int64_t rows, bool accumulate_dx);
void cuda_linear_backward(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy, const float* x,
                          const CudaLinear& layer, int64_t rows, bool accumulate_dx);
// The same in the bf16 compute mode with dy given as its bf16 rounding (its producer wrote the rounding instead of the
// fp32 values, e.g. swiglu_backward_bf16_cuda): the products of cuda_linear_backward on the fp32 dy that rounds to
// dy16, so bit-identical to it. `layer` must be in the bf16 mode (internal error otherwise).
void cuda_linear_backward_bf16_dy(CudaContext& ctx, float* dx, CudaLinear& grad, const __nv_bfloat16* dy16,
                                  const CudaLinearInput& x, const CudaLinear& layer, int64_t rows, bool accumulate_dx);
// cuda_linear_backward on the fp32 dy with its bf16 rounding given beside it (dy16: cast_f32_to_bf16_cuda's bits of
// dy, e.g. written by the norm backward that produced dy, rmsnorm_backward_rounded_cuda): in the bf16 compute mode
// cuda_linear_backward_bf16_dy on dy16 (the same products, without rounding dy again); in the fp32 mode, or with
// dy16 null, exactly cuda_linear_backward.
void cuda_linear_backward_dy16(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy,
                               const __nv_bfloat16* dy16, const CudaLinearInput& x, const CudaLinear& layer,
                               int64_t rows, bool accumulate_dx);

// The bf16 compute mode's backward with dx written as its bf16 rounding: dx16 [rows, in] OVERWRITTEN with dy · W rounded
// once from cuBLASLt's fp32 sum (the fp32 sums of cuda_linear_backward's dx, though cuBLASLt may pick another
// algorithm for the other output type, so equal to rounding its fp32 dx to within the sums' order, not bit for bit);
// grad as cuda_linear_backward (the same weight-gradient product, queued after dx's as there). dy fp32, rounded in
// scratch unless its rounding is given (dy16, as cuda_linear_backward_dy16). For a dx whose only reader takes bf16
// (the MLP's dh under HLM_MLP_BF16_DH, layers/mlp_bf16_gate_up.h). `layer` must be in the bf16 mode (internal error
// otherwise).
void cuda_linear_backward_bf16_dx(CudaContext& ctx, __nv_bfloat16* dx16, CudaLinear& grad, const float* dy,
                                  const CudaLinearInput& x, const CudaLinear& layer, int64_t rows,
                                  const __nv_bfloat16* dy16 = nullptr);

// How a bf16 weight-gradient holder (the lean plan) takes each call's dyᵀ·x. A holder with weight_zeroed (the first
// micro-batch of a step: nothing to add to) gets it written, bf16(dyᵀ·x) in the GEMM's epilogue: no scratch, no
// add-and-round kernel, 10 bytes per element less traffic (HLM_DW_BF16_OVERWRITE=off keeps the add-and-round path
// there too, for A/B timing). Otherwise, as HLM_DW_BF16_EPILOGUE says:
//   on (default since session 38, or 1): cuBLASLt's bf16 output with C = D = dw and beta 1: no scratch, no
//     add-and-round kernel (8 bytes per element less memory traffic), but not one rounding (the product rounded to
//     bf16 first, then the sum: within half a bf16 ulp of the product plus half of the result; matmul_cuda.h), the
//     two roundings a bf16 PyTorch model's `grad += new_grad` makes too. Why the default: the 4B step under the
//     seed's recipe took 8,056.0 instead of 8,146.8 ms per 96 rows at micro-batch 8 (H200, session 36) and 5.6 % less
//     at micro-batch 2 (H100, session 34), and the whole GPU suites passed with it on (H200, session 38);
//   off (or 0): the fp32 product in an fp32 scratch block [out, in] (allocator-cached, one per linear shape;
//     4·out·in bytes: 99.6 MB for the 4B student's 9,728 × 2,560 MLP products), then dw = bf16_rn(dw + product), one
//     rounding (matmul_backward_mixed_cuda with dw_scratch): for runs that want the one-rounding contract.
// Any other value: input error (core/env_switch.h). The setter overrides the variable for the process (1 / 0; −1: the
// environment again), e.g. bench_distill_step --dw-paths.
bool cuda_linear_dw_bf16_epilogue();
void cuda_linear_set_dw_bf16_epilogue(int on);
// HLM_DW_BF16_OVERWRITE (core/env_switch.h, on by default); the setter overrides it for the process (1 / 0; −1: the
// environment again), e.g. for a test that runs a step both ways.
bool cuda_linear_dw_bf16_overwrite();
void cuda_linear_set_dw_bf16_overwrite(int on);
// Weight gradients written by the overwrite path in this process (host calls), so tests can tell that it ran.
int64_t cuda_linear_dw_overwrites();

// Device scratch of `bytes` bytes from ctx's allocator (released when the tensor goes; safe on ctx's one stream).
CudaTensor cuda_scratch_bytes(CudaContext& ctx, size_t bytes);

// Device-to-device copy of `bytes` bytes, queued on ctx's stream (no wait).
void cuda_copy_device(CudaContext& ctx, void* dst, const void* src, size_t bytes);

// dst += src over n floats (the CPU backwards' add_into of op-level gradients), bit-identical to the CPU's float +=.
void cuda_add_into(CudaContext& ctx, float* dst, const float* src, int64_t n);

}  // namespace hlm
