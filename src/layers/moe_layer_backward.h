// Backward of the routed-expert FFN (layers/moe_layer.h), CPU reference. Recomputes the forward's routing and each
// chosen expert's output, then, with w_tj the weight of token t's j-th expert e_j and y_tj = expert_{e_j}(x_t):
//   d y_tj = w_tj · d_out_t  -> each expert's SwiGLU backward (parameter grads +=, dx_t +=)
//   g_tj = d_out_t · y_tj                                   (d loss / d w_tj)
//   d p_i = g_i                          for chosen i, without norm_topk_prob
//   d p_i = (g_i − Σ_j g_j w_j) / Σ_S p  for chosen i, with it (w = p / Σ_S p);   0 for experts not chosen
//   d logit_e = p_e (d p_e − Σ_i p_i d p_i)   (softmax)
//   d router += d logitᵀ x;  dx += d logit · router
// The top-k choice itself has no gradient (as in PyTorch's topk). dx is OVERWRITTEN; parameter grads are ADDED.
// Shared expert (when w has one), with s = σ(x·w_sgᵀ) and y_s = shared_expert(x):
//   d y_s = s · d_out -> the shared SwiGLU backward;  d (x·w_sgᵀ) = (d_out · y_s) · s · (1 − s);  d w_sg += that ⊗ x
#pragma once
#include <vector>

#include "core/arena.h"
#include "layers/moe_layer.h"

namespace hlm {

// Gradients shaped like the MoeWeights they belong to (router.weight [E, hidden], experts[e] like MlpWeights).
struct MoeGrads : MoeWeights {};

MoeGrads moe_grads_like(const MoeWeights& w);

void moe_layer_backward(float* dx, MoeGrads& grads, const float* d_out, const float* x, const MoeWeights& w,
                        const MoeDims& d, int64_t T, Arena& arena);

}  // namespace hlm
