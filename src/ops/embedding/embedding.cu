// Token embedding CUDA kernels and launchers (contract: embedding.h, embedding_cuda.h).
//   forward:  elementwise over [T, D].
//   backward: keys = id (V for a bad id), values = position; cub::DeviceRadixSort::SortPairs (stable); then one block
//             per sorted position that starts a run of equal ids sums the run in fp64 in position order.
// Non-goals for now: splitting very long runs (a padding id repeated 10^5 times is one block's serial work).
#include <cuda_bf16.h>

#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/embedding/embedding_cuda.h"

namespace hlm {

namespace {

constexpr int kRunThreads = 256;

__device__ __forceinline__ float table_value(float x) { return x; }
__device__ __forceinline__ float table_value(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename W>
__global__ void embedding_forward_kernel(float* out, const W* table, const int32_t* ids, int64_t T, int64_t V,
                                         int64_t D, float multiplier, int* error_flag) {
  const int64_t n = T * D;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i - t * D;
    const int32_t id = ids[t];
    if (id < 0 || id >= V) {
      out[i] = cuda::quiet_nan();
      if (d == 0 && error_flag != nullptr) atomicOr(error_flag, 1);
      continue;
    }
    out[i] = __fmul_rn(table_value(table[static_cast<int64_t>(id) * D + d]), multiplier);
  }
}

// keys[t] = ids[t] (or V when out of range), values[t] = t. Unsigned keys: the radix sort looks at bits
// [0, end_bit) only, and every key is in [0, V].
__global__ void embedding_sort_keys_kernel(uint32_t* keys, int32_t* values, const int32_t* ids, int64_t T, int64_t V,
                                           int* error_flag) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < T;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    const bool ok = id >= 0 && id < V;
    if (!ok && error_flag != nullptr) atomicOr(error_flag, 1);
    keys[t] = ok ? static_cast<uint32_t>(id) : static_cast<uint32_t>(V);
    values[t] = static_cast<int32_t>(t);
  }
}

// Block b owns sorted position b if it starts a run of equal keys: sums the run's rows of d_out in fp64, in
// position order (the sort is stable), and adds multiplier · sum into the table row.
__global__ void __launch_bounds__(kRunThreads) embedding_backward_runs_kernel(float* d_table, const float* d_out,
                                                                              const uint32_t* keys,
                                                                              const int32_t* positions, int64_t T,
                                                                              int64_t V, int64_t D, float multiplier) {
  for (int64_t start = blockIdx.x; start < T; start += gridDim.x) {
    const uint32_t key = keys[start];
    if (key >= V || (start > 0 && keys[start - 1] == key)) continue;  // bad ids, or not the first of its run
    int64_t end = start + 1;
    while (end < T && keys[end] == key) ++end;
    float* row = d_table + static_cast<int64_t>(key) * D;
    for (int64_t d = threadIdx.x; d < D; d += kRunThreads) {
      double acc = 0.0;
      for (int64_t j = start; j < end; ++j) acc += static_cast<double>(d_out[static_cast<int64_t>(positions[j]) * D + d]);
      row[d] = __fadd_rn(row[d], __double2float_rn(__dmul_rn(static_cast<double>(multiplier), acc)));
    }
  }
}

int end_bit_for(int64_t V) {  // bits that hold every key in [0, V]
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= V) ++bits;
  return bits;
}

void check_params(const EmbeddingCudaParams& p) {
  HLM_CHECK(p.tokens >= 0 && p.vocab >= 0 && p.dim >= 0, "embedding_cuda: negative shape T=", p.tokens,
            " V=", p.vocab, " D=", p.dim);
  HLM_CHECK(p.tokens < (int64_t{1} << 31) && p.vocab < (int64_t{1} << 31) - 1,
            "embedding_cuda: T and V must fit in int32 (T=", p.tokens, ", V=", p.vocab, ")");
}

