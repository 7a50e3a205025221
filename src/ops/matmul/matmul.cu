// Linear product via cuBLASLt (contract: matmul.h, matmul_cuda.h).
//
// Row-major -> column-major: a row-major [r, c] matrix is a column-major [c, r] one, so
//   forward  y[M,N]  = x · wᵀ  is  Dᵀ[N,M] = op_T(w as [K,N]) · op_N(x as [K,M])       (m=N, n=M, k=K)
//   dx[M,K]          = dy · w  is  Dᵀ[K,M] = op_N(w as [K,N]) · op_N(dy as [N,M])      (m=K, n=M, k=N)
//   dw[N,K]         += dyᵀ · x is  Dᵀ[K,N] = op_N(x as [K,M]) · op_T(dy as [N,M])      (m=K, n=N, k=M)
// Degenerate shapes follow the CPU's gemm_safe: nothing to do for an empty output; an empty inner dimension gives
// zeros (overwrite) or leaves the output (accumulate), then the bias is added.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "core/env_switch.h"
#include "core/error.h"
#include "core/tuning_cache.h"
#include "ops/matmul/matmul_cuda.h"

namespace hlm {

namespace {

template <typename T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t cuda_type<__nv_bfloat16>() {
  return CUDA_R_16BF;
}

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristic needs it to skip algorithms that assume
// more alignment than a pointer has (its default assumption is 256).
uint32_t pointer_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

struct LtGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  cudaDataType_t ab_type = CUDA_R_32F;
  void* D = nullptr;  // also C
  int64_t ldd = 0;
  cudaDataType_t d_type = CUDA_R_32F;
  float beta = 0.0f;
  const void* bias = nullptr;  // [m], type d_type
};

// RAII for the cuBLASLt descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

OverridableSwitch g_autotune{"HLM_MATMUL_AUTOTUNE", false};

// HLM_MATMUL_AUTOTUNE=on: for a new key, the heuristic's first kAutotuneCandidates algorithms are each run
// kAutotuneRuns times on the call's own operands and the fastest (mean of the runs, CUDA events) is kept for the key.
// Their output: D itself when the call overwrites it (beta 0: the call writes it again afterwards); for beta ≠ 0 a
// zeroed scratch of D's shape (cudaMalloc'd for the timing and freed; if it cannot be had, the heuristic's first
// algorithm is kept). Not while the stream is being captured into a graph (a timed run needs a host wait). Off by
// default: which algorithm wins may change from run to run with timing noise, and with it the products' summation
// order, so results are reproducible across processes only without it — or with HLM_MATMUL_AUTOTUNE_CACHE=FILE, where
// each key's first timed choice is kept for every later process that reads the file (core/tuning_cache.h).
constexpr int kAutotuneCandidates = 8;
constexpr int kAutotuneRuns = 3;
std::atomic<size_t> g_autotuned_keys{0};  // keys timed among ≥ 2 algorithms

struct AutotuneTrial {
  int index;
  float ms;  // mean of kAutotuneRuns runs
};

// The index into `results` of the fastest candidate (0 when timing is not possible).
int autotune_pick(const CudaBlasLt& lt, const LtDescriptors& desc, const LtGemm& g,
                  const cublasLtMatmulHeuristicResult_t* results, int found, std::vector<AutotuneTrial>* trials) {
  trials->clear();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  HLM_CUDA_CHECK(cudaStreamIsCapturing(lt.stream, &capture));
  if (found < 2 || capture != cudaStreamCaptureStatusNone) return 0;
  void* out = g.D;
  void* scratch = nullptr;
  if (g.beta != 0.0f) {
    const size_t bytes = static_cast<size_t>(g.ldd) * static_cast<size_t>(g.n) * (g.d_type == CUDA_R_16BF ? 2 : 4);
    if (cudaMalloc(&scratch, bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory here is not an error of the call: keep the heuristic's first
      return 0;
    }
    HLM_CUDA_CHECK(cudaMemsetAsync(scratch, 0, bytes, lt.stream));
    out = scratch;
  }
  const void *A = g.A, *B = g.B;
  cudaEvent_t start = nullptr, stop = nullptr;
  HLM_CUDA_CHECK(cudaEventCreate(&start));
  HLM_CUDA_CHECK(cudaEventCreate(&stop));
  const float alpha = 1.0f, beta = g.beta;
  int best = 0;
  float best_ms = 0.0f;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > lt.workspace_bytes) continue;
    const auto run = [&] {
      return cublasLtMatmul(lt.handle, desc.op, &alpha, A, desc.a, B, desc.b, &beta, out, desc.d, out, desc.d,
                            &results[i].algo, lt.workspace, lt.workspace_bytes, lt.stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; a candidate that refuses the call is skipped
    HLM_CUDA_CHECK(cudaEventRecord(start, lt.stream));
    for (int r = 0; r < kAutotuneRuns; ++r) HLM_CUBLAS_CHECK(run());
    HLM_CUDA_CHECK(cudaEventRecord(stop, lt.stream));
    HLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    HLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    ms /= kAutotuneRuns;
    if (trials->empty() || ms < best_ms) best = i, best_ms = ms;
    trials->push_back({i, ms});
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (scratch != nullptr) HLM_CUDA_CHECK(cudaFree(scratch));  // after the last event's wait: nothing reads it now
  if (trials->size() >= 2) g_autotuned_keys.fetch_add(1);
  return best;
}

// The tuning-cache scope of the current device (core/tuning_cache.h): a choice is an index into the heuristic's list,
// which depends on the GPU model, its SM count and the cuBLASLt version besides the key. Asked of the driver once
// per device (cudaGetDeviceProperties is slow), then kept.
std::string gemm_tuning_scope() {
  int device = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<int, std::string> scopes;
  std::lock_guard<std::mutex> lock(mutex);
  std::string& scope = scopes[device];
  if (scope.empty()) {
    cudaDeviceProp prop{};
    HLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    scope = "gemm " + std::string(prop.name) + " sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + " " +
            std::to_string(prop.multiProcessorCount) + " SMs cublasLt " + std::to_string(cublasLtGetVersion());
  }
  return scope;
}

// The candidates' timings as text (" #i t ms" each), for the tuning cache's note and HLM_MATMUL_LOG_ALGO.
std::string trials_text(const std::vector<AutotuneTrial>& trials) {
  std::string text;
  for (const AutotuneTrial& t : trials) text += " #" + std::to_string(t.index) + " " + std::to_string(t.ms) + " ms";
  return text;
}

// The tuning-cache key of a GEMM: every field the heuristic's answer depends on (AlgoKey below, less the handle).
std::string gemm_tuning_key(const LtGemm& g, uint32_t align_a, uint32_t align_b, uint32_t align_d, uint64_t ws) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  return "ab " + n(static_cast<int>(g.ab_type)) + " d " + n(static_cast<int>(g.d_type)) + " ta " + n(g.trans_a) +
         " tb " + n(g.trans_b) + " m " + n(g.m) + " n " + n(g.n) + " k " + n(g.k) + " lda " + n(g.lda) + " ldb " +
         n(g.ldb) + " ldd " + n(g.ldd) + " bias " + n(g.bias != nullptr) + " beta " + n(g.beta != 0.0f) +
         " align " + n(align_a) + "," + n(align_b) + "," + n(align_d) + " ws " + std::to_string(ws);
}

// Column-major D[m, n] = op(A) · op(B) + beta · D (+ bias per row), fp32 compute and scale.
void lt_gemm(const CudaBlasLt& lt, const LtGemm& g) {
  LtDescriptors desc;
  HLM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  HLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  HLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (g.bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    HLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    HLM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  }
  // Stored shapes (before op): A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
  HLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, g.ab_type, static_cast<uint64_t>(g.trans_a ? g.k : g.m),
                                              static_cast<uint64_t>(g.trans_a ? g.m : g.k), g.lda));
  HLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, g.ab_type, static_cast<uint64_t>(g.trans_b ? g.n : g.k),
                                              static_cast<uint64_t>(g.trans_b ? g.k : g.n), g.ldb));
  HLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, g.d_type, static_cast<uint64_t>(g.m),
                                              static_cast<uint64_t>(g.n), g.ldd));

  HLM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
  const uint64_t ws = lt.workspace_bytes;
  HLM_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = pointer_alignment(g.A), align_b = pointer_alignment(g.B), align_d = pointer_alignment(g.D);
  HLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                        &align_a, sizeof(align_a)));
  HLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                        &align_b, sizeof(align_b)));
  HLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                        &align_d, sizeof(align_d)));
  HLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                        &align_d, sizeof(align_d)));

  // The heuristic's answer depends only on the descriptors (shapes, types, ops, epilogue, alignments, workspace), so
  // it is asked once per distinct key: a training step makes hundreds of GEMM calls of a few shapes, and each query
  // costs tens of microseconds of host time. Same key, same algorithm: results stay reproducible.
  // The autotune switch is part of the key, so that an A/B in one process (matmul_cuda_set_autotune) gets both.
  const bool tune = g_autotune.on();
  using AlgoKey = std::tuple<const void*, int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             bool, bool, uint32_t, uint32_t, uint32_t, uint64_t, bool>;
  static std::mutex cache_mutex;
  static std::map<AlgoKey, cublasLtMatmulAlgo_t> cache;
  const AlgoKey key{lt.handle, static_cast<int>(g.ab_type), static_cast<int>(g.d_type), g.trans_a, g.trans_b, g.m,
                    g.n, g.k, g.lda, g.ldb, g.ldd, g.bias != nullptr, g.beta != 0.0f, align_a, align_b, align_d, ws, tune};
  cublasLtMatmulAlgo_t algo{};
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      algo = it->second;
      cached = true;
    }
  }
  if (!cached) {
    cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates]{};
    int found = 0;
    HLM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref,
                                                    tune ? kAutotuneCandidates : 1, results, &found));
    HLM_CHECK(found > 0, "cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k, " (transa ", g.trans_a,
              ", transb ", g.trans_b, ", lda ", g.lda, ", ldb ", g.ldb, ", ldd ", g.ldd, ")");
    std::vector<AutotuneTrial> trials;
    int pick = 0;
    bool from_file = false;
    if (tune) {
      // HLM_MATMUL_AUTOTUNE_CACHE=FILE: an earlier process's choice for this key is taken without timing (the same
      // algorithm, the same bits); a new choice is appended for the next.
      TuningCache* file = gemm_tuning_cache();
      std::string scope, text;
      if (file != nullptr) {
        scope = gemm_tuning_scope();
        text = gemm_tuning_key(g, align_a, align_b, align_d, ws);
        const std::optional<int> c = file->find(scope, text);
        if (c && *c < found && results[*c].state == CUBLAS_STATUS_SUCCESS &&
            results[*c].workspaceSize <= lt.workspace_bytes) {
          pick = *c;
          from_file = true;
        }
      }
      if (!from_file) {
        pick = autotune_pick(lt, desc, g, results, found, &trials);
        if (file != nullptr && trials.size() >= 2)
          file->record(scope, text, pick, "picked by timing:" + trials_text(trials));
      }
    }
    algo = results[pick].algo;
    // HLM_MATMUL_LOG_ALGO=1: one stderr line per new key with the split-K count and reduction scheme chosen (used to
    // rule out split-K as the cause of the bf16 weight gradients' double rounding; docs/memory.md).
    static const bool log_algo = std::getenv("HLM_MATMUL_LOG_ALGO") != nullptr;
    if (log_algo) {
      int32_t splits = 1;
      uint32_t scheme = 0;
      size_t written = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                                           &written);
      const std::string choice = !trials.empty() ? "; autotune picked #" + std::to_string(pick) + ":" + trials_text(trials)
                                 : from_file       ? "; autotune cache: #" + std::to_string(pick)
                                                   : std::string();
      std::fprintf(stderr, "matmul algo: m %lld n %lld k %lld out %s beta %g: split-K %d, reduction scheme %u%s\n",
                   static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                   g.d_type == CUDA_R_16BF ? "bf16" : "f32", g.beta, splits, scheme, choice.c_str());
    }
    std::lock_guard<std::mutex> lock(cache_mutex);
    cache.emplace(key, algo);
  }
  const float alpha = 1.0f;
  HLM_CUBLAS_CHECK(cublasLtMatmul(lt.handle, desc.op, &alpha, g.A, desc.a, g.B, desc.b, &g.beta, g.D, desc.d, g.D,
                                  desc.d, &algo, lt.workspace, lt.workspace_bytes, lt.stream));
}

