// CudaLinear: upload and forward (contract in cuda_linear.h).
#include "layers/cuda/cuda_linear.h"

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
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

void cuda_linear_forward(CudaContext& ctx, float* y, const float* x, const CudaLinear& layer, int64_t rows) {
  const float* bias = layer.has_bias ? layer.bias.data<float>() : nullptr;
  matmul_forward_cuda(ctx.blaslt(), y, x, layer.weight.data<float>(), bias,
                      {rows, layer.out_features, layer.in_features});
}

void cuda_linear_backward(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy, const float* x,
                          const CudaLinear& layer, int64_t rows, bool accumulate_dx) {
  HLM_CHECK(grad.out_features == layer.out_features && grad.in_features == layer.in_features &&
                grad.has_bias == layer.has_bias,
            "linear backward: the gradient holder does not match the layer");
  float* dbias = layer.has_bias ? grad.bias.data<float>() : nullptr;
  matmul_backward_cuda(ctx.blaslt(), dx, grad.weight.data<float>(), dbias, dy, x, layer.weight.data<float>(),
                       {rows, layer.out_features, layer.in_features}, accumulate_dx);
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
