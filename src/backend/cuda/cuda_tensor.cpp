#include "backend/cuda/cuda_tensor.h"

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_error.h"
#include "core/env_switch.h"

namespace hlm {

namespace {
// HLM_CUDA_POISON=on: every empty() tensor is filled with 0xFF bytes (NaN in f32 and bf16) on the context's stream, so
// a kernel reading device scratch nobody wrote sees NaN instead of whatever the caching allocator's block last held
// (tests: run test_cuda_models with it; the fills are queued, captured into CUDA graphs like any other work).
bool cuda_poison_enabled() {
  static const bool on = env_switch("HLM_CUDA_POISON", false);
  return on;
}
}  // namespace

CudaTensor CudaTensor::empty(CudaContext& ctx, Shape shape, DType dtype) {
  CudaTensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.buffer_ = CudaBuffer(ctx.allocator(), t.nbytes());
  if (cuda_poison_enabled() && t.nbytes() > 0)
    HLM_CUDA_CHECK(cudaMemsetAsync(t.buffer_.data(), 0xFF, t.nbytes(), ctx.stream()));
  return t;
}

namespace {
thread_local int t_zero_upload_depth = 0;  // CudaZeroUploadScope nesting on this thread
}  // namespace

CudaZeroUploadScope::CudaZeroUploadScope() { ++t_zero_upload_depth; }
CudaZeroUploadScope::~CudaZeroUploadScope() { --t_zero_upload_depth; }

void cuda_copy_to_device(CudaContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (t_zero_upload_depth > 0)
    HLM_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, ctx.stream()));
  else
    HLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream()));
  ctx.synchronize();
}

void cuda_copy_to_device_async(CudaContext& ctx, void* dst, const void* src, size_t bytes) {
  static const bool sync = [] {
    const char* env = std::getenv("HLM_SYNC_UPLOADS");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  if (bytes == 0) return;
  HLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream()));
  if (sync) ctx.synchronize();
}

void cuda_copy_to_host(CudaContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  HLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
}

CudaTensor cuda_upload(CudaContext& ctx, const Tensor& host) {
  CudaTensor out = CudaTensor::empty(ctx, host.shape(), host.dtype());
  cuda_copy(ctx, out, host);
  return out;
}

Tensor cuda_download(CudaContext& ctx, const CudaTensor& device) {
  Tensor out = Tensor::zeros(device.shape(), device.dtype());
  cuda_copy(ctx, out, device);
  return out;
}

void cuda_copy(CudaContext& ctx, CudaTensor& dst, const Tensor& src) {
  HLM_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "cuda_copy: host ", src.shape().str(), " ",
            dtype_name(src.dtype()), " vs device ", dst.shape().str(), " ", dtype_name(dst.dtype()));
  if (src.is_contiguous()) {
    cuda_copy_to_device(ctx, dst.raw(), src.raw(), dst.nbytes());
  } else {
    const Tensor c = src.contiguous();
    cuda_copy_to_device(ctx, dst.raw(), c.raw(), dst.nbytes());
  }
}

void cuda_copy(CudaContext& ctx, Tensor& dst, const CudaTensor& src) {
  HLM_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "cuda_copy: device ", src.shape().str(), " ",
            dtype_name(src.dtype()), " vs host ", dst.shape().str(), " ", dtype_name(dst.dtype()));
  HLM_CHECK(dst.is_contiguous(), "cuda_copy: the host destination must be contiguous");
  cuda_copy_to_host(ctx, dst.raw(), src.raw(), src.nbytes());
}

}  // namespace hlm
