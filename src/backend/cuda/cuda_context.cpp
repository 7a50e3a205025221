#include "backend/cuda/cuda_context.h"

#include "backend/cuda/cuda_device_select.h"
#include "backend/cuda/cuda_error.h"
#include "core/error.h"

namespace hlm {

CudaContext::CudaContext(int device) : device_(device) {
  HLM_CUDA_CHECK(cudaSetDevice(device_));
  HLM_CUDA_CHECK(cudaStreamCreateWithFlags(&main_stream_, cudaStreamNonBlocking));
  stream_ = main_stream_;
  HLM_CUBLAS_CHECK(cublasLtCreate(&blaslt_));
  main_workspace_ = allocator_.allocate(kBlasLtWorkspaceBytes);
}

CudaContext::~CudaContext() {
  // Best effort, errors ignored: a destructor must not throw.
  if (main_stream_ != nullptr) cudaStreamSynchronize(main_stream_);
  if (side_ != nullptr) cudaStreamSynchronize(side_);
  allocator_.deallocate(main_workspace_);
  allocator_.deallocate(side_workspace_);
  if (blaslt_ != nullptr) cublasLtDestroy(blaslt_);
  if (main_stream_ != nullptr) cudaStreamDestroy(main_stream_);
  if (side_ != nullptr) cudaStreamDestroy(side_);
}

cudaStream_t CudaContext::side_stream() {
  if (side_ == nullptr) {
    // The main stream's priority (the default, which is already the least): a lower one does not exist.
    HLM_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    side_workspace_ = allocator_.allocate(kBlasLtWorkspaceBytes);
  }
  return side_;
}

CudaSideStream::CudaSideStream(CudaContext& ctx) : ctx_(ctx) {
  HLM_CHECK(!ctx.on_side_stream(), "CudaSideStream: already on the side stream (scopes do not nest)");
  ctx.stream_ = ctx.side_stream();
}

CudaSideStream::~CudaSideStream() {
  ctx_.stream_ = ctx_.main_stream_;
}

void CudaContext::make_current() const { HLM_CUDA_CHECK(cudaSetDevice(device_)); }

void CudaContext::synchronize() const {
  HLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  HLM_CUDA_CHECK(cudaGetLastError());
}

namespace {
int g_default_device = 0;
bool g_default_created = false;
}  // namespace

CudaContext& cuda_context() {
  static CudaContext* ctx = new CudaContext(g_default_device);  // leaked on purpose (see the header)
  g_default_created = true;
  return *ctx;
}

void cuda_context_select_for_local_rank(int local_rank) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    cudaGetLastError();  // clear the sticky "no device" error; the caller reports a missing GPU itself
    return;
  }
  const int device = cuda_device_for_local_rank(local_rank, count);
  HLM_CHECK(!g_default_created || device == g_default_device, "cuda_context_select_for_local_rank(", local_rank,
            "): the default context already exists on device ", g_default_device);
  g_default_device = device;
}

}  // namespace hlm
