// SwiGLU MLP backward on CUDA, in the order of mlp_layer.cpp's backward_from (after recomputing its forward).
#include "core/error.h"
#include "layers/cuda/mlp_layer_cuda.h"
#include "ops/swiglu/swiglu_cuda.h"

namespace hlm {

void mlp_layer_backward_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& g, const float* d_out, const float* x,
                             const CudaMlpWeights& w, int64_t tokens) {
  HLM_CHECK(dx != x && dx != d_out, "mlp backward: dx may not alias x or d_out");
  const int64_t n = tokens, F = w.gate_proj.out_features;
  CudaTensor gate = CudaTensor::empty(ctx, {n, F}), up = CudaTensor::empty(ctx, {n, F});
  CudaTensor h = CudaTensor::empty(ctx, {n, F});
  cuda_linear_forward(ctx, gate.data<float>(), x, w.gate_proj, n);
  cuda_linear_forward(ctx, up.data<float>(), x, w.up_proj, n);
  swiglu_forward_cuda(h.data<float>(), gate.data<float>(), up.data<float>(), n * F, ctx.stream());

  CudaTensor dh = CudaTensor::empty(ctx, {n, F}), dup = CudaTensor::empty(ctx, {n, F});  // dh, then dgate in place
  cuda_linear_backward(ctx, dh.data<float>(), g.down_proj, d_out, h.data<float>(), w.down_proj, n, false);
  swiglu_backward_cuda(dh.data<float>(), dup.data<float>(), dh.data<float>(), gate.data<float>(), up.data<float>(),
                       n * F, ctx.stream());
  cuda_linear_backward(ctx, dx, g.gate_proj, dh.data<float>(), x, w.gate_proj, n, /*accumulate_dx=*/false);
  cuda_linear_backward(ctx, dx, g.up_proj, dup.data<float>(), x, w.up_proj, n, /*accumulate_dx=*/true);
}

}  // namespace hlm
