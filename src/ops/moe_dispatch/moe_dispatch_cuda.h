// Routed-expert dispatch on CUDA: launchers for the contract in moe_dispatch.h (same arrays, same numbers), raw device
// pointers, queued on `stream`, no host synchronization (the grouped GEMMs take the device offsets, so an MoE layer
// never waits for its routing: it runs inside CUDA graphs).
// Limits: E <= 512 experts, k <= 16 picks (route: one warp per token, 16 logits per lane; the picks in registers).
// Numerics: route computes exp in double and rounds it to fp32 (glibc's expf is correctly rounded nearly always, so
// p agrees with the CPU's bit for bit except next to a rounding midpoint) and sums the normaliser in double in a
// tree order (~1e-16 relative, below fp32's rounding). dispatch is exact and deterministic (no atomics: each block
// ranks one expert's picks with warp ballots in increasing i). combine does the CPU's float operations in its order
// (products and sums rounded separately, no contraction), so it is bit-identical given the same y.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

inline constexpr int64_t kMoeMaxExperts = 512;
inline constexpr int64_t kMoeMaxTopK = 16;

// expert, weight [T, k]; probs [T, E] or nullptr.
void moe_route_cuda(int32_t* expert, float* weight, float* probs, const float* logits, int64_t T, int64_t E, int64_t k,
                    bool norm_topk_prob, cudaStream_t stream);

// The bailing router (moe_dispatch.h, route_sigmoid_grouped; the same numbers: σ from exp in double rounded to fp32
// as the route above, the fp32 sums and products unfused): expert, weight [T, k]; scores [T, E] (σ) or nullptr;
// expert_bias [E]. Limits as moe_route_cuda, and n_group | E, E / n_group ≥ 2, k ≤ topk_group · E / n_group.
void moe_route_sigmoid_grouped_cuda(int32_t* expert, float* weight, float* scores, const float* logits,
                                    const float* expert_bias, int64_t T, int64_t E, int64_t k, int64_t n_group,
                                    int64_t topk_group, bool norm_topk_prob, float routed_scaling,
                                    cudaStream_t stream);

// counts [E], offsets [E + 1], perm [T·k], slot [T·k] (moe_dispatch.h).
void moe_dispatch_cuda(int32_t* counts, int32_t* offsets, int32_t* perm, int32_t* slot, const int32_t* expert,
                       int64_t T, int64_t k, int64_t E, cudaStream_t stream);

// dst [T·k, H] row r = x [T, H] row perm[r] / k: fp32, or rounded to bf16 (round to nearest even).
void moe_gather_rows_cuda(float* dst, const float* x, const int32_t* perm, int64_t T, int64_t k, int64_t H,
                          cudaStream_t stream);
void moe_gather_rows_bf16_cuda(__nv_bfloat16* dst, const float* x, const int32_t* perm, int64_t T, int64_t k,
                               int64_t H, cudaStream_t stream);

// h [R, F] = silu(gate) · up from gu [R, 2F] (moe_swiglu_ref): fp32, or rounded to bf16 (the down GEMM's operand).
void moe_swiglu_cuda(float* h, const float* gu, int64_t R, int64_t F, cudaStream_t stream);
void moe_swiglu_bf16_cuda(__nv_bfloat16* h, const float* gu, int64_t R, int64_t F, cudaStream_t stream);

// out [T, H] OVERWRITTEN (moe_combine_ref); shared, shared_gate nullptr when the model has no shared expert;
// shared_gate nullptr with shared given: the ungated shared expert (out += shared).
void moe_combine_cuda(float* out, const float* y, const float* weight, const int32_t* expert, const int32_t* slot,
                      const float* shared, const float* shared_gate, int64_t T, int64_t k, int64_t H,
                      cudaStream_t stream);

}  // namespace hlm
