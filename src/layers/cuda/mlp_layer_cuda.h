// The SwiGLU MLP on CUDA: the forward of layers/mlp_layer.h, out = down_proj(silu(gate_proj(x)) ⊙ up_proj(x)), fp32.
// x, out [T, hidden] device pointers (out may not alias x); scratch gate, up [T, F] from ctx's allocator, released on
// return (h is computed in gate's storage; in the bf16 mode only its bf16 rounding is written, to scratch). Queued on ctx's stream, no synchronization.
// bf16 compute mode (the linears' weight_bf16, layers/cuda/cuda_linear.h): x is rounded to bf16 once per call and
// shared by gate_proj and up_proj (forward and backward); the kept h is bf16 only (down_proj is its one reader);
// gate and up stay fp32 (swiglu's backward reads them). Every result is BIT-IDENTICAL to rounding inside each
// projection (the rounding is deterministic), so the modes' numbers did not change with the sharing.
// The bf16 gate/up form (layers/mlp_bf16_gate_up.h, HLM_MLP_BF16_GATE_UP, on by default; mlp_takes_bf16_gate_up
// says when it applies): gate_proj and up_proj write bf16 (cuda_linear_forward_bf16_out), SwiGLU reads them
// (swiglu_*_bf16_in_cuda), and the kept gate and up are those bf16 tensors. Every entry point below takes the same
// form for the same call, so the lean forward, the kept forward and the recomputing backward still agree bit for bit
// with each other.
#pragma once
#include "backend/cuda/cuda_context.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/mlp_layer.h"

namespace hlm {

struct CudaMlpWeights {
  CudaLinear gate_proj, up_proj, down_proj;
};

// Checks the host shapes (gate/up [F, hidden], down [hidden, F]) and uploads them.
CudaMlpWeights cuda_upload_mlp(CudaContext& ctx, const MlpWeights& w);

void mlp_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaMlpWeights& w, int64_t tokens);
// The same with x's bf16 rounding given beside it (cuda_linear.h: then not rounded again here).
void mlp_layer_forward_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x, const CudaMlpWeights& w,
                            int64_t tokens);

// The forward's intermediates, device tensors [T, F] each: what the backward needs.
struct MlpCudaActivations {
  CudaTensor gate, up;      // x gate_projᵀ, x up_projᵀ, fp32 (empty in the bf16 gate/up form)
  CudaTensor h;             // silu(gate) ⊙ up (down_proj's input), fp32: fp32 mode only (else empty)
  CudaTensor h16;           // h rounded to bf16: bf16 compute mode only (else empty); the fp32 h is not kept
  CudaTensor gate16, up16;  // the bf16 gate/up form only: the products written in bf16 (else empty)
};

// Whether a call of `tokens` rows takes the bf16 gate/up form: the switch is on, gate_proj and up_proj run in the bf16
// mode without biases, and the rows are beyond what the small-row GEMV takes (decode keeps its fp32 GEMV and the
// SwiGLU fold, cuda_linear.h).
bool mlp_takes_bf16_gate_up(const CudaMlpWeights& w, int64_t tokens);

// Runs the forward up to h, keeping gate, up and h (fp32 mode) or h16 (bf16 mode: swiglu_forward_bf16_cuda writes
// the rounding of the fp32 h directly). swiglu is elementwise, so h has the bits of the in-place h that
// mlp_layer_forward_cuda computes inside gate's storage. x: fp32, with its bf16 rounding if the caller has it
// (cuda_linear.h), else rounded once here for both projections. In the bf16 gate/up form gate16 and up16 are kept
// instead of gate and up.
MlpCudaActivations mlp_forward_activations_cuda(CudaContext& ctx, const CudaLinearInput& x, const CudaMlpWeights& w,
                                                int64_t tokens);
// out = h down_projᵀ after mlp_forward_activations_cuda, handing the intermediates back (kept activations,
// models/cuda/cuda_model_train.h). The same out as mlp_layer_forward_cuda, bit for bit; kept: 3·T·F floats (fp32
// mode), 2·T·F floats + T·F bf16 (bf16 mode) or 3·T·F bf16 (the bf16 gate/up form).
MlpCudaActivations mlp_layer_forward_keep_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                               const CudaMlpWeights& w, int64_t tokens);

// The backward of layers/mlp_layer.h with per-layer recomputation (mlp_layer_cuda_backward.cpp):
// mlp_forward_activations_cuda then mlp_layer_backward_from_cuda. dx [T, hidden] OVERWRITTEN and grads (same layout
// as w, device) ACCUMULATED (+=), in the CPU's order. dx may not alias d_out or x. d_out16 (optional): d_out's bf16
// rounding (cast_f32_to_bf16_cuda's bits), which down_proj's backward then reads in the bf16 compute mode instead of
// rounding d_out again (the same bits; cuda_linear_backward_dy16).
void mlp_layer_backward_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& grads, const float* d_out, const float* x,
                             const CudaMlpWeights& w, int64_t tokens);
// The same with x's bf16 rounding given beside it (cuda_linear.h: then not rounded again here).
void mlp_layer_backward_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& grads, const float* d_out,
                             const CudaLinearInput& x, const CudaMlpWeights& w, int64_t tokens,
                             const __nv_bfloat16* d_out16 = nullptr);
// The walk back from given activations `act` (of this x and w): down_proj, swiglu, gate/up projections. Same contract
// as mlp_layer_backward_cuda; act is only read. x as in mlp_forward_activations_cuda (in the bf16 mode its bf16
// rounding alone is enough; it is rounded once here otherwise).
void mlp_layer_backward_from_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& grads, const float* d_out,
                                  const CudaLinearInput& x, const MlpCudaActivations& act, const CudaMlpWeights& w,
                                  int64_t tokens, const __nv_bfloat16* d_out16 = nullptr);

}  // namespace hlm
