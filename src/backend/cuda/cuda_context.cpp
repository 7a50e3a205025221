#include "backend/cuda/cuda_context.h"

#include "backend/cuda/cuda_error.h"

namespace hlm {

CudaContext::CudaContext(int device) : device_(device) {
  HLM_CUDA_CHECK(cudaSetDevice(device_));
  HLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  HLM_CUBLAS_CHECK(cublasLtCreate(&blaslt_));
  workspace_ = allocator_.allocate(kBlasLtWorkspaceBytes);
}

CudaContext::~CudaContext() {
  // Best effort, errors ignored: a destructor must not throw.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  allocator_.deallocate(workspace_);
  if (blaslt_ != nullptr) cublasLtDestroy(blaslt_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaContext::make_current() const { HLM_CUDA_CHECK(cudaSetDevice(device_)); }

void CudaContext::synchronize() const {
  HLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  HLM_CUDA_CHECK(cudaGetLastError());
}

CudaContext& cuda_context() {
  static CudaContext* ctx = new CudaContext(0);  // leaked on purpose (see the header)
  return *ctx;
}

}  // namespace hlm
