// The Mamba-2 token mixer on CUDA (Granite-4.0-H): the forward of layers/mamba2_layer.h (dataflow there), fp32, over
// packed sequences, optionally continuing from and advancing a per-sequence state (the inference engine's):
//   z, xBC, dt = x·in_projᵀ (three GEMMs over the row blocks of mamba.in_proj, one launch at decode sizes)
//   xBC = silu(causal depthwise conv(xBC) + conv_bias)     (ops/causal_conv1d without its SiLU, then
//                                                           mamba2_conv_bias_silu_cuda)
//   y = SSD scan(x, dt, ...) reading x, B, C in place in xBC (row stride Im + 2GN): the chunked kernels, or the token
//       recurrence when every sequence brings one token (a decode step), as the CPU layer chooses
//   out = out_proj(rmsnorm(y ⊙ silu(z)) · norm)             (mamba2_gate_silu_cuda, then ops/rmsnorm over Im)
// x, out [T, hidden] device pointers (out may not alias x); scratch from ctx's allocator, released on return. Queued
// on ctx's stream, no synchronization (a decode step is capturable).
// bf16 compute mode: the three input projections and out_proj run on bf16 tensor cores like every CudaLinear (x
// rounded once for the three); the conv, scan, gate and norm stay fp32. Non-goals: a backward (training a Mamba-2
// model on CUDA is refused), in_proj / out_proj biases (refused by the config).
#pragma once
#include "backend/cuda/cuda_context.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/cuda/cuda_token_batch.h"
#include "layers/mamba2_layer.h"

namespace hlm {

struct CudaMamba2Weights {
  CudaLinear in_z, in_xbc, in_dt;  // row blocks of mamba.in_proj: z [Im, H], xBC [Cd, H], dt [nh, H]
  CudaTensor conv;                 // [Cd, K]
  CudaTensor conv_bias;            // [Cd], empty when the config has no conv bias
  CudaTensor dt_bias, A_log, D;    // [nh]
  CudaTensor norm;                 // [Im]
  CudaLinear out_proj;             // [hidden, Im]
};

// Checks the host weights against dims (input errors naming the tensor) and uploads them (in_proj cut into its
// three row blocks).
CudaMamba2Weights cuda_upload_mamba2(CudaContext& ctx, const Mamba2Weights& w, const Mamba2Dims& dims);

// Per-sequence state in batch order, advanced in place (both nullptr: a fresh sequence whose final state is dropped).
//   conv [N_seq, Cd, K−1] (ops/causal_conv1d's layout), ssm [N_seq, nh, P, N]; fp32.
struct CudaMamba2State {
  float* conv = nullptr;
  float* ssm = nullptr;
};

void mamba2_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaMamba2Weights& w,
                               const Mamba2Dims& dims, const CudaBatchView& batch, const CudaMamba2State& state = {});

}  // namespace hlm