// ---- Small kernels for the degenerate K = 0 / empty-inner cases and for dbias.

template <typename T>
__global__ void fill_zero_kernel(T* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = cuda::from_f32<T>(0.0f);
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t M, int64_t N) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = cuda::from_f32<T>(cuda::to_f32(y[i]) + cuda::to_f32(bias[i % N]));
}

template <typename T>
struct DbiasTerm {
  const T* dy;
  int64_t N;
  __device__ float operator()(int64_t r, int64_t c) const { return cuda::to_f32(dy[r * N + c]); }
};

// dw[i] = bf16_rn(dw[i] + product[i]): the fp32 sum of the held bf16 gradient and this call's fp32 product, rounded
// to bf16 once (the lean plan's weight gradients).
__device__ __forceinline__ __nv_bfloat16 add_round_one(__nv_bfloat16 held, float product) {
  return __float2bfloat16_rn(__fadd_rn(__bfloat162float(held), product));
}

__global__ void add_round_bf16_kernel(__nv_bfloat16* dw, const float* product, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dw[i] = add_round_one(dw[i], product[i]);
}

// The same, eight elements per thread (one 16-byte load and store of dw, two of the product). The scalar form, with
// 2-byte accesses, took 27.5 ms of the 4B step for ~69 GB (2 micro-batches × ~4.3G gradient elements × 8 bytes, an
// estimate): ~2.5 TB/s, half the H200's bandwidth. Same bits as the scalar form.
__global__ void add_round_bf16_vec8_kernel(__nv_bfloat16* dw, const float* product, int64_t n8) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint4 held = reinterpret_cast<const uint4*>(dw)[i];
    const float4 p0 = reinterpret_cast<const float4*>(product)[2 * i];
    const float4 p1 = reinterpret_cast<const float4*>(product)[2 * i + 1];
    __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(&held);
    const float p[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = add_round_one(h[j], p[j]);
    reinterpret_cast<uint4*>(dw)[i] = held;
  }
}

