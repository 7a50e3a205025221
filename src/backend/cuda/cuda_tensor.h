// Device tensors and host<->device copies. A CudaTensor is a contiguous device buffer (from the context's caching
// allocator) with a Shape and a DType, the device twin of a contiguous hlm::Tensor. Copies run on the context's
// stream and wait for it (host tensors are pageable memory), so the host side may be reused when they return.
// Non-goals: strided device views, pinned staging buffers.
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_allocator.h"
#include "core/tensor.h"

namespace hlm {

class CudaContext;

class CudaTensor {
 public:
  CudaTensor() = default;
  // Uninitialized device memory for a contiguous tensor of this shape and dtype (with HLM_CUDA_POISON=on: 0xFF bytes,
  // NaN in every float type, filled on ctx's stream — for tests that hunt reads of never-written scratch).
  static CudaTensor empty(CudaContext& ctx, Shape shape, DType dtype = DType::F32);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return buffer_.data() != nullptr || numel() == 0; }

  void* raw() const { return buffer_.data(); }
  template <typename T>
  T* data() const {
    HLM_CHECK(sizeof(T) == dtype_size(dtype_), "CudaTensor::data: element size ", sizeof(T), " does not match ",
              dtype_name(dtype_));
    return static_cast<T*>(buffer_.data());
  }

 private:
  CudaBuffer buffer_;
  Shape shape_;
  DType dtype_ = DType::F32;
};

// Host -> device: a new device tensor holding `host` (made contiguous first if it is a strided view).
CudaTensor cuda_upload(CudaContext& ctx, const Tensor& host);
// Device -> host: a new contiguous host tensor.
Tensor cuda_download(CudaContext& ctx, const CudaTensor& device);
// Copies into existing storage; shapes and dtypes must match (internal error otherwise); `dst` must be contiguous.
void cuda_copy(CudaContext& ctx, CudaTensor& dst, const Tensor& src);
void cuda_copy(CudaContext& ctx, Tensor& dst, const CudaTensor& src);
// Raw byte copies on the context's stream, waited for.
void cuda_copy_to_device(CudaContext& ctx, void* dst, const void* src, size_t bytes);
// Host -> device on the context's stream WITHOUT waiting for the stream: `src` is pageable memory, which CUDA copies
// (to its staging memory or to the device) before cudaMemcpyAsync returns (CUDA's API synchronization rules), so
// `src` may be freed on return; `dst` is written in stream order (work queued later sees it). For the small per-step
// uploads of training (token ids, cu_seqlens, loss weights): a wait per upload drains the GPU's queue, which then
// idles while the host queues the next launches. HLM_SYNC_UPLOADS=1 makes it wait like cuda_copy_to_device (a
// diagnostic for measuring the difference).
void cuda_copy_to_device_async(CudaContext& ctx, void* dst, const void* src, size_t bytes);
void cuda_copy_to_host(CudaContext& ctx, void* dst, const void* src, size_t bytes);

// While one of these lives on a thread, that thread's host -> device copies (cuda_copy_to_device, and so cuda_upload
// and cuda_copy) do not read the host memory: each zero-fills its device bytes instead (cudaMemsetAsync, waited for
// like the copy). For building a device holder of zeros shaped like a model (CudaModel::zeros_like) without a host
// memset and an upload of zeros (20.5 GB of each for the Qwen3-4B-shaped student); every table the upload computes
// from the config (RoPE, decay rates) comes out zero too, so what is built in the scope is a gradient holder only.
// Nestable; not for cuda_copy_to_device_async (per-step uploads never run inside it).
class CudaZeroUploadScope {
 public:
  CudaZeroUploadScope();
  ~CudaZeroUploadScope();
  CudaZeroUploadScope(const CudaZeroUploadScope&) = delete;
  CudaZeroUploadScope& operator=(const CudaZeroUploadScope&) = delete;
};

}  // namespace hlm
