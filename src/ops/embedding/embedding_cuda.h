// Token embedding on CUDA: launchers for the contract in embedding.h, f32, raw device pointers, queued on `stream`.
//
// Forward: out[t, :] = table[ids[t], :] · multiplier, bit-identical to the CPU (one fp32 product per element).
// Backward: d_table[v, :] += multiplier · Σ_{t: ids[t] = v} d_out[t, :] (ACCUMULATED), deterministic by sorted
// per-row ownership: a stable radix sort (CUB) of (id, position) pairs puts each id's tokens together in ascending
// position order; one thread block owns each distinct id and sums its tokens' rows in that order in fp64, then adds
// multiplier · sum rounded to fp32: the CPU reference's algorithm, so the result is bit-identical to it, independent
// of the GPU, and no float atomics are used.
//
// Bad ids: the CPU throws an input error before writing anything; a kernel cannot. Here an id outside [0, V) sets
// *error_flag = 1 (when error_flag is not nullptr; the flag is never cleared by these calls), the forward writes
// NaN to that token's output row, and the backward skips that token. Callers check the flag when convenient.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct EmbeddingCudaParams {
  int64_t tokens = 0;  // T
  int64_t vocab = 0;   // V
  int64_t dim = 0;     // D
  float multiplier = 1.0f;
};

// out [T, D] from table [V, D] and ids [T] (int32).
void embedding_forward_cuda(float* out, const float* table, const int32_t* ids, const EmbeddingCudaParams& p,
                            int* error_flag, cudaStream_t stream);
// The same from a bf16 table (inference with bf16 weights only): each entry widened to fp32, then times multiplier.
void embedding_forward_cuda(float* out, const __nv_bfloat16* table, const int32_t* ids, const EmbeddingCudaParams& p,
                            int* error_flag, cudaStream_t stream);

// Bytes of device scratch embedding_backward_cuda needs (sort keys/values and CUB's temporary storage). Asks CUB,
// so it needs a usable device.
size_t embedding_backward_cuda_workspace_bytes(const EmbeddingCudaParams& p);

// d_table [V, D] += multiplier · scatter-sum of d_out [T, D] by ids.
void embedding_backward_cuda(float* d_table, const float* d_out, const int32_t* ids, const EmbeddingCudaParams& p,
                             void* workspace, size_t workspace_bytes, int* error_flag, cudaStream_t stream);

}  // namespace hlm
