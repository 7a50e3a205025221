// The CUDA inference engine: inference_engine.h on the GPU, for every architecture CudaModel runs (qwen3, granite,
// olmo_hybrid, qwen3_hybrid). The weights are a CudaModel's (uploaded once); a step runs CudaModel's decoder
// (final_hidden_with_mixer: embedding, norms, MLPs, residuals, multipliers) with stateful token mixers:
//   full attention: q, k, v projections, q/k norms, RoPE at the tokens' absolute positions, the new k/v rows written
//     into the layer's paged KV pool, attention of the new queries over the cache (ops/attention/attention_cache_cuda.h:
//     the chunk kernel for prefill chunks, flash decoding when every sequence brings one token), o_proj;
//   GDN: the six projections, causal convs from and into the sequences' conv state, L2 norms, gate, the gated delta
//     rule from h0 into hT (prefill chunks) or the one-token decode kernel on the state in place, gated RMSNorm,
//     o_proj.
// Then the LM head runs only on each sequence's last new token. State, all fp32 on the device, laid out by the
// MemoryPlan: per attention layer K and V pools [num_blocks, block_size, Hkv, D] (block ids shared by all layers,
// kept by a host KvBlockAllocator), per GDN layer conv states [slots, C, K−1] and recurrent states [slots, Hv, dv, dk].
// A step whose slots are consecutive (slot0, slot0+1, ...) works on the pools in place; other slot orders gather the
// GDN rows into batch order and scatter them back (ops/state_rows/state_rows_cuda.h).
// Host↔device traffic per step: one upload of the step's metadata (ids, positions, cu_seqlens, cache slots, block
// tables, context lengths, last-token rows) and one download of the logits [N, V] (which waits for the step).
// Numerics: the CUDA ops' (docs/cuda.md); fp32 compute mode only (a CudaModel in the bf16 compute mode is refused).
// The CudaModel must outlive the engine; one step at a time.
#pragma once
#include <memory>

#include "infer/inference_engine.h"
#include "models/cuda/cuda_model.h"

namespace hlm {

std::unique_ptr<InferenceEngine> make_cuda_engine(CudaModel& model, const MemoryPlan& plan);

}  // namespace hlm
