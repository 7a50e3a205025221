// Gated delta rule on CUDA: launchers for the contract in gated_delta_rule.h (same structs, layout, GVA mapping,
// packed sequences with a state reset per sequence, optional h0/hT/dhT/dh0, overwrite semantics), fp32 storage and
// fp32 state, raw device pointers (cu_seqlens too; n_seqs is the host count), queued on `stream`, no synchronization.
//
// Form: the TOKEN RECURRENCE (not the chunked WY/UT form). The recurrence never mixes state rows (row a = value
// channel a), so the rows of a head are split over lanes and warps and live in REGISTERS; no block barrier is needed
// for the state itself.
//   forward, per token: M ← e^g M;  p = M k;  u = β (v − p);  M ← M + u kᵀ;  o = scale · M q
// Forward: one block per (sequence, v-head), ceil(dv/16) warps (≤ 256 threads, 2 blocks per SM); a warp owns 16 rows
// as 4 slots of 8 lanes, each thread 4 rows × 16 columns (64 registers). The per-row dot products are 8-lane sums,
// reduced for the 4 rows together (7 shuffles for p of 4 rows, 4 for o). k, q, v, g, β are staged in shared memory
// 16 tokens at a time (cp.async, double-buffered, one barrier per 16 tokens).
// Backward (gated_delta_rule_recurrent.cpp's reverse step): work item = (sequence, v-head, row group of ≤ 64 rows,
// dv split into ng = ceil(dv/64) balanced groups), 4 rows per warp (lane l: columns 4l..4l+3), ≤ 512 threads, grid
// capped at 1024 blocks that loop over the items. Three recompute levels: a forward sweep stores the group's state
// at every segment of S = gated_delta_rule_cuda_segment() tokens (checkpoints, workspace); per segment in reverse, a
// sweep stores the state every 4 tokens (per-block scratch, thread-private, L2-resident); per 4-token sub-segment in
// reverse, a sweep keeps e^g·M (shared memory, thread-private) and v − p per token, then the reverse step walks it
// backwards carrying D = dL/dM in registers. Cross-row sums: dq, dk, dg, dβ of a token are summed per thread over its
// rows, per block over warps in order (shared memory), written as per-group partials, and a second kernel sums the
// groups and the GVA v-heads in a fixed order. Deterministic: no atomics, fixed reduction trees.
//
// Numerics (the CPU references keep the state or the dot products in double): fp32 state, FMA dot products summed
// per lane in order then by a fixed xor-shuffle tree; e^g by expf. Errors grow with the sequence length (the state
// map is non-expansive for g ≤ 0 and β‖k‖² ≤ 2, so rounding errors add rather than multiply).
// Limits: key_dim ≤ 128 and value_dim ≤ 128 (register layouts cover 128 columns / rows; smaller dims are zero-padded,
// so dk ≤ 64 costs as much as 128). cu_seqlens must satisfy the contract (the CPU reference checks it; the kernels do
// not). Sequences stay isolated (a NaN in one cannot reach another's outputs); inside one (sequence, head) an inf in
// g or β can also turn the zero padding into NaN (0·inf), which the head's cross-row sums then carry.
// Non-goals for now: the chunked tensor-core form, bf16 storage.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm {

constexpr int64_t gated_delta_rule_cuda_max_dim() { return 128; }
// Tokens per checkpoint segment of the backward (workspace: checkpoints ~T/S + N states per head).
constexpr int64_t gated_delta_rule_cuda_segment() { return 32; }

// o [T, Hv, dv] and hT (nullable) OVERWRITTEN. `in` holds device pointers; h0 nullable (zeros). No output may alias
// an input.
void gated_delta_rule_forward_cuda(const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& shape,
                                   float scale, cudaStream_t stream);

// Bytes of device scratch the backward needs: state checkpoints [T/S + N + 1, Hv, dv, dk] (S =
// gated_delta_rule_cuda_segment()), per-block sub-segment states [min(N·Hv·ng, 1024), S/4 − 1, 4·rg, 128] (rg ≤ 64
// rows per group, ng = ceil(dv/64) groups), per-group partials of dq, dk [T, Hv, ng, dk] and of dg, dβ [T, Hv, ng].
// At T = 8192 (8 × 1024), N = 8, Hv = 32, dk = dv = 128: 556 + 117 + 537 + 4 MB ≈ 1.21 GB.
size_t gated_delta_rule_backward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs);

// dq, dk [T, Hk, dk] (summed over each GVA group in v-head order), dv, dg, dbeta, dh0 (nullable) OVERWRITTEN;
// dout.d_hT nullable (zero). No output may alias an input. `workspace` holds
// gated_delta_rule_backward_cuda_workspace_bytes(shape, in.n_seqs) bytes, used only by work on `stream`.
void gated_delta_rule_backward_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                    const GdnInputs<float>& in, const GdnShape& shape, float scale, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
