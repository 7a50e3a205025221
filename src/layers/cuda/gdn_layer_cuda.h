// The Gated DeltaNet token mixer on CUDA: the forward of layers/gdn_layer.h (dataflow there), fp32, zero initial
// state, final state discarded (prefill / analysis; decode state on the GPU is not done yet):
//   q̃, k̃, ṽ, z, a, b = x W*ᵀ;  q, k, v = SiLU(causal conv(q̃, k̃, ṽ));  q, k ← per-head L2 norm
//   g, β = gdn_gate(a, b);  o = gated delta rule(q, k, v, g, β, scale);  out = (rmsnorm(o)·o_norm·silu(z)) Woᵀ
// x, out [T, hidden] device pointers (out may not alias x); scratch from ctx's allocator, released on return.
// Queued on ctx's stream, no synchronization.
// bf16 compute mode (the linears' weight_bf16, layers/cuda/cuda_linear.h): x is rounded to bf16 once per call and
// shared by the six input projections (forward and backward); the kept y (o_proj's input) is bf16 only; every other
// intermediate stays fp32 (the convs, L2 norms, gate, rule and gated norm backwards read them; docs/gdn.md §4).
// Every result is BIT-IDENTICAL to rounding inside each projection (the rounding is deterministic).
#pragma once
#include "backend/cuda/cuda_context.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/cuda/cuda_token_batch.h"
#include "layers/gdn_layer.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm {

struct CudaGdnWeights {
  CudaLinear q_proj, k_proj, v_proj, g_proj, a_proj, b_proj, o_proj;
  CudaTensor q_conv, k_conv, v_conv;  // [C, K]
  CudaTensor A_log, dt_bias;          // [Hv]
  CudaTensor o_norm;                  // [dv]
  // bf16 compute mode (models/cuda/cuda_model.h): the gated delta rule runs in the chunked tensor-core form
  // (ops/gated_delta_rule/gated_delta_rule_chunked_cuda.h: bf16 operands, fp32 state and accumulation) instead of the
  // fp32 token recurrence; its inputs, outputs and gradients stay fp32.
  bool bf16_compute = false;
};

// Checks the host weights against dims (gdn_check_weights) and uploads them.
CudaGdnWeights cuda_upload_gdn(CudaContext& ctx, const GdnWeights& w, const GdnDims& dims);

// The forward's intermediates (names and shapes of gdn_layer_ref.cpp's Activations), device tensors: what the
// forward computes before its output projection, and what the backward needs.
struct GdnCudaActivations {
  CudaTensor qp, kp, vp;  // q̃, k̃ [T, Ck], ṽ [T, Cv]: conv inputs
  CudaTensor z, a, b;     // z [T, Cv], a and β logits [T, Hv]
  CudaTensor qc, kc, vc;  // after conv + SiLU
  CudaTensor qn, kn;      // per-head L2-normalised q, k [T, Ck]
  CudaTensor g, beta;     // [T, Hv]
  CudaTensor o;           // rule output [T, Cv]
  CudaTensor y;           // gated-norm output [T, Cv] (the output projection's input): fp32 mode only (else empty)
  CudaTensor y16;         // y rounded to bf16: bf16 compute mode only (else empty); the fp32 y is not kept
  // bf16 mode with keep_rule_scratch: what the chunked rule's forward left for its backward
  // (gated_delta_rule_chunked_kept_bytes, keep_for_backward); else empty.
  CudaTensor rule_scratch;
};

// Runs the forward up to y (zero initial state), keeping every intermediate (in the bf16 mode y is computed in fp32
// scratch, rounded once and only the rounding kept). x: fp32, with its bf16 rounding if the caller has it
// (cuda_linear.h), else rounded once here for the six projections.
// keep_rule_scratch (bf16 mode; the recomputing backward, whose forward runs right before it, and kept activations):
// the chunked rule runs with keep_for_backward into act.rule_scratch, so the backward does not rerun its prep and
// state passes (it allocates only its own scratch).
GdnCudaActivations gdn_forward_activations_cuda(CudaContext& ctx, const CudaLinearInput& x, const CudaGdnWeights& w,
                                                const GdnDims& dims, const CudaBatchView& batch,
                                                bool keep_rule_scratch = false);
// The gated delta rule's inputs from those intermediates (normalised q, k, conv'd v, g, β; zero initial state).
GdnInputs<float> gdn_rule_inputs_cuda(const GdnCudaActivations& act, const CudaBatchView& batch);

// out = y Woᵀ after gdn_forward_activations_cuda.
void gdn_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaGdnWeights& w,
                            const GdnDims& dims, const CudaBatchView& batch);
// The same with x's bf16 rounding given beside it (cuda_linear.h: then not rounded again here).
void gdn_layer_forward_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x, const CudaGdnWeights& w,
                            const GdnDims& dims, const CudaBatchView& batch);
// The same forward, handing its intermediates back (kept activations, models/cuda/cuda_model_train.h): the very
// tensors the recomputing backward would rebuild from x, and with keep_rule_scratch (bf16 mode) the chunked rule's
// kept forward too, so the backward skips the rule's prep and state passes as the recomputing backward does.
GdnCudaActivations gdn_layer_forward_keep_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                               const CudaGdnWeights& w, const GdnDims& dims,
                                               const CudaBatchView& batch, bool keep_rule_scratch = false);

// The backward of layers/gdn_layer.h with per-layer recomputation and a zero initial state
// (gdn_layer_cuda_backward.cpp): gdn_forward_activations_cuda (every intermediate of gdn_layer_ref.cpp's
// Activations, and in the bf16 mode the chunked rule's scratch) then gdn_layer_backward_from_cuda. dx [T, hidden] OVERWRITTEN; grads (same layout as w, device)
// ACCUMULATED (+=). dx may not alias d_out or x. d_out16 (optional): d_out's bf16 rounding (cast_f32_to_bf16_cuda's
// bits), which o_proj's backward then reads in the bf16 compute mode instead of rounding d_out again (the same bits;
// cuda_linear_backward_dy16).
void gdn_layer_backward_cuda(CudaContext& ctx, float* dx, CudaGdnWeights& grads, const float* d_out, const float* x,
                             const CudaGdnWeights& w, const GdnDims& dims, const CudaBatchView& batch);
// The same with x's bf16 rounding given beside it (cuda_linear.h: then not rounded again here).
void gdn_layer_backward_cuda(CudaContext& ctx, float* dx, CudaGdnWeights& grads, const float* d_out,
                             const CudaLinearInput& x, const CudaGdnWeights& w, const GdnDims& dims,
                             const CudaBatchView& batch, const __nv_bfloat16* d_out16 = nullptr);
// The walk back from given activations `act` (of this x, w and batch), in the CPU's order: o_proj, gated norm, gated
// delta rule, gate, L2 norms, convs, input projections. Op-level weight gradients (o_norm, convs, A_log, dt_bias) are
// overwritten into scratch and added into grads as the CPU does. Same contract as gdn_layer_backward_cuda; act is
// only read. x as in gdn_forward_activations_cuda (in the bf16 mode its bf16 rounding alone is enough; it is rounded
// once here otherwise).
void gdn_layer_backward_from_cuda(CudaContext& ctx, float* dx, CudaGdnWeights& grads, const float* d_out,
                                  const CudaLinearInput& x, const GdnCudaActivations& act, const CudaGdnWeights& w,
                                  const GdnDims& dims, const CudaBatchView& batch,
                                  const __nv_bfloat16* d_out16 = nullptr);

}  // namespace hlm