struct Workspace {
  uint32_t* keys_in = nullptr;
  uint32_t* keys_out = nullptr;
  int32_t* values_in = nullptr;
  int32_t* values_out = nullptr;
  void* cub_temp = nullptr;
  size_t cub_temp_bytes = 0;
  size_t bytes = 0;
};

// Sizes the workspace (asking CUB for its temporary storage) and, when `base` is given, places the pieces in it.
Workspace carve(void* base, const EmbeddingCudaParams& p) {
  Workspace ws;
  const size_t arr = cuda::align_up_256(static_cast<size_t>(p.tokens) * sizeof(int32_t));
  HLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, ws.cub_temp_bytes, static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<int>(p.tokens), 0,
                                                 end_bit_for(p.vocab)));
  ws.bytes = 4 * arr + cuda::align_up_256(ws.cub_temp_bytes);
  if (base == nullptr) return ws;
  auto* b = static_cast<char*>(base);
  ws.keys_in = reinterpret_cast<uint32_t*>(b);
  ws.keys_out = reinterpret_cast<uint32_t*>(b + arr);
  ws.values_in = reinterpret_cast<int32_t*>(b + 2 * arr);
  ws.values_out = reinterpret_cast<int32_t*>(b + 3 * arr);
  ws.cub_temp = b + 4 * arr;
  return ws;
}

}  // namespace

void embedding_forward_cuda(float* out, const float* table, const int32_t* ids, const EmbeddingCudaParams& p,
                            int* error_flag, cudaStream_t stream) {
  check_params(p);
  if (p.tokens == 0 || p.dim == 0) return;
  embedding_forward_kernel<<<cuda::grid_blocks(p.tokens * p.dim), cuda::kElementwiseThreads, 0, stream>>>(
      out, table, ids, p.tokens, p.vocab, p.dim, p.multiplier, error_flag);
  HLM_CUDA_CHECK_LAUNCH();
}

void embedding_forward_cuda(float* out, const __nv_bfloat16* table, const int32_t* ids, const EmbeddingCudaParams& p,
                            int* error_flag, cudaStream_t stream) {
  check_params(p);
  if (p.tokens == 0 || p.dim == 0) return;
  embedding_forward_kernel<<<cuda::grid_blocks(p.tokens * p.dim), cuda::kElementwiseThreads, 0, stream>>>(
      out, table, ids, p.tokens, p.vocab, p.dim, p.multiplier, error_flag);
  HLM_CUDA_CHECK_LAUNCH();
}

size_t embedding_backward_cuda_workspace_bytes(const EmbeddingCudaParams& p) {
  check_params(p);
  if (p.tokens == 0) return 0;
  return carve(nullptr, p).bytes;
}

void embedding_backward_cuda(float* d_table, const float* d_out, const int32_t* ids, const EmbeddingCudaParams& p,
                             void* workspace, size_t workspace_bytes, int* error_flag, cudaStream_t stream) {
  check_params(p);
  if (p.tokens == 0) return;
  HLM_CHECK(workspace != nullptr, "embedding_backward_cuda: no workspace");
  Workspace ws = carve(workspace, p);
  HLM_CHECK(workspace_bytes >= ws.bytes, "embedding_backward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  embedding_sort_keys_kernel<<<cuda::grid_blocks(p.tokens), cuda::kElementwiseThreads, 0, stream>>>(
      ws.keys_in, ws.values_in, ids, p.tokens, p.vocab, error_flag);
  HLM_CUDA_CHECK_LAUNCH();
  HLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws.cub_temp, ws.cub_temp_bytes, ws.keys_in, ws.keys_out,
                                                 ws.values_in, ws.values_out, static_cast<int>(p.tokens), 0,
                                                 end_bit_for(p.vocab), stream));
  if (p.dim == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(p.tokens, cuda::kMaxGridBlocks));
  embedding_backward_runs_kernel<<<blocks, kRunThreads, 0, stream>>>(d_table, d_out, ws.keys_out, ws.values_out,
                                                                     p.tokens, p.vocab, p.dim, p.multiplier);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
