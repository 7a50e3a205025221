// SwiGLU MLP backward on CUDA, in the order of mlp_layer.cpp's backward_from: after recomputing its forward, or from
// given activations.
#include "core/error.h"
#include "layers/cuda/mlp_layer_cuda.h"
#include "ops/swiglu/swiglu_cuda.h"

namespace hlm {

void mlp_layer_backward_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& g, const float* d_out, const float* x,
                             const CudaMlpWeights& w, int64_t tokens) {
  const MlpCudaActivations a = mlp_forward_activations_cuda(ctx, x, w, tokens);
  mlp_layer_backward_from_cuda(ctx, dx, g, d_out, x, a, w, tokens);
}

void mlp_layer_backward_from_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& g, const float* d_out,
                                  const float* x, const MlpCudaActivations& a, const CudaMlpWeights& w,
                                  int64_t tokens) {
  HLM_CHECK(dx != x && dx != d_out, "mlp backward: dx may not alias x or d_out");
  const int64_t n = tokens, F = w.gate_proj.out_features;
  HLM_CHECK(a.h.numel() == n * F, "mlp backward: the activations do not match the batch");
  CudaTensor dh = CudaTensor::empty(ctx, {n, F}), dup = CudaTensor::empty(ctx, {n, F});  // dh, then dgate in place
  cuda_linear_backward(ctx, dh.data<float>(), g.down_proj, d_out, a.h.data<float>(), w.down_proj, n, false);
  swiglu_backward_cuda(dh.data<float>(), dup.data<float>(), dh.data<float>(), a.gate.data<float>(),
                       a.up.data<float>(), n * F, ctx.stream());
  cuda_linear_backward(ctx, dx, g.gate_proj, dh.data<float>(), x, w.gate_proj, n, /*accumulate_dx=*/false);
  cuda_linear_backward(ctx, dx, g.up_proj, dup.data<float>(), x, w.up_proj, n, /*accumulate_dx=*/true);
}

}  // namespace hlm
