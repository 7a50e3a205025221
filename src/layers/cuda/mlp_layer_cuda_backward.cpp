// SwiGLU MLP backward on CUDA, in the order of mlp_layer.cpp's backward_from: after recomputing its forward, or from
// given activations.
#include "core/error.h"
#include "layers/cuda/mlp_layer_cuda.h"
#include "layers/mlp_bf16_gate_up.h"
#include "ops/swiglu/swiglu_cuda.h"

namespace hlm {

void mlp_layer_backward_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& g, const float* d_out, const float* x,
                             const CudaMlpWeights& w, int64_t tokens) {
  mlp_layer_backward_cuda(ctx, dx, g, d_out, CudaLinearInput{x, nullptr}, w, tokens);
}

void mlp_layer_backward_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& g, const float* d_out,
                             const CudaLinearInput& x, const CudaMlpWeights& w, int64_t tokens,
                             const __nv_bfloat16* d_out16) {
  CudaTensor x16;  // bf16 mode: x rounded once for the recomputed forward and the backward (unless given rounded)
  const CudaLinearInput in = cuda_linear_round_input(ctx, x16, x, w.gate_proj, tokens);
  const MlpCudaActivations a = mlp_forward_activations_cuda(ctx, in, w, tokens);
  mlp_layer_backward_from_cuda(ctx, dx, g, d_out, in, a, w, tokens, d_out16);
}

void mlp_layer_backward_from_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& g, const float* d_out,
                                  const CudaLinearInput& x, const MlpCudaActivations& a, const CudaMlpWeights& w,
                                  int64_t tokens, const __nv_bfloat16* d_out16) {
  HLM_CHECK(dx != x.f32 && static_cast<const void*>(dx) != static_cast<const void*>(x.bf16) && dx != d_out,
            "mlp backward: dx may not alias x or d_out");
  const int64_t n = tokens, F = w.gate_proj.out_features;
  const bool bf16_h = cuda_linear_is_bf16(w.down_proj);
  const bool bf16_gate_up = a.gate16.raw() != nullptr;  // the forward's form (mlp_layer_cuda.h)
  HLM_CHECK((bf16_h ? a.h16 : a.h).numel() == n * F && (bf16_gate_up ? a.gate16 : a.gate).numel() == n * F,
            "mlp backward: the activations do not match the batch or the compute mode");
  if (!cuda_linear_is_bf16(w.gate_proj) || !cuda_linear_is_bf16(w.up_proj)) {  // fp32 mode
    CudaTensor dh = CudaTensor::empty(ctx, {n, F});
    cuda_linear_backward_dy16(ctx, dh.data<float>(), g.down_proj, d_out, d_out16, cuda_linear_input(a.h, a.h16),
                              w.down_proj, n, false);
    CudaTensor dup = CudaTensor::empty(ctx, {n, F});  // dgate goes to dh in place
    swiglu_backward_cuda(dh.data<float>(), dup.data<float>(), dh.data<float>(), a.gate.data<float>(),
                         a.up.data<float>(), n * F, ctx.stream());
    cuda_linear_backward(ctx, dx, g.gate_proj, dh.data<float>(), x, w.gate_proj, n, /*accumulate_dx=*/false);
    cuda_linear_backward(ctx, dx, g.up_proj, dup.data<float>(), x, w.up_proj, n, /*accumulate_dx=*/true);
    return;
  }
  // bf16 mode: dgate and dup exist only as the bf16 roundings their products read (the bits of rounding the fp32
  // values, swiglu_cuda.h), without an fp32 round trip through memory.
  CudaTensor dgate16 = CudaTensor::empty(ctx, {n, F}, DType::BF16);
  CudaTensor dup16 = CudaTensor::empty(ctx, {n, F}, DType::BF16);
  if (bf16_h && bf16_gate_up && mlp_bf16_dh()) {
    // HLM_MLP_BF16_DH (layers/mlp_bf16_gate_up.h): dh only as its bf16 rounding, written by the down_proj product.
    CudaTensor dh16 = CudaTensor::empty(ctx, {n, F}, DType::BF16);
    cuda_linear_backward_bf16_dx(ctx, dh16.data<__nv_bfloat16>(), g.down_proj, d_out, cuda_linear_input(a.h, a.h16),
                                 w.down_proj, n, d_out16);
    swiglu_backward_bf16_all_cuda(dgate16.data<__nv_bfloat16>(), dup16.data<__nv_bfloat16>(),
                                  dh16.data<__nv_bfloat16>(), a.gate16.data<__nv_bfloat16>(),
                                  a.up16.data<__nv_bfloat16>(), n * F, ctx.stream());
  } else {
    CudaTensor dh = CudaTensor::empty(ctx, {n, F});
    cuda_linear_backward_dy16(ctx, dh.data<float>(), g.down_proj, d_out, d_out16, cuda_linear_input(a.h, a.h16),
                              w.down_proj, n, false);
    if (bf16_gate_up)
      swiglu_backward_bf16_in_cuda(dgate16.data<__nv_bfloat16>(), dup16.data<__nv_bfloat16>(), dh.data<float>(),
                                   a.gate16.data<__nv_bfloat16>(), a.up16.data<__nv_bfloat16>(), n * F, ctx.stream());
    else
      swiglu_backward_bf16_cuda(dgate16.data<__nv_bfloat16>(), dup16.data<__nv_bfloat16>(), dh.data<float>(),
                                a.gate.data<float>(), a.up.data<float>(), n * F, ctx.stream());
  }  // dh goes back to the allocator before the products
  CudaTensor x16;  // x rounded once for gate_proj and up_proj (unless the caller has it)
  const CudaLinearInput in = cuda_linear_round_input(ctx, x16, x, w.gate_proj, n);
  cuda_linear_backward_bf16_dy(ctx, dx, g.gate_proj, dgate16.data<__nv_bfloat16>(), in, w.gate_proj, n, false);
  cuda_linear_backward_bf16_dy(ctx, dx, g.up_proj, dup16.data<__nv_bfloat16>(), in, w.up_proj, n, true);
}

}  // namespace hlm
