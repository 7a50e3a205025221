// The Lightning Attention-2 token mixer on CUDA (bailing_moe_linear, Ring-mini-linear-2.0): the forward of
// layers/lightning_layer.h (dataflow there), fp32, over packed sequences, optionally continuing from and advancing a
// per-sequence state (the inference engine's):
//   q, k, v, gate = x · {query_key_value row blocks, g_proj}ᵀ  (four GEMMs, one launch at decode sizes)
//   q = rope(rmsnorm(q)·q_norm), k = rope(rmsnorm(k)·k_norm)  per head over D (ops/rmsnorm, ops/rope: the model's
//                                                           partial RoPE table at the batch's positions)
//   o = simple GLA(q, k, v, g) with the layer's decay g [Hq]  (ops/simple_gla: the chunked kernels, or the token
//                                                           recurrence when every sequence brings one token, a decode
//                                                           step; the state in place)
//   out = dense(group_rmsnorm(o)·g_norm ⊙ sigmoid(gate))    (lightning_group_norm_gate_cuda)
// x, out [T, hidden] device pointers (out may not alias x); scratch from ctx's allocator, released on return. Queued on
// ctx's stream, no synchronization (a decode step is capturable).
// bf16 compute mode: the four input projections and dense run on bf16 tensor cores like every CudaLinear (x rounded
// once for the four); norms, RoPE, the scan and the gate stay fp32.
// Non-goals: a backward (training a bailing model on CUDA is refused), biases and linear_silu (refused by the config).
#pragma once
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/cuda/cuda_token_batch.h"
#include "layers/lightning_layer.h"
#include "ops/rope/rope_cuda.h"

namespace hlm {

struct CudaLightningWeights {
  CudaLinear q_proj, k_proj, v_proj;  // row blocks of attention.query_key_value: [Hq·D, hidden] each
  CudaLinear g_proj;                  // attention.g_proj [Hq·D, hidden]
  CudaLinear dense;                   // attention.dense [hidden, Hq·D]
  CudaTensor q_norm, k_norm;          // [D]
  CudaTensor g_norm;                  // [Hq·D]
  CudaTensor decay;                   // [Hq]: the layer's log-decay (LightningDims::decay)
};

// Checks the host weights against dims (input errors naming the tensor) and uploads them (query_key_value cut into
// its three row blocks) with the layer's decay.
CudaLightningWeights cuda_upload_lightning(CudaContext& ctx, const LightningWeights& w, const LightningDims& dims);

// state: [N_seq, Hq, D, D] fp32 in batch order, advanced in place; nullptr: a fresh sequence whose state is dropped.
// rope: nullptr = no rotation.
void lightning_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaLightningWeights& w,
                                  const LightningDims& dims, const RopeCudaTable* rope, const CudaBatchView& batch,
                                  float* state = nullptr);

}  // namespace hlm
