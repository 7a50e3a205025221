// CUDA context: one device, one stream, one cuBLASLt handle with a 32 MiB workspace, and the caching allocator.
// Every op launcher takes raw pointers plus what it needs from here (a stream; for matmul a CudaBlasLt bundle), so
// kernels never reach for globals.
//
// Usage:
//   if (!cuda_available()) ...;                 // device_query.h: false (no throw) without a driver or GPU
//   CudaContext& ctx = cuda_context();          // process-wide default on device 0, created on first use
//   CudaBuffer buf(ctx.allocator(), bytes);     // device memory from the caching allocator
//   rmsnorm_forward_cuda(out, x, w, params, ctx.stream());
//   ctx.synchronize();                          // waits for the stream and turns a kernel fault into hlm::Error
//
// A second stream: while a CudaSideStream scope lives, stream() and blaslt() name the context's side stream (created
// on first use, with its own cuBLASLt workspace), so that everything queued through the context in
// the scope runs beside the main stream's work (the distillation teacher's forward beside the student's backward,
// train/cuda/cuda_train_device.cpp). The caller orders the two streams with events and keeps their memory apart (the
// allocator hands a block freed by one stream's work to the next request at once: cuda_allocator.h, private pools).
// Non-goals: more streams, several devices per context, peer access. The default context is never destroyed
// (destroying CUDA objects during static destruction races the runtime's own teardown).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "backend/cuda/cuda_allocator.h"

namespace hlm {

// What a cuBLASLt call needs; the workspace must only be used by work queued on `stream`.
struct CudaBlasLt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

class CudaContext {
 public:
  static constexpr size_t kBlasLtWorkspaceBytes = size_t{32} << 20;  // 32 MiB, as cuBLAS recommends for Hopper

  // Throws hlm::Error when the device cannot be used.
  explicit CudaContext(int device = 0);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  CudaAllocator& allocator() { return allocator_; }
  CudaBlasLt blaslt() const {
    return {blaslt_, on_side_stream() ? side_workspace_ : main_workspace_, kBlasLtWorkspaceBytes, stream_};
  }

  // The side stream (created on first use; see the header comment) and whether a CudaSideStream scope is active.
  cudaStream_t side_stream();
  cudaStream_t main_stream() const { return main_stream_; }
  bool on_side_stream() const { return stream_ != main_stream_; }

  // Makes this context's device current on the calling thread.
  void make_current() const;
  // Waits for the stream; a fault in an earlier kernel becomes hlm::Error here.
  void synchronize() const;

 private:
  friend class CudaSideStream;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;       // the stream work is queued on now: main_stream_, or side_ in a scope
  cudaStream_t main_stream_ = nullptr;
  cudaStream_t side_ = nullptr;         // side_stream()
  cublasLtHandle_t blaslt_ = nullptr;
  CudaAllocator allocator_;
  void* main_workspace_ = nullptr;  // from allocator_, one per stream
  void* side_workspace_ = nullptr;
};

// While it lives, `ctx` queues on its side stream (CudaContext header comment). Not nested; one host thread.
class CudaSideStream {
 public:
  explicit CudaSideStream(CudaContext& ctx);
  ~CudaSideStream();
  CudaSideStream(const CudaSideStream&) = delete;
  CudaSideStream& operator=(const CudaSideStream&) = delete;

 private:
  CudaContext& ctx_;
};

// The process-wide default context (device 0), created on first call; throws when no usable GPU.
CudaContext& cuda_context();

}  // namespace hlm
