// CudaLinear: upload and forward (contract in cuda_linear.h).
#include "layers/cuda/cuda_linear.h"

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "ops/cast/cast_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/residual/residual_cuda.h"

namespace hlm {

CudaTensor cuda_upload_f32(CudaContext& ctx, const Tensor& host, const char* name) {
  HLM_CHECK_INPUT(host.defined() && host.dtype() == DType::F32 && host.is_contiguous(), "tensor ", name,
                  " must be contiguous f32 to upload to the GPU");
  return cuda_upload(ctx, host);
}

CudaLinear cuda_upload_linear(CudaContext& ctx, const Linear& host, const char* name) {
  HLM_CHECK_INPUT(host.weight.defined() && host.weight.rank() == 2, "linear ", name, " has no 2-d weight");
  CudaLinear l;
  l.weight = cuda_upload_f32(ctx, host.weight, name);
  l.out_features = host.out_features();
  l.in_features = host.in_features();
  if (host.bias.defined()) {
    HLM_CHECK_INPUT(host.bias.numel() == l.out_features, "linear ", name, " bias has ", host.bias.numel(),
                    " entries, expected ", l.out_features);
    l.bias = cuda_upload_f32(ctx, host.bias, name);
    l.has_bias = true;
  }
  return l;
}

CudaTensor cuda_round_bf16(CudaContext& ctx, const float* src, int64_t n) {
  CudaTensor t = CudaTensor::empty(ctx, {n > 0 ? n : 1}, DType::BF16);
  cast_f32_to_bf16_cuda(t.data<__nv_bfloat16>(), src, n, ctx.stream());
  return t;
}

void cuda_linear_set_bf16(CudaContext& ctx, CudaLinear& layer, bool on) {
  if (!on) {
    layer.weight_bf16 = CudaTensor();
    return;
  }
  if (layer.weight_bf16.raw() == nullptr || layer.weight_bf16.numel() != layer.weight.numel())
    layer.weight_bf16 = CudaTensor::empty(ctx, layer.weight.shape(), DType::BF16);
  cuda_linear_refresh_bf16(ctx, layer);
}

void cuda_linear_refresh_bf16(CudaContext& ctx, CudaLinear& layer) {
  if (layer.weight_bf16.raw() == nullptr) return;
  cast_f32_to_bf16_cuda(layer.weight_bf16.data<__nv_bfloat16>(), layer.weight.data<float>(), layer.weight.numel(),
                        ctx.stream());
}

void cuda_linear_forward(CudaContext& ctx, float* y, const float* x, const CudaLinear& layer, int64_t rows) {
  const float* bias = layer.has_bias ? layer.bias.data<float>() : nullptr;
  const MatmulCudaParams p{rows, layer.out_features, layer.in_features};
  if (layer.weight_bf16.raw() != nullptr) {
    const CudaTensor x16 = cuda_round_bf16(ctx, x, rows * layer.in_features);
    matmul_forward_mixed_cuda(ctx.blaslt(), y, x16.data<__nv_bfloat16>(), layer.weight_bf16.data<__nv_bfloat16>(),
                              bias, p);
    return;
  }
  matmul_forward_cuda(ctx.blaslt(), y, x, layer.weight.data<float>(), bias, p);
}

void cuda_linear_backward(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy, const float* x,
                          const CudaLinear& layer, int64_t rows, bool accumulate_dx) {
  HLM_CHECK(grad.out_features == layer.out_features && grad.in_features == layer.in_features &&
                grad.has_bias == layer.has_bias,
            "linear backward: the gradient holder does not match the layer");
  float* dbias = layer.has_bias ? grad.bias.data<float>() : nullptr;
  const MatmulCudaParams p{rows, layer.out_features, layer.in_features};
  if (layer.weight_bf16.raw() != nullptr) {
    const CudaTensor dy16 = cuda_round_bf16(ctx, dy, rows * layer.out_features);
    const CudaTensor x16 = cuda_round_bf16(ctx, x, rows * layer.in_features);
    matmul_backward_mixed_cuda(ctx.blaslt(), dx, grad.weight.data<float>(), dbias, dy16.data<__nv_bfloat16>(),
                               x16.data<__nv_bfloat16>(), layer.weight_bf16.data<__nv_bfloat16>(), p, accumulate_dx);
    return;
  }
  matmul_backward_cuda(ctx.blaslt(), dx, grad.weight.data<float>(), dbias, dy, x, layer.weight.data<float>(), p,
                       accumulate_dx);
}

CudaTensor cuda_scratch_bytes(CudaContext& ctx, size_t bytes) {
  // Whole 4-byte words, at least one (an empty tensor has no storage).
  const int64_t words = static_cast<int64_t>((bytes + 3) / 4);
  return CudaTensor::empty(ctx, {words > 0 ? words : 1}, DType::I32);
}

void cuda_copy_device(CudaContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  HLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
}

void cuda_add_into(CudaContext& ctx, float* dst, const float* src, int64_t n) {
  // x += 1·delta: the product 1·delta is exact, so this is the CPU's plain float +=.
  residual_add_forward_cuda(dst, src, 1.0f, n, ctx.stream());
}

}  // namespace hlm
