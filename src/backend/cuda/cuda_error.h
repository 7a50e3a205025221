// CUDA and cuBLASLt error checks: every runtime/library call goes through HLM_CUDA_CHECK / HLM_CUBLAS_CHECK, which
// throw hlm::Error (kind Internal) naming the call, file:line and the library's own description of the status.
// HLM_CUDA_CHECK_LAUNCH() after a kernel launch catches bad launch configurations (it does not synchronize, so
// faults inside the kernel surface at the next synchronizing call).
//
// C++17-safe (included by .cu files, which nvcc compiles as C++17).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace hlm {

[[noreturn]] void cuda_throw_error(cudaError_t status, const char* expr, const char* file, int line);
[[noreturn]] void cublas_throw_error(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace hlm

#define HLM_CUDA_CHECK(expr)                                                       \
  do {                                                                             \
    const cudaError_t hlm_cuda_status_ = (expr);                                   \
    if (hlm_cuda_status_ != cudaSuccess)                                           \
      ::hlm::cuda_throw_error(hlm_cuda_status_, #expr, __FILE__, __LINE__);        \
  } while (0)

#define HLM_CUBLAS_CHECK(expr)                                                     \
  do {                                                                             \
    const cublasStatus_t hlm_cublas_status_ = (expr);                              \
    if (hlm_cublas_status_ != CUBLAS_STATUS_SUCCESS)                               \
      ::hlm::cublas_throw_error(hlm_cublas_status_, #expr, __FILE__, __LINE__);    \
  } while (0)

#define HLM_CUDA_CHECK_LAUNCH() HLM_CUDA_CHECK(cudaGetLastError())