// dw = bf16_rn(dw + product) over n elements: the vector kernel on the 16-byte-aligned whole groups of eight, the
// scalar one on the rest.
void add_round_bf16(__nv_bfloat16* dw, const float* product, int64_t n, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(dw) % 16 == 0 && reinterpret_cast<uintptr_t>(product) % 16 == 0;
  const int64_t n8 = aligned ? n / 8 : 0;
  if (n8 > 0) {
    add_round_bf16_vec8_kernel<<<cuda::grid_blocks(n8), cuda::kElementwiseThreads, 0, stream>>>(dw, product, n8);
    HLM_CUDA_CHECK_LAUNCH();
  }
  const int64_t rest = n - 8 * n8;
  if (rest > 0) {
    add_round_bf16_kernel<<<cuda::grid_blocks(rest), cuda::kElementwiseThreads, 0, stream>>>(dw + 8 * n8,
                                                                                          product + 8 * n8, rest);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

void check_params(const MatmulCudaParams& p) {
  HLM_CHECK(p.M >= 0 && p.N >= 0 && p.K >= 0, "matmul_cuda: negative shape M=", p.M, " N=", p.N, " K=", p.K);
}

// TI: operand storage (x, w); TO: result and bias storage (y, bias). Products and sums are fp32 either way.
template <typename TI, typename TO>
void forward_impl(const CudaBlasLt& lt, TO* y, const TI* x, const TI* w, const TO* bias, const MatmulCudaParams& p,
                  bool accumulate) {
  check_params(p);
  const int64_t M = p.M, N = p.N, K = p.K;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) {
      fill_zero_kernel<TO><<<cuda::grid_blocks(M * N), cuda::kElementwiseThreads, 0, lt.stream>>>(y, M * N);
      HLM_CUDA_CHECK_LAUNCH();
    }
    if (bias != nullptr) {
      add_bias_kernel<TO><<<cuda::grid_blocks(M * N), cuda::kElementwiseThreads, 0, lt.stream>>>(y, bias, M, N);
      HLM_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  LtGemm g;
  g.trans_a = true;  // w stored [K, N] column-major
  g.trans_b = false;
  g.m = N;
  g.n = M;
  g.k = K;
  g.A = w;
  g.lda = K;
  g.B = x;
  g.ldb = K;
  g.ab_type = cuda_type<TI>();
  g.d_type = cuda_type<TO>();
  g.D = y;
  g.ldd = N;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.bias = bias;
  lt_gemm(lt, g);
}

// How a bf16 dw takes the product dyᵀ·x (matmul_cuda.h): added through an fp32 scratch and rounded once
// (Scratch), cuBLASLt's bf16 output with C = D = dw and beta 1 (Epilogue: no scratch, not one rounding), or
// cuBLASLt's bf16 output with beta 0 (Overwrite: dw = bf16(product), the held value is not read).
enum class Bf16Dw { Scratch, Epilogue, Overwrite };

// TI: operand storage (dy, x, w); TO: dx storage; TW: dw storage (fp32: accumulated by the GEMM, beta 1; or bf16 as
// `mode` says: the product written in fp32 to dw_scratch [N, K], beta 0, then added to dw and rounded once by
// add_round_bf16_kernel; or cuBLASLt's bf16 output into dw with beta 1 or 0, no scratch and no extra kernel).
// dbias is fp32.
template <typename TI, typename TO, typename TW = float>
void backward_impl(const CudaBlasLt& lt, TO* dx, TW* dw, float* dbias, const TI* dy, const TI* x, const TI* w,
                   const MatmulCudaParams& p, bool accumulate_dx, float* dw_scratch = nullptr,
                   Bf16Dw mode = Bf16Dw::Scratch) {
  check_params(p);
  if constexpr (!std::is_same_v<TW, float>)
    HLM_CHECK(mode != Bf16Dw::Scratch || dw == nullptr || dw_scratch != nullptr,
              "matmul backward: a bf16 dw needs an fp32 scratch of N*K floats (or the epilogue or overwrite entry "
              "point)");
  const int64_t M = p.M, N = p.N, K = p.K;
  if (dx != nullptr && M > 0 && K > 0) {
    if (N == 0) {
      if (!accumulate_dx) {
        fill_zero_kernel<TO><<<cuda::grid_blocks(M * K), cuda::kElementwiseThreads, 0, lt.stream>>>(dx, M * K);
        HLM_CUDA_CHECK_LAUNCH();
      }
    } else {
      LtGemm g;
      g.m = K;
      g.n = M;
      g.k = N;
      g.A = w;
      g.lda = K;
      g.B = dy;
      g.ldb = N;
      g.ab_type = cuda_type<TI>();
      g.d_type = cuda_type<TO>();
      g.D = dx;
      g.ldd = K;
      g.beta = accumulate_dx ? 1.0f : 0.0f;
      lt_gemm(lt, g);
    }
  }
  if (dw != nullptr && N > 0 && K > 0 && M > 0) {
    LtGemm g;
    g.trans_b = true;
    g.m = K;
    g.n = N;
    g.k = M;
    g.A = x;
    g.lda = K;
    g.B = dy;
    g.ldb = N;
    g.ab_type = cuda_type<TI>();
    g.ldd = K;
    if constexpr (std::is_same_v<TW, float>) {
      g.D = dw;
      g.d_type = CUDA_R_32F;
      g.beta = 1.0f;
      lt_gemm(lt, g);
    } else if (mode != Bf16Dw::Scratch) {
      // cuBLASLt's bf16 output: D = C = dw (one layout descriptor for both, as cuBLASLt requires for C == D), beta 1
      // (Epilogue: added to the held value) or 0 (Overwrite: the held value is not read).
      g.D = dw;
      g.d_type = CUDA_R_16BF;
      g.beta = mode == Bf16Dw::Epilogue ? 1.0f : 0.0f;
      lt_gemm(lt, g);
    } else {
      g.D = dw_scratch;
      g.d_type = CUDA_R_32F;
      g.beta = 0.0f;
      lt_gemm(lt, g);
      add_round_bf16(dw, dw_scratch, N * K, lt.stream);
    }
  }
  if (dbias != nullptr && N > 0) {
    // After the products on the same stream, so the partials may reuse the cuBLASLt workspace.
    const ColumnSumPlan plan = column_sum_plan(M, N, lt.workspace_bytes);
    cuda::column_sum_accumulate(dbias, DbiasTerm<TI>{dy, N}, M, N, plan, static_cast<float*>(lt.workspace), lt.stream);
  }
}

}  // namespace

bool matmul_cuda_autotune() { return g_autotune.on(); }
void matmul_cuda_set_autotune(int on) { g_autotune.set(on); }
size_t matmul_cuda_autotuned_keys() { return g_autotuned_keys.load(); }

void matmul_forward_cuda(const CudaBlasLt& lt, float* y, const float* x, const float* w, const float* bias,
                         const MatmulCudaParams& p, bool accumulate) {
  forward_impl(lt, y, x, w, bias, p, accumulate);
}

void matmul_forward_cuda(const CudaBlasLt& lt, __nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w,
                         const __nv_bfloat16* bias, const MatmulCudaParams& p, bool accumulate) {
  forward_impl(lt, y, x, w, bias, p, accumulate);
}

void matmul_backward_cuda(const CudaBlasLt& lt, float* dx, float* dw, float* dbias, const float* dy, const float* x,
                          const float* w, const MatmulCudaParams& p, bool accumulate_dx) {
  backward_impl(lt, dx, dw, dbias, dy, x, w, p, accumulate_dx);
}

void matmul_backward_cuda(const CudaBlasLt& lt, __nv_bfloat16* dx, float* dw, float* dbias, const __nv_bfloat16* dy,
                          const __nv_bfloat16* x, const __nv_bfloat16* w, const MatmulCudaParams& p,
                          bool accumulate_dx) {
  backward_impl(lt, dx, dw, dbias, dy, x, w, p, accumulate_dx);
}

void matmul_forward_mixed_cuda(const CudaBlasLt& lt, float* y, const __nv_bfloat16* x, const __nv_bfloat16* w,
                               const float* bias, const MatmulCudaParams& p, bool accumulate) {
  forward_impl(lt, y, x, w, bias, p, accumulate);
}

void matmul_backward_mixed_cuda(const CudaBlasLt& lt, float* dx, float* dw, float* dbias, const __nv_bfloat16* dy,
                                const __nv_bfloat16* x, const __nv_bfloat16* w, const MatmulCudaParams& p,
                                bool accumulate_dx) {
  backward_impl(lt, dx, dw, dbias, dy, x, w, p, accumulate_dx);
}

void matmul_backward_mixed_cuda(const CudaBlasLt& lt, float* dx, __nv_bfloat16* dw, float* dw_scratch, float* dbias,
                                const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                const MatmulCudaParams& p, bool accumulate_dx) {
  backward_impl(lt, dx, dw, dbias, dy, x, w, p, accumulate_dx, dw_scratch);
}

void matmul_backward_mixed_bf16_epilogue_cuda(const CudaBlasLt& lt, float* dx, __nv_bfloat16* dw, float* dbias,
                                              const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                              const __nv_bfloat16* w, const MatmulCudaParams& p, bool accumulate_dx) {
  backward_impl(lt, dx, dw, dbias, dy, x, w, p, accumulate_dx, nullptr, Bf16Dw::Epilogue);
}

void matmul_backward_mixed_bf16_overwrite_cuda(const CudaBlasLt& lt, float* dx, __nv_bfloat16* dw, float* dbias,
                                               const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                               const __nv_bfloat16* w, const MatmulCudaParams& p,
                                               bool accumulate_dx) {
  backward_impl(lt, dx, dw, dbias, dy, x, w, p, accumulate_dx, nullptr, Bf16Dw::Overwrite);
}

}  // namespace hlm
