// cuBLASLt loaded on first use (dlopen) instead of linked: the cublasLt* functions the backend calls are defined
// here with the library's own declarations (cublasLt.h) and forward to the library's symbols, resolved once.
//
// Why: libcublasLt.so's static constructors cost about 0.5-0.7 s of CPU in every process that links it, GPU or not
// (measured on the 2-core machine, 2026-12-02: an empty program 0.00 s of user+sys, linked with libcublasLt.so.13
// 0.5-0.7 s; `hybridlm pretrain --bogus-flag` 0.71 s linked, 0.04 s with this file). Every `hybridlm` process and
// every test process that pulls in the CUDA backend paid it at start, also on machines without a GPU (CI: ~300 test
// processes and the CLI tests' hybridlm children). Now only a process that creates a CUDA context
// (CudaContext -> cublasLtCreate) loads it.
//
// Which library: libcublasLt.so.<major of the headers built against>, found like any DT_NEEDED library was
// (LD_LIBRARY_PATH, the executable's RUNPATH, ld.so.cache); HLM_CUBLASLT_LIB=/path/to/libcublasLt.so.N overrides it.
// When it cannot be loaded, cublasLtCreate returns CUBLAS_STATUS_NOT_INITIALIZED and cublasLtGetStatusString names
// the library and dlerror's reason, so HLM_CUBLAS_CHECK's message says what is missing. A function called before
// cublasLtCreate succeeded (none is in this codebase) gets the same status.
#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace {

struct CublasLtLib {
  void* handle = nullptr;
  std::string error;  // why it is not loaded ("" when loaded)
};

CublasLtLib& lib() {
  static CublasLtLib l;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("HLM_CUBLASLT_LIB");
    const std::string path = env != nullptr && *env != '\0' ? env : "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    l.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const char* e = dlerror();
      l.error = "dlopen(" + path + ") failed: " + (e != nullptr ? e : "?") +
                " (put the CUDA toolkit's lib folder on LD_LIBRARY_PATH or set HLM_CUBLASLT_LIB)";
    }
  });
  return l;
}

// The library's function `name`, or nullptr (library or symbol missing; lib().error then says which).
template <typename F>
F resolve(const char* name) {
  CublasLtLib& l = lib();
  if (l.handle == nullptr) return nullptr;
  return reinterpret_cast<F>(dlsym(l.handle, name));
}

}  // namespace

// Each definition resolves its symbol once (a function-local static) and forwards its arguments unchanged.
#define HLM_CUBLASLT_FORWARD(name, params, args)                                                  \
  cublasStatus_t CUBLASWINAPI name params {                                                       \
    static const auto fn = resolve<decltype(&name)>(#name);                                       \
    return fn != nullptr ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;                               \
  }

extern "C" {

HLM_CUBLASLT_FORWARD(cublasLtCreate, (cublasLtHandle_t* handle), (handle))
HLM_CUBLASLT_FORWARD(cublasLtDestroy, (cublasLtHandle_t handle), (handle))
HLM_CUBLASLT_FORWARD(cublasLtMatmul,
                     (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                      cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                      const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                      const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream),
                     (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                      workspace_bytes, stream))
HLM_CUBLASLT_FORWARD(cublasLtMatmulAlgoConfigGetAttribute,
                     (const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                      size_t size, size_t* written),
                     (algo, attr, buf, size, written))
HLM_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic,
                     (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                      cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                      cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
                      int* returned),
                     (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))
HLM_CUBLASLT_FORWARD(cublasLtMatmulDescCreate,
                     (cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale),
                     (desc, compute, scale))
HLM_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
HLM_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute,
                     (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size),
                     (desc, attr, buf, size))
HLM_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t* pref), (pref))
HLM_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
HLM_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute,
                     (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                      size_t size),
                     (pref, attr, buf, size))
HLM_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate,
                     (cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                     (layout, type, rows, cols, ld))
HLM_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))

// The library's version (the GEMM tuning cache's scope, ops/matmul/matmul.cu); 0 when it is not loaded.
size_t CUBLASWINAPI cublasLtGetVersion(void) {
  static const auto fn = resolve<decltype(&cublasLtGetVersion)>("cublasLtGetVersion");
  return fn != nullptr ? fn() : 0;
}
// Status texts: the library's own once it is loaded; otherwise the status name and, for the text, why the library
// is not loaded (the only way this file returns a status of its own).
const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  static const auto fn = resolve<decltype(&cublasLtGetStatusName)>("cublasLtGetStatusName");
  if (fn != nullptr) return fn(status);
  return status == CUBLAS_STATUS_NOT_INITIALIZED ? "CUBLAS_STATUS_NOT_INITIALIZED" : "CUBLAS_STATUS_(unknown)";
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  static const auto fn = resolve<decltype(&cublasLtGetStatusString)>("cublasLtGetStatusString");
  if (fn != nullptr) return fn(status);
  const CublasLtLib& l = lib();
  return l.error.empty() ? "cuBLASLt symbol missing" : l.error.c_str();
}

}  // extern "C"

#undef HLM_CUBLASLT_FORWARD
