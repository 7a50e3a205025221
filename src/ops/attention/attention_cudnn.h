// Causal GQA attention through cuDNN's fused flash-attention engines (the "cudnn" attention engine): the contract of
// attention_cuda.h for bf16 storage, computed by cuDNN 9's runtime-fused SDPA kernels instead of ours. cuDNN is
// loaded at run time (dlopen of libcudnn.so.9; HLM_CUDNN_LIB=/path/to/libcudnn.so.9 names it), so a build or a machine
// without cuDNN keeps working: every entry point then answers "not available" and the caller runs the native kernels.
// On the GPU machine cuDNN sits in the PyTorch environment (site-packages/nvidia/cudnn/lib): put that folder on
// LD_LIBRARY_PATH or name the file with HLM_CUDNN_LIB.
//
// Which engine runs: HLM_ATTENTION_ENGINE=native (default) | cudnn. With cudnn, attention_forward_cuda /
// attention_backward_cuda (bf16 overloads) try cuDNN first and fall back to the native kernels when cuDNN is absent or
// refuses the call; the first refusal of each kind is printed once to stderr.
//
// What cuDNN takes here (else: not supported, native kernels):
//   - every sequence of the batch has the same length (n_seqs · max_seqlen == T: then, cu_seqlens being valid, each
//     is exactly max_seqlen long), no sliding window, head dim a multiple of 8 up to 256, Hkv divides Hq;
//   - layouts: q, out [T, Hq, D] and k, v [T, Hkv, D] token-major as in attention_cuda.h, described to cuDNN as
//     [B, H, S, D] with strides; lse [T, Hq] fp32 in OUR layout (stats strides [S·Hq, 1, Hq, 1]), so a forward by one
//     engine and a backward by the other agree.
// Numerics: cuDNN's (fp32 accumulation, P and dS rounded to bf16 before their products, as the tensor-core path
// here); the edge-value rules of attention_cuda.h (masked Inf never multiplied by 0, NaN rows) are NOT promised.
//
// Plans: one cuDNN execution plan per (direction, B, S, Hq, Hkv, D, scale), built on first use (heuristics mode A,
// the first engine configuration that finalizes) and cached with its own device workspace. Not while a CUDA graph is
// being captured: an unplanned shape met during capture is refused (native kernels run).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "ops/attention/attention_cuda.h"

namespace hlm {

enum class AttentionEngine { kNative, kCudnn };

// The engine HLM_ATTENTION_ENGINE selects (read once; an unknown value is an error at first use).
AttentionEngine attention_engine();

// Whether cuDNN could be loaded (version >= 9.0); `why` gets the reason when not, or "cuDNN <version> (<path>)".
bool attention_cudnn_available(std::string* why = nullptr);

// out, lse OVERWRITTEN as attention_forward_cuda. Returns false (nothing written) when cuDNN is unavailable or refuses
// the call; `why` says why.
bool attention_cudnn_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, const AttentionCudaParams& p, cudaStream_t stream,
                             std::string* why = nullptr);

// dq, dk, dv OVERWRITTEN as attention_backward_cuda (lse in the layout above). Returns false (nothing written) when
// cuDNN is unavailable or refuses the call.
bool attention_cudnn_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* d_out,
                              const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                              const __nv_bfloat16* out, const float* lse, const AttentionCudaParams& p,
                              cudaStream_t stream, std::string* why = nullptr);

}  // namespace hlm
