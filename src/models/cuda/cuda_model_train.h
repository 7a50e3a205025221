// Training on the GPU, the device twin of models/model_train.h: what forward_train keeps and the helpers a trainer
// needs around CudaModel::backward.
//
// Kept always (device, [T, hidden] each): the residual stream entering each layer, after each mixer add, entering the
// final norm and after it (2·L + 2 tensors), plus the uploaded batch. Then one of two modes (Recompute):
//   Layer (default): the layer backwards recompute everything inside a layer from its input (one extra forward of
//     compute), as the CPU's default mode;
//   None: forward_train also keeps each layer's intermediates (CudaKeptLayer below) and backward reads them instead
//     of recomputing: activation memory grows to O(L·T·(hidden + F + projections)), compute drops by a forward.
// Gradients are BIT-IDENTICAL between the two modes, in fp32 and in the bf16 compute mode: every kernel here is
// deterministic (no float atomics; cuBLASLt's algorithm depends only on shapes and the 256-byte alignment of whole
// tensors), the kept tensors come from the same functions on the same inputs as the recompute, and the backward runs
// the same operations in the same order, minus the recompute (tests/cuda_models/test_cuda_kept_activations.cpp).
// Numerics: the CUDA ops' (docs/cuda.md), so gradients differ from the CPU's by summation order only (cuBLASLt vs
// OpenBLAS, fp32 block sums vs double, flash attention, fp32 gated-delta state); expect ~1e-6..1e-5 relative.
// Deterministic: no float atomics anywhere (embedding backward by sorted ownership), so reruns give the same bits.
#pragma once
#include <vector>

#include "layers/cuda/attention_layer_cuda.h"
#include "layers/cuda/cuda_token_batch.h"
#include "layers/cuda/gdn_layer_cuda.h"
#include "layers/cuda/mlp_layer_cuda.h"
#include "models/cuda/cuda_model.h"
#include "models/model_train.h"

namespace hlm {

// One layer's intermediates under Recompute::None: exactly what CudaModel::backward would otherwise recompute, each
// in the dtype its readers need (fp32 unless only bf16 GEMMs read it, in the bf16 compute mode).
// Which fields a layer fills depends on its block (models/cuda/cuda_model_train.cpp's block formulas):
//   field          pre-norm block                              post-norm block (attention in post-norm archs)
//   mixer_in       rmsnorm(in)·input_layernorm [T, hidden]     empty (the mixer reads the stream itself)
//                  (fp32 mode; in the bf16 mode mixer_in16, its bf16 rounding: only the input projections read it)
//   mixer_branch   empty                                       mixer output before post_attention_layernorm
//   mlp_in         rmsnorm(mid)·post_attention_layernorm       empty (the MLP reads the stream itself)
//                  (fp32 mode; in the bf16 mode mlp_in16, likewise)
//   mlp_branch     empty                                       MLP output before post_feedforward_layernorm
//   attention|gdn  the mixer's activations (layers/cuda/*_layer_cuda.h), the one of the layer's kind; the other empty
//   mlp            the MLP's gate, up [T, F] fp32 and h [T, F] (fp32, or bf16 in the bf16 mode); gate, up in bf16
//                  instead in the bf16 gate/up form (layers/mlp_bf16_gate_up.h)
// The rounded inputs hold the very bits the layer forwards would have rounded, so gradients stay bit-identical to
// the recomputing mode.
struct CudaKeptLayer {
  CudaTensor mixer_in, mixer_branch, mlp_in, mlp_branch;
  CudaTensor mixer_in16, mlp_in16;  // bf16 compute mode, pre-norm blocks: the branch inputs rounded to bf16
  AttentionCudaActivations attention;
  GdnCudaActivations gdn;
  MlpCudaActivations mlp;
  size_t bytes() const;  // device bytes of every allocated tensor above
};

struct CudaTrainTrace {
  CudaTokenBatch batch;              // the batch the forward ran on (the backward reuses it)
  std::vector<CudaTensor> layer_in;  // [L] residual stream entering layer i (attn_in)
  std::vector<CudaTensor> mixer_out; // [L] residual stream after layer i's mixer add (attn_out)
  CudaTensor final_stream;           // [T, hidden] residual stream entering the final norm
  CudaTensor final_hidden;           // [T, hidden] output of the final norm (input of the LM head)
  std::vector<CudaKeptLayer> kept;   // [L] under Recompute::None; empty under Recompute::Layer
  // Device bytes of the activations above (streams and kept layers; not the batch): the trainer's memory plan.
  size_t kept_bytes() const;
};

// Reads the forward kernels' error flag of `device_batch` (uploaded from `batch`; waits for the stream) and turns a set
// flag into the CPU forward's input error (the bad token id named when there is one).
void cuda_check_batch_flag(CudaContext& ctx, const CudaTokenBatch& device_batch, const TokenBatch& batch,
                           int64_t vocab_size);

}  // namespace hlm
