// Routed experts (mixture of experts), the FFN of Qwen3-MoE layers (HF Qwen3MoeSparseMoeBlock). CPU reference,
// forward. x [T, hidden] (already normalised) -> out [T, hidden]; E experts, each a SwiGLU MLP of width F.
//   p = softmax(x · routerᵀ) over all E experts (per token);  S = the k largest p (ties: the lower expert index)
//   w_j = p_j, or p_j / Σ_S p when norm_topk_prob;           out = Σ_{j ∈ S} w_j · expert_j(x)
// The sum runs over experts in increasing index, each token's terms added to a zeroed output in that order (HF
// loops over the hit experts and index_adds). No expert bias. Optional shared expert (Qwen3.5-MoE, Qwen3-Next;
// HF Qwen3_5MoeSparseMoeBlock), added after the routed sum:
//   out += sigmoid(x · shared_expert_gateᵀ) · shared_expert(x)      (a scalar gate per token)
// The bailing models (Ring-mini-linear-2.0; MoeDims::sigmoid_grouped) route otherwise (families.md §6 "MoE"):
//   σ = sigmoid(x · routerᵀ) (fp32); b = σ + expert_bias (selection only); group score = the sum of the two largest b
//   of each of n_group equal groups; the topk_group best groups are kept (ties: lower index), the others' b = −inf;
//   S = the k largest b (ties: lower index); w_j = σ_j, or σ_j / (Σ_S σ + 1e−20) when norm_topk_prob; w_j ·= scale
// and add an UNGATED shared expert (mlp.shared_experts.*: shared_expert defined, shared_expert_gate not):
//   out += shared_expert(x)
// Its backward (router and experts) is layers/moe_layer_backward.h (softmax routing only); this forward keeps no
// activations for it.
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
  // bailing: sigmoid scores, expert_bias, group-limited top-k, routed_scaling (see above).
  bool sigmoid_grouped = false;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  float routed_scaling = 1.0f;
};

struct MoeWeights {
  Linear router;                    // mlp.gate: weight [E, hidden], no bias
  std::vector<MlpWeights> experts;  // [E]: mlp.experts.{e}.{gate,up,down}_proj, no biases
  MlpWeights shared_expert;         // mlp.shared_expert.{gate,up,down}_proj, or undefined (no shared expert)
  Linear shared_expert_gate;        // mlp.shared_expert_gate: weight [1, hidden], no bias; defined iff shared_expert
  Tensor expert_bias;                // mlp.gate.expert_bias [E] (bailing: selection bias), or undefined
  bool has_shared_expert() const { return shared_expert_gate.weight.defined(); }  // the gated one (Qwen3.5)
  // bailing's shared expert: added without a gate.
  bool has_ungated_shared_expert() const {
    return !shared_expert_gate.weight.defined() && shared_expert.down_proj.weight.defined();
  }
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

// bailing routing of T tokens from router logits [T, E] and expert_bias [E] (MoeDims::sigmoid_grouped). scores
// (optional, [T, E]) receives σ.
MoeRoute moe_route_sigmoid_grouped(const float* logits, const float* expert_bias, const MoeDims& d, int64_t T,
                                   float* scores = nullptr);

// router_probs (optional, [T, E]): the full router softmax of every token (σ for sigmoid_grouped routing).
void moe_layer_forward(float* out, const float* x, const MoeWeights& w, const MoeDims& d, int64_t T, Arena& arena,
                       float* router_probs = nullptr);

}  // namespace hlm
