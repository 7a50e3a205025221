// Routed-expert dispatch: the pieces of an MoE FFN around its experts' grouped GEMMs, CPU reference (the CUDA
// launchers are moe_dispatch_cuda.h and moe_grouped_gemm_cuda.h). T tokens, E experts, k picks per token; pick
// (t, j) has the flat index i = t·k + j. All arrays are row-major and dense.
//   route:    logits [T, E] -> p = softmax over all E (exp in fp32, normaliser summed in double, p rounded to fp32),
//             the k largest p (descending, ties: lower index) -> expert [T, k] and weight [T, k] = p, or
//             p / Σ_top-k p when norm_topk_prob (the sum in fp32, j ascending). The same numbers as
//             layers/moe_layer.h's moe_route (HF Qwen3MoeSparseMoeBlock's router). probs [T, E]: p (optional).
//   dispatch: counts [E]; offsets [E + 1], their exclusive prefix sum (offsets[E] = T·k); perm [T·k]: the picks
//             sorted by expert, STABLE (increasing i within an expert), so row r of the grouped problem is pick
//             perm[r] and expert e owns rows [offsets[e], offsets[e + 1]); slot [T·k]: the inverse (pick i -> row).
//             Expert ids must lie in [0, E).
//   combine:  out [T, H] (OVERWRITTEN) = Σ over token t's picks in INCREASING EXPERT INDEX of weight · y[slot]
//             (y [T·k, H]: the experts' outputs in dispatch order), each term rounded and added to a zero start in
//             that order: the CPU MoE layer's order, so the combine adds no difference of its own. Then, when
//             shared (y_s [T, H]) is given, out += σ(g_t) · y_s[t] with g = shared_gate [T] (σ in double, rounded
//             once to fp32): Qwen3.5-MoE / Qwen3-Next's gated shared expert; with shared given and shared_gate
//             nullptr, out += y_s[t] (no gate: the bailing models' shared expert, layers/moe_layer.cpp's order).
//   route_sigmoid_grouped (the bailing router, layers/moe_layer.h's moe_route_sigmoid_grouped, same numbers):
//             σ = sigmoid(logit) (exp in double, rounded to fp32); b = σ + expert_bias (fp32, selection only); the
//             group score of each of n_group equal groups = the sum of its two largest b (fp32); the topk_group best
//             groups (ties: lower index) are kept, the other experts' b = −inf; the k largest b (descending, ties:
//             lower index) -> expert [T, k]; weight = σ, or σ / (Σ_top-k σ + 1e−20) when norm_topk_prob (fp32 sum,
//             j ascending), times routed_scaling (fp32). scores [T, E]: σ (optional). A NaN logit makes its token's
//             weights NaN (its experts are still ids in [0, E), which ones is unspecified).
// A NaN logit makes its token's weights NaN (so its output row NaN) whichever experts it picks.
#pragma once
#include <cstdint>

namespace hlm {

void moe_route_ref(int32_t* expert, float* weight, float* probs, const float* logits, int64_t T, int64_t E,
                   int64_t k, bool norm_topk_prob);

void moe_route_sigmoid_grouped_ref(int32_t* expert, float* weight, float* scores, const float* logits,
                                   const float* expert_bias, int64_t T, int64_t E, int64_t k, int64_t n_group,
                                   int64_t topk_group, bool norm_topk_prob, float routed_scaling);

void moe_dispatch_ref(int32_t* counts, int32_t* offsets, int32_t* perm, int32_t* slot, const int32_t* expert,
                      int64_t T, int64_t k, int64_t E);

void moe_combine_ref(float* out, const float* y, const float* weight, const int32_t* expert, const int32_t* slot,
                     const float* shared, const float* shared_gate, int64_t T, int64_t k, int64_t H);

// The SwiGLU of the fused gate/up product: gu [R, 2F] holds each row's gate (columns [0, F)) then up ([F, 2F));
// h [R, F] = silu(gate) · up with swiglu.h's expression (g / (1 + e^-g) · u).
void moe_swiglu_ref(float* h, const float* gu, int64_t R, int64_t F);

}  // namespace hlm
