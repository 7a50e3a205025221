// Gated delta rule on CUDA: launchers for the contract in gated_delta_rule.h (same structs, layout, GVA mapping,
// packed sequences with a state reset per sequence, optional h0/hT/dhT/dh0, overwrite semantics), fp32 storage and
// fp32 state, raw device pointers (cu_seqlens too; n_seqs is the host count), queued on `stream`, no synchronization.
//
// Form: the TOKEN RECURRENCE, not the chunked WY/UT form (correctness first; the chunked form is the next step for
// speed). One thread block per (sequence, v-head) holds the state M [dv, dk] in shared memory; each warp owns whole
// rows of M (row a = value channel a), and the recurrence never mixes rows, so the forward needs no block barrier.
//   forward, per token: M ← e^g M;  p = M k;  u = β (v − p);  M ← M + u kᵀ;  o = scale · M q
// Backward (gated_delta_rule_recurrent.cpp's reverse step): a forward sweep stores the state at the start of every
// segment of gated_delta_rule_cuda_segment() tokens (checkpoints); the reverse sweep recomputes one segment's
// per-token states into a per-block buffer and walks it backwards carrying D = dL/dM (also in shared memory). Per
// token the row sums of dq, dk, dg, dβ are reduced over warps in a fixed order (deterministic, no atomics); dq and dk
// go to per-v-head scratch and are summed over each GVA group in v-head order by a second kernel.
//
// Numerics (the CPU references keep the state or the dot products in double): fp32 state, FMA dot products summed
// per lane in order then by a fixed xor-shuffle tree; e^g by expf. Errors grow with the sequence length (the state
// map is non-expansive for g ≤ 0 and β‖k‖² ≤ 2, so rounding errors add rather than multiply).
// Limits: key_dim ≤ 128 and value_dim ≤ 128 (shared memory: M and D take 2·dv·dk·4 bytes ≤ 128 KiB).
// cu_seqlens must satisfy the contract (the CPU reference checks it; the kernels do not).
// Non-goals for now: the chunked tensor-core form, bf16 storage, multiple blocks per (sequence, head).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm {

constexpr int64_t gated_delta_rule_cuda_max_dim() { return 128; }
// Tokens per checkpoint segment of the backward (workspace: checkpoints ~T/S states per head, S states per block).
constexpr int64_t gated_delta_rule_cuda_segment() { return 32; }

// o [T, Hv, dv] and hT (nullable) OVERWRITTEN. `in` holds device pointers; h0 nullable (zeros). No output may alias
// an input.
void gated_delta_rule_forward_cuda(const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& shape,
                                   float scale, cudaStream_t stream);

// Bytes of device scratch the backward needs: per-v-head dq/dk [T, Hv, dk] each, state checkpoints
// [T/S + N + 1, Hv, dv, dk] and per-block segment states [N·Hv, S, dv, dk] (S = gated_delta_rule_cuda_segment()).
size_t gated_delta_rule_backward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs);

// dq, dk [T, Hk, dk] (summed over each GVA group in v-head order), dv, dg, dbeta, dh0 (nullable) OVERWRITTEN;
// dout.d_hT nullable (zero). No output may alias an input. `workspace` holds
// gated_delta_rule_backward_cuda_workspace_bytes(shape, in.n_seqs) bytes, used only by work on `stream`.
void gated_delta_rule_backward_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                    const GdnInputs<float>& in, const GdnShape& shape, float scale, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
