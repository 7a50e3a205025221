// SwiGLU MLP forward on CUDA, in the order of mlp_layer_forward_ref: lean (h in gate's storage), or keeping gate, up
// and h for the backward.
#include "layers/cuda/mlp_layer_cuda.h"

#include "core/error.h"
#include "layers/mlp_bf16_gate_up.h"
#include "ops/swiglu/swiglu_cuda.h"

namespace hlm {

bool mlp_takes_bf16_gate_up(const CudaMlpWeights& w, int64_t tokens) {
  return mlp_bf16_gate_up() && cuda_linear_is_bf16(w.gate_proj) && cuda_linear_is_bf16(w.up_proj) &&
         cuda_linear_is_bf16(w.down_proj) && !w.gate_proj.has_bias && !w.up_proj.has_bias &&
         !cuda_linear_gemv_may_take(tokens);
}

CudaMlpWeights cuda_upload_mlp(CudaContext& ctx, const MlpWeights& w) {
  CudaMlpWeights d;
  d.gate_proj = cuda_upload_linear(ctx, w.gate_proj, "mlp.gate_proj");
  d.up_proj = cuda_upload_linear(ctx, w.up_proj, "mlp.up_proj");
  d.down_proj = cuda_upload_linear(ctx, w.down_proj, "mlp.down_proj");
  const int64_t F = d.gate_proj.out_features, hidden = d.gate_proj.in_features;
  HLM_CHECK_INPUT(d.up_proj.out_features == F && d.up_proj.in_features == hidden && d.down_proj.out_features == hidden &&
                      d.down_proj.in_features == F,
                  "mlp projections disagree: gate [", F, ", ", hidden, "], up [", d.up_proj.out_features, ", ",
                  d.up_proj.in_features, "], down [", d.down_proj.out_features, ", ", d.down_proj.in_features, "]");
  return d;
}

void mlp_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaMlpWeights& w, int64_t tokens) {
  mlp_layer_forward_cuda(ctx, out, CudaLinearInput{x, nullptr}, w, tokens);
}

void mlp_layer_forward_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x, const CudaMlpWeights& w,
                            int64_t tokens) {
  HLM_CHECK(out != x.f32 && static_cast<const void*>(out) != static_cast<const void*>(x.bf16),
            "mlp forward: out may not alias x");
  const int64_t F = w.gate_proj.out_features;
  if (mlp_takes_bf16_gate_up(w, tokens)) {  // the kept forward itself (same bits), its intermediates dropped
    mlp_layer_forward_keep_cuda(ctx, out, x, w, tokens);
    return;
  }
  if (cuda_linear_is_bf16(w.down_proj)) {  // h only as down_proj's bf16 operand (the bits it would round to)
    CudaTensor h16 = CudaTensor::empty(ctx, {tokens, F}, DType::BF16);
    // Decode rows: gate, up and SwiGLU as one GEMV launch (the same bits) when that fold is on; else the group GEMV
    // (or cuBLASLt) and the SwiGLU kernel.
    if (!cuda_linear_try_swiglu_gemv(ctx, nullptr, h16.data<__nv_bfloat16>(), x, w.gate_proj, w.up_proj, tokens)) {
      CudaTensor gate = CudaTensor::empty(ctx, {tokens, F});
      CudaTensor up = CudaTensor::empty(ctx, {tokens, F});
      const CudaLinearOut gate_up[] = {{gate.data<float>(), &w.gate_proj}, {up.data<float>(), &w.up_proj}};
      cuda_linear_forward_group(ctx, gate_up, x, tokens);
      swiglu_forward_bf16_cuda(h16.data<__nv_bfloat16>(), gate.data<float>(), up.data<float>(), tokens * F,
                               ctx.stream());
    }
    cuda_linear_forward(ctx, out, CudaLinearInput{nullptr, h16.data<__nv_bfloat16>()}, w.down_proj, tokens);
    return;
  }
  CudaTensor gate = CudaTensor::empty(ctx, {tokens, F});
  CudaTensor up = CudaTensor::empty(ctx, {tokens, F});
  // gate and up in one launch at decode batch sizes, else x rounded once for both (bf16 mode).
  const CudaLinearOut gate_up[] = {{gate.data<float>(), &w.gate_proj}, {up.data<float>(), &w.up_proj}};
  cuda_linear_forward_group(ctx, gate_up, x, tokens);
  swiglu_forward_cuda(gate.data<float>(), gate.data<float>(), up.data<float>(), tokens * F, ctx.stream());
  cuda_linear_forward(ctx, out, gate.data<float>(), w.down_proj, tokens);
}

MlpCudaActivations mlp_forward_activations_cuda(CudaContext& ctx, const CudaLinearInput& x, const CudaMlpWeights& w,
                                                int64_t tokens) {
  const int64_t F = w.gate_proj.out_features;
  CudaTensor x16;
  const CudaLinearInput in = cuda_linear_round_input(ctx, x16, x, w.gate_proj, tokens);
  if (mlp_takes_bf16_gate_up(w, tokens)) {
    MlpCudaActivations a;
    a.gate16 = CudaTensor::empty(ctx, {tokens, F}, DType::BF16);
    a.up16 = CudaTensor::empty(ctx, {tokens, F}, DType::BF16);
    a.h16 = CudaTensor::empty(ctx, {tokens, F}, DType::BF16);
    cuda_linear_forward_bf16_out(ctx, a.gate16.data<__nv_bfloat16>(), in, w.gate_proj, tokens);
    cuda_linear_forward_bf16_out(ctx, a.up16.data<__nv_bfloat16>(), in, w.up_proj, tokens);
    swiglu_forward_bf16_in_cuda(a.h16.data<__nv_bfloat16>(), a.gate16.data<__nv_bfloat16>(),
                                a.up16.data<__nv_bfloat16>(), tokens * F, ctx.stream());
    return a;
  }
  MlpCudaActivations a{CudaTensor::empty(ctx, {tokens, F}), CudaTensor::empty(ctx, {tokens, F}), {}, {}, {}, {}};
  cuda_linear_forward(ctx, a.gate.data<float>(), in, w.gate_proj, tokens);
  cuda_linear_forward(ctx, a.up.data<float>(), in, w.up_proj, tokens);
  // h in fp32; in the bf16 mode only its rounding, written directly (swiglu_forward_bf16_cuda: the same bits), since
  // down_proj (forward and backward) is its one reader and would round it anyway.
  if (cuda_linear_is_bf16(w.down_proj)) {
    a.h16 = CudaTensor::empty(ctx, {tokens, F}, DType::BF16);
    swiglu_forward_bf16_cuda(a.h16.data<__nv_bfloat16>(), a.gate.data<float>(), a.up.data<float>(), tokens * F,
                             ctx.stream());
  } else {
    a.h = CudaTensor::empty(ctx, {tokens, F});
    swiglu_forward_cuda(a.h.data<float>(), a.gate.data<float>(), a.up.data<float>(), tokens * F, ctx.stream());
  }
  return a;
}

MlpCudaActivations mlp_layer_forward_keep_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                               const CudaMlpWeights& w, int64_t tokens) {
  HLM_CHECK(out != x.f32 && static_cast<const void*>(out) != static_cast<const void*>(x.bf16),
            "mlp forward: out may not alias x");
  MlpCudaActivations a = mlp_forward_activations_cuda(ctx, x, w, tokens);
  cuda_linear_forward(ctx, out, cuda_linear_input(a.h, a.h16), w.down_proj, tokens);
  return a;
}

}  // namespace hlm
