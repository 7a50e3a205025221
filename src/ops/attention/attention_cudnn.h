// Causal GQA attention through cuDNN's fused flash-attention engines (the "cudnn" attention engine): the contract of
// attention_cuda.h for bf16 storage, computed by cuDNN 9's runtime-fused SDPA kernels instead of ours. cuDNN is
// loaded at run time (dlopen of libcudnn.so.9; HLM_CUDNN_LIB=/path/to/libcudnn.so.9 names it), so a build or a machine
// without cuDNN keeps working: every entry point then answers "not available" and the caller runs the native kernels.
// On the GPU machine cuDNN sits in the PyTorch environment (site-packages/nvidia/cudnn/lib): put that folder on
// LD_LIBRARY_PATH or name the file with HLM_CUDNN_LIB.
//
// Which engine runs: HLM_ATTENTION_ENGINE=auto (default: cuDNN when it loads, else native) | native | cudnn. With
// cuDNN, attention_forward_cuda / attention_backward_cuda (bf16 overloads) try cuDNN first and fall back to the
// native kernels when cuDNN refuses the call (packed documents of unequal lengths, windows, ...); when the engine was
// asked for by name, the first refusal of each kind is printed once to stderr.
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
// Plans: one cuDNN execution plan per (direction, B, Sq, Skv, Hq, Hkv, D), built on first use and cached with its own
// device workspace. Which engine configuration (HLM_CUDNN_PLAN, attention_cudnn_plan_choice below): "first" (the
// default) keeps mode A's first configuration that finalizes (then the fallback list's), untimed; "timed" finalizes
// the configurations heuristics modes A and B and the fallback list name (deduplicated, at most 8), runs each on the
// call's shape (2 untimed + 5 timed runs, the call's inputs, scratch outputs), drops those whose outputs disagree with
// the first's (the screen: > 5 % of the largest value), and keeps the fastest, the first unless another is >= 2 %
// faster. Timing is for the training calls (attention_cudnn_forward / _backward); the inference context call (whose
// shapes vary per chunk) always takes the first. HLM_CUDNN_PLAN_VERBOSE=1 prints each build's candidates and times to
// stderr. Why "first" is the default: on the H200 (session 15, docs/benchmarks.md) it was the fastest candidate in
// both directions at the three [perf] shapes, timing cost 0.2-0.5 s more per shape, and one engine that finalizes
// computed wrong gradients (hence the screen). Which plan a shape gets under "timed" may differ between processes when
// two are within the timing's noise (not the same bits; every plan the screen keeps must pass the same bounds:
// AttentionCudnn.EveryPlanPassesTheReferences).
// A plan's workspace is cudaMalloc'ed outside the caching allocator, so not in its peaks (the backward's is
// 4·B·Hq·S·(D + 1) bytes plus cuDNN's own; while timing, each candidate's in turn plus scratch outputs of the call's
// size, freed before the call runs). Not while a
// CUDA graph is being captured: an unplanned shape met during capture is refused (native kernels run). A plan's
// workspace serves one call at a time: calls with one shape on several streams at once would share it (the trainer
// and the engine use one stream).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

#include "ops/attention/attention_cuda.h"

