// Training on the GPU, the device twin of models/model_train.h (Recompute::Layer only): what forward_train keeps and
// the helpers a trainer needs around CudaModel::backward.
//
// Kept (device, [T, hidden] each): the residual stream entering each layer, after each mixer add, entering the final
// norm and after it (2·L + 2 tensors), plus the uploaded batch. The layer backwards recompute everything inside a
// layer from its input (one extra forward of compute), as the CPU's default mode.
// Numerics: the CUDA ops' (docs/cuda.md), so gradients differ from the CPU's by summation order only (cuBLASLt vs
// OpenBLAS, fp32 block sums vs double, flash attention, fp32 gated-delta state); expect ~1e-6..1e-5 relative.
// Deterministic: no float atomics anywhere (embedding backward by sorted ownership), so reruns give the same bits.
#pragma once
#include <vector>

#include "layers/cuda/cuda_token_batch.h"
#include "models/cuda/cuda_model.h"

namespace hlm {

struct CudaTrainTrace {
  CudaTokenBatch batch;              // the batch the forward ran on (the backward reuses it)
  std::vector<CudaTensor> layer_in;  // [L] residual stream entering layer i (attn_in)
  std::vector<CudaTensor> mixer_out; // [L] residual stream after layer i's mixer add (attn_out)
  CudaTensor final_stream;           // [T, hidden] residual stream entering the final norm
  CudaTensor final_hidden;           // [T, hidden] output of the final norm (input of the LM head)
};

}  // namespace hlm
