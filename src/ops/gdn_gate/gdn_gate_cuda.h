// GDN gate (g, β) on CUDA: launchers for the contract in gdn_gate.h (same formulas, torch's softplus threshold 20),
// f32, raw device pointers, queued on `stream`, no synchronization.
// Numerics (the CPU reference computes in double and rounds once): expf (≤ 2 ulp), log1pf (≤ 1 ulp) and correctly
// rounded division/products in fp32. a + dt_bias is rounded to fp32 as on the CPU (and in HF), so the threshold
// test u > 20 takes the same branch. σ(b)(1 − σ(b)) is computed as σ(b)·σ(−b) (no cancellation). fp32 σ(x) flushes
// to 0 for x < −88.7 where double keeps a tiny value (irrelevant for gates; the tests stay inside that range).
// dA_log and ddt_bias are deterministic two-pass column sums over tokens (backend/cuda/column_sum.h).
// Shapes: a, b, g, beta, dg, dbeta, da, db [tokens, heads]; A_log, dt_bias, dA_log, ddt_bias [heads].
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct GdnGateCudaParams {
  int64_t tokens = 0;
  int64_t heads = 0;
  bool neg_eigval = false;  // β = 2·sigmoid(b)
};

// g = −exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b)·(neg_eigval ? 2 : 1); both OVERWRITTEN (each may alias
// the input of the same index: a for g, b for beta).
void gdn_gate_forward_cuda(float* g, float* beta, const float* a, const float* b, const float* A_log,
                           const float* dt_bias, const GdnGateCudaParams& p, cudaStream_t stream);

// Bytes of device scratch gdn_gate_backward_cuda needs (partials of the two column sums).
size_t gdn_gate_backward_cuda_workspace_bytes(const GdnGateCudaParams& p);

// da, db [tokens, heads] and dA_log, ddt_bias [heads], all OVERWRITTEN; no output may alias an input.
// `workspace` holds gdn_gate_backward_cuda_workspace_bytes(p) bytes, used only by work on `stream`.
void gdn_gate_backward_cuda(float* da, float* db, float* dA_log, float* ddt_bias, const float* dg, const float* dbeta,
                            const float* a, const float* b, const float* A_log, const float* dt_bias,
                            const GdnGateCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
