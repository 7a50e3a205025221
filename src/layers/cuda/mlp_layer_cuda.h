// The SwiGLU MLP on CUDA: the forward of layers/mlp_layer.h, out = down_proj(silu(gate_proj(x)) ⊙ up_proj(x)), fp32.
// x, out [T, hidden] device pointers (out may not alias x); scratch gate, up [T, F] from ctx's allocator, released on
// return. Queued on ctx's stream, no synchronization.
#pragma once
#include "backend/cuda/cuda_context.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/mlp_layer.h"

namespace hlm {

struct CudaMlpWeights {
  CudaLinear gate_proj, up_proj, down_proj;
};

// Checks the host shapes (gate/up [F, hidden], down [hidden, F]) and uploads them.
CudaMlpWeights cuda_upload_mlp(CudaContext& ctx, const MlpWeights& w);

void mlp_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaMlpWeights& w, int64_t tokens);

// The backward of layers/mlp_layer.h with per-layer recomputation (mlp_layer_cuda_backward.cpp): recomputes gate, up
// and h = silu(gate) ⊙ up from x, then dx [T, hidden] OVERWRITTEN and grads (same layout as w, device) ACCUMULATED
// (+=), in the CPU's order. dx may not alias d_out or x.
void mlp_layer_backward_cuda(CudaContext& ctx, float* dx, CudaMlpWeights& grads, const float* d_out, const float* x,
                             const CudaMlpWeights& w, int64_t tokens);

}  // namespace hlm