namespace hlm {

enum class AttentionEngine { kNative, kCudnn };

// The engine HLM_ATTENTION_ENGINE selects (read once; an unknown value is an error at first use), unless
// attention_set_engine chose one (tests and A/B benches: process-wide, not thread-safe against running work;
// attention_clear_engine_override goes back to the variable's choice).
AttentionEngine attention_engine();
void attention_set_engine(AttentionEngine engine);
void attention_clear_engine_override();
// True when the engine was named (the variable set to native or cudnn, or attention_set_engine), false under auto.
bool attention_engine_explicit();
// A cuDNN refusal said once per `once` on stderr ("<what>: cuDNN engine refused <call> (<why>); <fallback>"), and only
// when the engine was named: under auto a refusal is the expected case for what cuDNN does not take.
void attention_cudnn_note_refusal(std::once_flag& once, const char* what, const char* call, const std::string& why,
                                  const char* fallback);
// How many cuDNN executions have been queued in this process (tests check that a path really ran on cuDNN).
int64_t attention_cudnn_executions();

// How a new shape's plan is chosen (see "Plans" above): HLM_CUDNN_PLAN=first (default) | timed, read once (an unknown
// value is an error at first use), unless attention_cudnn_set_plan_choice chose. Changing the choice does not rebuild
// cached plans: attention_cudnn_reset_plans drops them.
enum class AttentionCudnnPlanChoice { kFirst, kTimed };
AttentionCudnnPlanChoice attention_cudnn_plan_choice();
// Tests and A/B benches (process-wide): `choice`, or with candidate >= 0 that candidate of the timed list (untimed; a
// training call whose shape has fewer candidates is refused with the count in `why`, not cached).
void attention_cudnn_set_plan_choice(AttentionCudnnPlanChoice choice, int candidate = -1);
void attention_cudnn_clear_plan_choice();
// Drops every cached plan and refusal (after cudaDeviceSynchronize; their workspaces are freed): the next call of each
// shape builds anew. Tests and benches only: a captured CUDA graph that ran a dropped plan must not be replayed.
void attention_cudnn_reset_plans();
// The cached plan of a training-contract shape: how many configurations finalized (and were considered), which one
// runs (its index in that list), whether it was chosen by timing, its name ("engine <global index> knobs <type=value,...>")
// and each candidate's median ms when timed (−1: it did not run; −2: the screen dropped it). False when no plan is
// cached for the shape.
struct AttentionCudnnPlanInfo {
  int candidates = 0, chosen = -1;
  bool timed = false;
  std::string engine;
  std::vector<double> ms;
};
bool attention_cudnn_plan_info(bool backward, const AttentionCudaParams& p, AttentionCudnnPlanInfo* info);

// Whether cuDNN could be loaded (version >= 9.0); `why` gets the reason when not, or "cuDNN <version> (<path>)".
bool attention_cudnn_available(std::string* why = nullptr);

// out, lse OVERWRITTEN as attention_forward_cuda. Returns false (nothing written) when cuDNN is unavailable or refuses
// the call; `why` says why.
bool attention_cudnn_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, const AttentionCudaParams& p, cudaStream_t stream,
                             std::string* why = nullptr);

// Inference: B sequences of `queries` new tokens each over `context` tokens each (the new tokens the last `queries`
// of the context: query i of a sequence sees keys 0 .. context − queries + i), keys and values contiguous.
struct AttentionCudnnContext {
  int64_t sequences = 0, queries = 0, context = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
};
// out [B·queries, Hq, D] bf16 OVERWRITTEN from q [B·queries, Hq, D] and k, v [B·context, Hkv, D] (token-major);
// lse [B·queries, Hq] fp32 scratch, overwritten. Returns false (nothing written) when cuDNN is unavailable or refuses.
bool attention_cudnn_forward_context(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                     const __nv_bfloat16* v, const AttentionCudnnContext& c, cudaStream_t stream,
                                     std::string* why = nullptr);
// k_out, v_out [sequences · context, Hkv, D] ← each sequence's first `context` tokens of a paged bf16 cache
// [num_blocks, block_size, Hkv, D] through its row of `tables` [sequences, max_blocks] (attention_cache.h's layout).
// Rows of Hkv·D bf16 values must be a multiple of 16 bytes; the caller has checked the tables.
void attention_cudnn_gather_cache(__nv_bfloat16* k_out, __nv_bfloat16* v_out, const __nv_bfloat16* k_cache,
                                  const __nv_bfloat16* v_cache, const int32_t* tables, int64_t max_blocks,
                                  int64_t block_size, int64_t sequences, int64_t context, int64_t kv_heads,
                                  int64_t head_dim, cudaStream_t stream);

// dq, dk, dv OVERWRITTEN as attention_backward_cuda (lse in the layout above). Returns false (nothing written) when
// cuDNN is unavailable or refuses the call.
bool attention_cudnn_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* d_out,
                              const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                              const __nv_bfloat16* out, const float* lse, const AttentionCudaParams& p,
                              cudaStream_t stream, std::string* why = nullptr);

}  // namespace hlm
