// Internal to src/ops/attention: the pieces attention.cu (scalar kernels, launchers) and attention_tc.cu (tensor-core
// bf16 kernels) share: the kernels' view of the shapes, cu_seqlens validation, and the tensor-core entry points.
// Contract and semantics: attention_cuda.h. Included only by .cu files (C++17).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hlm::attention_detail {

// Shapes as the kernels see them.
struct Dims {
  int64_t T, Hq, Hkv, group, n_seqs, max_seqlen, n_tiles;  // n_tiles: tiles per sequence, ceil(max_seqlen / 64)
  int D;
  float scale;
  int64_t window;  // sliding window (attention.h): keys pos−W+1 .. pos; 0 = full causal. The scalar kernels only.
};

struct SeqBounds {
  int64_t begin, len;
  bool ok;
};

// Sequence `seq` of cu_seqlens, validated (see attention_cuda.h); a bad one raises the error flag.
__device__ inline SeqBounds seq_bounds(const int64_t* cu_seqlens, int64_t seq, const Dims& dm, int* error_flag) {
  const int64_t b = cu_seqlens[seq], e = cu_seqlens[seq + 1];
  bool ok = b >= 0 && e >= b && e <= dm.T && e - b <= dm.max_seqlen;
  if (seq == 0 && b != 0) ok = false;
  if (seq == dm.n_seqs - 1 && e != dm.T) ok = false;
  if (!ok && error_flag != nullptr && threadIdx.x == 0) atomicOr(error_flag, 1);
  return {b, e - b, ok};
}

// ---- Tensor-core bf16 path (attention_tc.cu): head dims 64 and 128, 16-byte aligned tensors.

// Whether the tensor-core kernels take this call (else the scalar kernels do).
bool tc_supported(const Dims& dm, const void* const* tensors, int n_tensors);

// out, lse OVERWRITTEN (as attention_forward_cuda).
void tc_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                const __nv_bfloat16* v, const int64_t* cu_seqlens, const Dims& dm, int* error_flag,
                cudaStream_t stream);

// dq, dk, dv OVERWRITTEN (as attention_backward_cuda); dvec [T·Hq] fp32 is scratch for Dᵢ = rowsum(dO ∘ O).
void tc_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* d_out,
                 const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* out,
                 const float* lse, float* dvec, const int64_t* cu_seqlens, const Dims& dm, int* error_flag,
                 cudaStream_t stream);

// ---- Paged tensor-core forward (attention_cache.cu's bf16 chunk path): shapes as attention_cache.cu's CacheDims.
struct PagedDims {
  int64_t T, N, Hq, Hkv, group, num_blocks, block_size, max_blocks, max_q, max_ctx;
  int64_t n_tiles;  // query tiles per sequence, ceil(max_q / 64)
  int D;            // 64 or 128
  float scale;
};

// out [T, Hq, D] bf16 OVERWRITTEN from q [T, Hq, D] bf16 and the bf16 cache [num_blocks, block_size, Hkv, D]
// (attention_cache_cuda.h's contract; 16-byte aligned pointers).
void tc_paged_forward(__nv_bfloat16* out, const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const int32_t* tables, const int64_t* context_lens,
                      const int64_t* cu_seqlens, const PagedDims& dm, int* error_flag, cudaStream_t stream);

}  // namespace hlm::attention_detail
