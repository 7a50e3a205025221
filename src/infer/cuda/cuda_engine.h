// The CUDA inference engine: inference_engine.h on the GPU, for every architecture CudaModel runs (qwen3, granite,
// olmo_hybrid, qwen3_hybrid). The weights are a CudaModel's (uploaded once); a step runs CudaModel's decoder
// (final_hidden_with_mixer: embedding, norms, MLPs, residuals, multipliers) with stateful token mixers:
//   full attention: q, k, v projections, q/k norms, RoPE at the tokens' absolute positions, the new k/v rows written
//     into the layer's paged KV pool, attention of the new queries over the cache (ops/attention/attention_cache_cuda.h:
//     the chunk kernel for prefill chunks, flash decoding when every sequence brings one token), o_proj;
//   GDN: the six projections, causal convs from and into the sequences' conv state, L2 norms, gate, the gated delta
//     rule from h0 into hT (prefill chunks) or the one-token decode kernel on the state in place, gated RMSNorm,
//     o_proj;
//   Mamba-2 (granitemoehybrid): layers/cuda/mamba2_layer_cuda.h from and into the sequences' conv state [slots, Cd, K−1]
//     and SSM state [slots, nh, P, N] (fp32): the chunked SSD scan in prefill chunks, the recurrence in decode steps.
// Then the LM head runs only on each sequence's last new token. State on the device, laid out by the MemoryPlan: per
// attention layer K and V pools [num_blocks, block_size, Hkv, D] in the plan's KV element type (fp32, or bf16 when
// plan.kv_element_bytes == 2; block ids shared by all layers, kept by a host KvBlockAllocator), per GDN layer conv
// states [slots, C, K−1] and recurrent states [slots, Hv, dv, dk], always fp32.
// A step whose slots are consecutive (slot0, slot0+1, ...) works on the pools in place; other slot orders gather the
// GDN rows into batch order and scatter them back (ops/state_rows/state_rows_cuda.h).
// Host↔device traffic per step: one upload of the step's metadata (ids, positions, cu_seqlens, cache slots, block
// tables, context lengths, last-token rows) and one download of the logits [N, V] (which waits for the step).
// Precision: the model's compute mode and the plan's KV element type.
//   fp32: fp32 weights, cuBLASLt fp32 GEMMs, fp32 KV cache, scalar fp32 attention kernels (docs/cuda.md numerics).
//   bf16 (a CudaModel after drop_fp32_weights() or set_bf16_compute(true), and a plan with kv_element_bytes 2): every
//     projection and the LM head on bf16 tensor cores with fp32 accumulation (layers/cuda/cuda_linear.h; a mixer's
//     input is rounded once for all its projections), the KV cache in bf16 (k/v rounded as they are written, widened
//     to fp32 as they are read); a first prefill chunk (nothing cached yet for any sequence of the step) runs the
//     training forward's tensor-core flash attention on the chunk's bf16 q/k/v; later prefill chunks run the
//     tensor-core paged chunk kernel (attention_cache_forward_tc_cuda; head dims 64 and 128, else the scalar one)
//     over the bf16 cache; decode runs flash decoding over it (fp32 compute). Norms, RoPE, the
//     causal convs, the gate, the gated delta rule and the GDN conv/recurrent state stay fp32 (gdn.md).
// CUDA graphs (CudaEngineOptions::cuda_graphs, on by default; `--cuda-graphs on|off`, env HLM_CUDA_GRAPHS=off):
// a decode step (one new token per sequence) is captured once per shape — (batch size, first slot when the slots are
// consecutive, block-table row length, longest context rounded up to a multiple of 256 tokens, rope table) — and
// replayed with one launch: its metadata goes into the graph's own device buffer before each replay, its scratch and
// logits live in the graph's private allocator pool (backend/cuda/cuda_graph.h), the KV and GDN pools are the
// engine's. The first step of a shape runs eagerly, the second captures; a failed capture leaves that shape eager
// (a note on stderr). At most 8 graphs are kept (least recently used evicted). Decode steps use the bucketed longest
// context and block-table rows whether or not a graph runs them, so replays equal eager steps bit for bit
// (tests/cuda_models/test_cuda_engine_graphs.cpp). Prefill chunks always run eagerly.
// The CudaModel must outlive the engine; one step at a time.
#pragma once
#include <memory>
#include <string>

#include "infer/inference_engine.h"
#include "models/cuda/cuda_model.h"

