// Routed experts on CUDA: the forward of layers/moe_layer.h (Qwen3-MoE; with the gated shared expert of
// Qwen3.5-MoE / Qwen3-Next), x [T, hidden] -> out [T, hidden] device fp32 (out may not alias x), queued on ctx's
// stream with NO host synchronization (so it can sit in a captured decode graph). Not a loop over experts:
//   logits = x · routerᵀ (fp32 cuBLASLt) -> route (softmax, top-k, renormalise) -> dispatch (picks sorted by expert,
//   stable) -> gather x rows -> ONE grouped GEMM for every expert's [gate | up] -> SwiGLU -> ONE grouped GEMM for
//   every expert's down -> weighted combine in the CPU's order (+ σ(x·w_sgᵀ) · shared_expert(x)).
// Ops: ops/moe_dispatch (moe_dispatch_cuda.h, moe_grouped_gemm_cuda.h).
// Weights: each expert's gate_proj and up_proj stacked into one linear [E·2F, hidden] (expert e's rows e·2F..: gate
// then up) and the down_projs into [E·hidden, F], held as CudaLinears so the model's bf16 compute mode and
// drop_fp32_weights treat them like any linear (the bf16 copy is what the bf16 grouped GEMM reads).
// Numerics: fp32 mode: fp32 GEMMs (summation order differs from the CPU's OpenBLAS: ~1e-6 relative). bf16 compute
// mode: x rows and h rounded to bf16, tensor cores, fp32 accumulation. The ROUTER STAYS fp32 in both modes (its
// weight is not among the model's linears): a top-k pick flipped by bf16 rounding would move a token's output by a
// whole expert, far outside any bf16 bound, while the router is E·hidden of the FLOPs.
// bailing (MoeDims::sigmoid_grouped, Ring-mini-linear-2.0): the sigmoid group-limited router with expert_bias and
// routed_scaling (moe_route_sigmoid_grouped_cuda) instead of the softmax one, and the UNGATED shared expert
// (MoeWeights::has_ungated_shared_expert) added in the combine without a gate (out += shared_expert(x)).
// Backward: none on CUDA yet (training an MoE model on CUDA is refused by the model).
#pragma once
#include "backend/cuda/cuda_context.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/cuda/mlp_layer_cuda.h"
#include "layers/moe_layer.h"

namespace hlm {

struct CudaMoeWeights {
  MoeDims dims;
  int64_t hidden = 0, width = 0;  // H, F (each expert's SwiGLU width)
  CudaTensor router;              // [E, H] fp32 in every mode
  CudaLinear gate_up;             // [E·2F, H]
  CudaLinear down;                // [E·H, F]
  CudaTensor expert_bias;         // [E] fp32; sigmoid_grouped routing only
  bool has_shared = false;        // a shared expert (gated or not)
  bool shared_gated = false;      // Qwen3.5-MoE / Qwen3-Next: σ(x·shared_gateᵀ) scales it; bailing: no gate
  CudaMlpWeights shared_expert;   // has_shared only
  CudaTensor shared_gate;         // [1, H] fp32; has_shared && shared_gated only
};

// Checks the host shapes (router [E, H]; E experts of gate/up [F, H], down [H, F]; a shared expert with its gate
// [1, H], or ungated, or none; expert_bias [E] for sigmoid_grouped routing) and uploads them, stacking the experts.
CudaMoeWeights cuda_upload_moe(CudaContext& ctx, const MoeWeights& w, const MoeDims& dims);

void moe_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaMoeWeights& w, int64_t tokens);

}  // namespace hlm
