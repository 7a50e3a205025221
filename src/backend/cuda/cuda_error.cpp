#include "backend/cuda/cuda_error.h"

#include "core/error.h"

namespace hlm {

void cuda_throw_error(cudaError_t status, const char* expr, const char* file, int line) {
  throw_internal_error(file, ":", line, ": CUDA call `", expr, "` failed: ", cudaGetErrorName(status), " (",
                       cudaGetErrorString(status), ")");
}

void cublas_throw_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  throw_internal_error(file, ":", line, ": cuBLASLt call `", expr, "` failed: ", cublasLtGetStatusName(status), " (",
                       cublasLtGetStatusString(status), ")");
}

}  // namespace hlm
