// Routed experts (mixture of experts), the FFN of Qwen3-MoE layers (HF Qwen3MoeSparseMoeBlock). CPU reference,
// forward. x [T, hidden] (already normalised) -> out [T, hidden]; E experts, each a SwiGLU MLP of width F.
//   p = softmax(x · routerᵀ) over all E experts (per token);  S = the k largest p (ties: the lower expert index)
//   w_j = p_j, or p_j / Σ_S p when norm_topk_prob;           out = Σ_{j ∈ S} w_j · expert_j(x)
// The sum runs over experts in increasing index, each token's terms added to a zeroed output in that order (HF
// loops over the hit experts and index_adds). No expert bias. Optional shared expert (Qwen3.5-MoE, Qwen3-Next;
// HF Qwen3_5MoeSparseMoeBlock), added after the routed sum:
//   out += sigmoid(x · shared_expert_gateᵀ) · shared_expert(x)      (a scalar gate per token)
// Its backward (router and experts) is layers/moe_layer_backward.h; this forward keeps no activations for it.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "layers/linear.h"
#include "layers/mlp_layer.h"

namespace hlm {

struct MoeDims {
  int64_t experts = 0;  // E
  int64_t top_k = 0;    // k
  bool norm_topk_prob = false;
};

struct MoeWeights {
  Linear router;                    // mlp.gate: weight [E, hidden], no bias
  std::vector<MlpWeights> experts;  // [E]: mlp.experts.{e}.{gate,up,down}_proj, no biases
  MlpWeights shared_expert;         // mlp.shared_expert.{gate,up,down}_proj, or undefined (no shared expert)
  Linear shared_expert_gate;        // mlp.shared_expert_gate: weight [1, hidden], no bias; defined iff shared_expert
  bool has_shared_expert() const { return shared_expert_gate.weight.defined(); }
};

// One token's routing: the k chosen experts (in descending probability) and their weights.
struct MoeRoute {
  std::vector<int32_t> expert;  // [T, k]
  std::vector<float> weight;    // [T, k]
};

// One token's choice from its router distribution p [E]: expert[0..k) (descending p, ties: lower index) and their
// weights (p, or p renormalised over the k when norm_topk_prob).
void moe_select(const float* p, const MoeDims& d, int32_t* expert, float* weight);

// Routing of T tokens from router logits [T, E] (softmax, top-k, optional renormalisation). probs (optional, [T, E])
// receives the full softmax: the router distribution (routing divergence analyses read it).
MoeRoute moe_route(const float* logits, const MoeDims& d, int64_t T, float* probs = nullptr);

// router_probs (optional, [T, E]): the full router softmax of every token.
void moe_layer_forward(float* out, const float* x, const MoeWeights& w, const MoeDims& d, int64_t T, Arena& arena,
                       float* router_probs = nullptr);

}  // namespace hlm