namespace hlm {

struct CudaEngineOptions {
  bool cuda_graphs = true;  // decode steps as CUDA graphs (above)
  // Each attention layer's q/k norms, RoPE and KV-cache write as one launch (ops/qk_norm_rope/qk_norm_rope_cuda.h,
  // bit-identical to the five separate launches); false: the five launches. On by default since the launch spreads
  // over one block per KV group (per-head norms): qwen3_4b's batch-1 decode step 3.86 → 3.80 ms, with the GEMVs'
  // dependent launch 3.72 → 3.64 ms (H200, session 13, call 1; one block per token had made it slower, 3.96 vs 3.85).
  bool fused_qk_norm_rope = true;
  // A GDN layer's decode step prepared in one launch (ops/gdn_decode_prep/gdn_decode_prep_cuda.h: the q/k/v convs,
  // the q/k l2norms and the gate, bit-identical to the six separate launches) when every sequence brings one token;
  // false: the six launches (A/B in one binary).
  bool fused_gdn_decode_prep = true;
  // bf16 precision, one row (batch-1 decode): the LM head by the small-row GEMV (ops/matmul/gemv_cuda.h: x rounded in
  // the kernel, no cast launch) instead of cuBLASLt's pick; the logits then differ from cuBLASLt's in fp32 rounding
  // (another summation order). false: cuBLASLt at every row count.
  bool head_gemv = true;
  // Decode steps: each attention layer's q/k norms, RoPE and KV-cache write folded into the decode attention kernel
  // where it takes them (attention_cache_decode_prep_cuda: one launch fewer per layer, bit-identical to the q/k launch
  // + the kernel): the warp kernel (HLM_DECODE_KERNEL=warps) with per-head norms or none, the tiled kernel (the
  // default) with per-head or whole-row norms (OLMo's) or none while HLM_DECODE_TILED_QK_FOLD is on (the default
  // since session 45: attention_cache_cuda_tiled_qk_fold; H100, batch 1 at L 1024: olmo3_7b 5.72 -> 5.62 ms per step,
  // qwen3_4b 3.80 -> 3.82, olmo_hybrid_7b 5.84 -> 5.88; at batch 32 or L 8192 all three gain or hold; H200: olmo3_7b
  // 4.40 -> 4.30, 1.26x its weight-read limit, olmo_hybrid_7b 4.45 -> 4.46, qwen3_4b 3.12 -> 3.13). H200, session 31,
  // batch 1 at L 1024 with the warp kernel: qwen3_4b 3.41 -> 3.22 ms per step (tiled, unfolded: 3.32), olmo3_7b
  // 4.80 -> 4.77, olmo_hybrid_7b 4.76 -> 4.75 (OLMo's whole-projection q/k norms kept the q/k launch there; tiled:
  // 4.66 / 4.71).
  bool fold_qk_into_decode_attention = true;
  // A batch-1 decode step of a model the fused decode kernel runs (ops/fused_decode/fused_decode_cuda.h: pre-norm
  // full-attention layers with dense SwiGLU MLPs, bf16 weights and a bf16 KV cache, an sm_90 device) as ONE
  // persistent launch for the whole decoder (plus the embedding, the final norm and the LM head) instead of ~10
  // launches per layer; other steps and models take the eager path. Not bit-identical to it (the kernel's sums run
  // in another order; tests/cuda_models/test_cuda_engine_fused_decode.cpp states the bound). Off by default until
  // it measures faster than the eager decode (docs/benchmarks.md).
  bool fused_decode = false;
  // Profiling: when set, every fused decode step writes its kernel's per-block phase timestamps to this CSV file
  // (overwritten: the last step stays; columns layer, block, then FusedDecodeStep::timeline's marks in ns from the
  // step's first mark). Env HLM_FUSED_DECODE_TIMELINE=FILE.
  std::string fused_decode_timeline;
};

// The defaults, with HLM_CUDA_GRAPHS=0|off in the environment turning graphs off, HLM_QK_FUSE=0|off the fused
// q/k norm + RoPE + cache write off (1|on: on, the default), HLM_GDN_DECODE_FUSE=0|off the fused GDN decode
// preparation off (1|on: on, the default), HLM_HEAD_GEMV=0|off the batch-1 LM head GEMV off (1|on: on, the default),
// HLM_DECODE_QK_FOLD=0|off the q/k preparation not folded into the warp decode attention kernel (1|on: folded, the
// default),
// HLM_FUSED_DECODE=1|on the fused batch-1 decode on (0|off: off, the default) and HLM_FUSED_DECODE_TIMELINE=FILE its
// profiling timeline on. Any other value of a switch is an input error (core/env_switch.h).
CudaEngineOptions cuda_engine_default_options();

std::unique_ptr<InferenceEngine> make_cuda_engine(CudaModel& model, const MemoryPlan& plan,
                                                  const CudaEngineOptions& options = cuda_engine_default_options());

// What the engine's decode graphs did so far (all zero for an engine that is not a CUDA engine).
struct CudaEngineGraphStats {
  int64_t captures = 0;   // graphs captured (one per decode shape seen twice)
  int64_t replays = 0;    // decode steps run as a graph replay
  int64_t failures = 0;   // captures that failed (those shapes run eagerly)
  int64_t eager_decode_steps = 0;
  int64_t fused_decode_steps = 0;  // batch-1 decode steps run by the fused decode kernel (eager or in a graph)
  // Attention layers queued with the q/k preparation folded into the decode kernel (fold_qk_into_decode_attention;
  // host calls: eager steps and graph captures, not replays).
  int64_t qk_folded_launches = 0;
  // Why the fused decode is off for this engine ("" when it is on).
  std::string fused_decode_refusal;
};
CudaEngineGraphStats cuda_engine_graph_stats(const InferenceEngine& engine);

}  // namespace hlm
