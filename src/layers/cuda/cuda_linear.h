// A linear projection on the device (HF layout, as layers/linear.h): weight [out, in], optional bias [out], f32.
// y [rows, out] = x [rows, in] · weightᵀ + bias through cuBLASLt with fp32 accumulation, in one of two modes:
//   fp32 (weight_bf16 empty): matmul_forward_cuda, fp32 operands and products;
//   bf16 compute (weight_bf16 holds the weight rounded to bf16, cuda_linear_refresh_bf16 after every update of the
//     fp32 master weight): the input (forward), dy and x (backward) are rounded to bf16 in scratch and the products
//     run on bf16 tensor cores with fp32 results (matmul_forward_mixed_cuda / matmul_backward_mixed_cuda). The
//     activations between layers, the bias, the gradients and the master weights stay fp32.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_tensor.h"
#include "layers/linear.h"

namespace hlm {

struct CudaLinear {
  CudaTensor weight;  // [out, in]
  CudaTensor bias;    // [out] or empty (numel 0, never read)
  CudaTensor weight_bf16;  // [out, in] bf16 copy of weight in the bf16 compute mode, else empty
  bool has_bias = false;
  int64_t out_features = 0;
  int64_t in_features = 0;
};

// Uploads a host Linear (contiguous f32; input error otherwise).
CudaLinear cuda_upload_linear(CudaContext& ctx, const Linear& host, const char* name);

// Uploads a contiguous f32 host tensor (input error naming `name` otherwise).
CudaTensor cuda_upload_f32(CudaContext& ctx, const Tensor& host, const char* name);

// Switches the bf16 compute mode on (allocates weight_bf16 and fills it from weight) or off (frees it).
void cuda_linear_set_bf16(CudaContext& ctx, CudaLinear& layer, bool on);
// Re-rounds weight_bf16 from the fp32 weight (after an optimizer step); nothing in the fp32 mode.
void cuda_linear_refresh_bf16(CudaContext& ctx, CudaLinear& layer);

// Rounds n floats into a new bf16 scratch tensor (cast_f32_to_bf16_cuda), queued on ctx's stream.
CudaTensor cuda_round_bf16(CudaContext& ctx, const float* src, int64_t n);

// y [rows, out] OVERWRITTEN from x [rows, in]; queued on ctx's stream.
void cuda_linear_forward(CudaContext& ctx, float* y, const float* x, const CudaLinear& layer, int64_t rows);

// The backward of cuda_linear_forward (matmul_backward_cuda): dx [rows, in] = dy · W, OVERWRITTEN (ADDED when
// accumulate_dx; nullptr = not wanted); grad.weight += dyᵀ · x and grad.bias += Σ_rows dy (ACCUMULATED). grad has
// the layout of `layer` (a device gradient holder uploaded like the weights).
void cuda_linear_backward(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy, const float* x,
                          const CudaLinear& layer, int64_t rows, bool accumulate_dx);

// Device scratch of `bytes` bytes from ctx's allocator (released when the tensor goes; safe on ctx's one stream).
CudaTensor cuda_scratch_bytes(CudaContext& ctx, size_t bytes);

// Device-to-device copy of `bytes` bytes, queued on ctx's stream (no wait).
void cuda_copy_device(CudaContext& ctx, void* dst, const void* src, size_t bytes);

// dst += src over n floats (the CPU backwards' add_into of op-level gradients), bit-identical to the CPU's float +=.
void cuda_add_into(CudaContext& ctx, float* dst, const float* src, int64_t n);

}  // namespace hlm
