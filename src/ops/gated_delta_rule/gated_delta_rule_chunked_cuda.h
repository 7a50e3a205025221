// Gated delta rule on CUDA, CHUNKED form on tensor cores (bf16 operands, fp32 accumulation, fp32 state): the contract
// of gated_delta_rule.h (same structs, layout, GVA mapping, packed sequences with a state reset per sequence, optional
// h0/hT/dhT/dh0, overwrite semantics), fp32 storage in and out, raw device pointers (cu_seqlens too; n_seqs is the
// host count), queued on `stream`, no synchronization. The specification is the CPU chunked reference
// (gated_delta_rule_chunked.cpp / _backward.cpp, gdn.md §2-§3), chunk C = 64, stage by stage.
//
// Forward kernels (gated_delta_rule_chunked_fwd.cu):
//   table   chunk table from cu_seqlens (chunks never straddle sequences; the last one may be partial)
//   prep    per (chunk, v-head): γ (chunk-local cumsum), K Kᵀ, L, R = (I + L)^-1 (fp32 blocked substitution),
//           W = R diag(βe^γ) K → bf16, Ũ = R diag(β) V → fp32, the decayed keys e^{γ_c − γ} K → bf16; for the
//           backward also R, Ũ and scale·e^γ Q in bf16
//   state   per (sequence, v-head, 32 state rows), sequential over chunks, state in fp32 wmma accumulators, the
//           chunk's W and decayed keys copied by cp.async (prefetched a chunk ahead when the grid is under two
//           blocks per SM; else one buffer, so more blocks share an SM): store M0 (bf16), U = Ũ − W M0ᵀ (fp32, in
//           place of Ũ), M ← e^{γ_c} M + Uᵀ diag(e^{γ_c − γ}) K
//   output  per (chunk, v-head): O = scale · (diag(e^γ) Q M0ᵀ + (Q Kᵀ ⊙ Γ) U)
// Backward kernels (gated_delta_rule_chunked_bwd.cu), after rerunning prep and state (or finding them kept):
//   dU_loc  per (chunk, v-head): scale · (Q Kᵀ ⊙ Γ)ᵀ dO; dO copied to bf16
//   dstate  per (sequence, v-head, 32 state rows), reverse over chunks, D = dL/dM in fp32 accumulators, the chunk's
//           tiles copied by cp.async (prefetched as in the state pass): store D leaving the chunk (bf16),
//           dU = dU_loc + diag(e^{γ_c − γ}) K Dᵀ, D ← e^{γ_c} D + scale·dOᵀ diag(e^γ) Q − dUᵀ W
//   dqk     per (chunk, v-head): dq (complete), the output/state parts of dk and dγ, dW = −dU M0
//   wy      per (chunk, v-head): X = Rᵀ dW, Y = Rᵀ dU; dv, dβ, the WY parts of dk and dγ, dg
//   gva     dq, dk summed over the v-heads of each k-head in order (only when Hv > Hk)
// v2 kernels (HLM_GDN_KERNELS=v2, read once; the default since session 23; v1 selects the v1 kernels): the same stages, scratch contents and outputs with
// mma.sync m16n8k16 products whose accumulators stay in registers (gdn_mma.cuh). Forward (gdn_fwd_v2.cuh): prep_v2,
// state_v2 (16 state rows per warp held for the whole sequence, 1-8 warps per block picked at launch so that at least
// half the SMs get work; with few sequences × heads a warp pair per 16 rows, each warp half the key columns:
// HLM_GDN_STATE_SPLIT=on|off forces it), output_v2; backward: gdn_bwd_v2.cuh. docs/cuda.md has the design and the CPU emulation.
// Deterministic: no atomics; every sum has a fixed order.
//
// Numerics: the state M and D, γ and every exponent, L and R, and all accumulations are fp32; bf16 are the GEMM
// operands q, k, v, W, U, dO, dU, X, Y, R and the per-chunk states stored for the output and the backward (as FLA
// does, gdn.md §4; v2's prep forms R's off-diagonal blocks from split hi + lo bf16 operands, ~16 significant bits,
// before R's own bf16 rounding). Errors are therefore ~bf16 (2^-9 relative per operand) instead of the fp32
// recurrence's; the test (tests/cuda/cases_gated_delta_rule_chunked.cpp) states the bound. Use the recurrent kernels
// (gated_delta_rule_cuda.h) for fp32 work; this path serves the bf16 compute mode.
// Limits: key_dim, value_dim ≤ 128 (zero-padded to 128 in shared memory, so small dims cost as much as 128).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm {

constexpr int64_t gated_delta_rule_chunked_cuda_max_dim() { return 128; }

// Scratch of the forward: chunk table, γ [T, Hv], W and the decayed keys [T, Hv, dk] bf16, U [T, Hv, dv] fp32,
// per-chunk states [T/64 + N + 1, Hv, dv, dk] bf16. At T = 8192 (8 × 1024), N = 8, Hv = 32, dk = dv = 128: ≈ 413 MB.
size_t gated_delta_rule_chunked_forward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs);
// o [T, Hv, dv] and hT (nullable) OVERWRITTEN; h0 nullable (zeros). No output may alias an input. `workspace` holds
// the bytes above, used only by work on `stream`.
// keep_for_backward: the workspace holds at least gated_delta_rule_chunked_kept_bytes (the front of the backward's
// workspace), and the forward leaves in it what the backward's rerun of prep and state would compute (the same
// kernels on the same inputs, so the same bits); a backward with forward_kept on these inputs and this workspace, or
// gated_delta_rule_chunked_backward_kept_cuda on this buffer, then skips that rerun (the recomputing layer backward,
// whose forward runs right before it; kept activations, whose forward runs a whole model earlier).
void gated_delta_rule_chunked_forward_cuda(const GdnOutputs<float>& out, const GdnInputs<float>& in,
                                           const GdnShape& shape, float scale, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream,
                                           bool keep_for_backward = false);

// What a keep_for_backward forward leaves for the backward: the forward's scratch plus R per chunk, Ũ and scale·e^γ Q
// in bf16 (the front of the backward's workspace). ≈ 0.58 GB at the shape above.
size_t gated_delta_rule_chunked_kept_bytes(const GdnShape& shape, int64_t n_seqs);
// Scratch of the backward: the forward's plus R per chunk, Ũ, scale·e^γ Q and dO in bf16, per-chunk D (bf16),
// dU [T, Hv, dv] fp32, dW [T, Hv, dk] bf16, dk partials [T, Hv, dk] fp32, dγ partials [T, Hv] and, when Hv > Hk, dq
// per v-head [T, Hv, dk] fp32. ≈ 1.13 GB at the shape above (Hv = Hk).
size_t gated_delta_rule_chunked_backward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs);
// dq, dk [T, Hk, dk] (summed over each GVA group in v-head order), dv, dg, dbeta, dh0 (nullable) OVERWRITTEN;
// dout.d_hT nullable (zero). No output may alias an input.
// forward_kept: the workspace comes from gated_delta_rule_chunked_forward_cuda with keep_for_backward on the same
// inputs, shape and scale, untouched since; prep and state are then not rerun (results bit-identical either way).
void gated_delta_rule_chunked_backward_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                            const GdnInputs<float>& in, const GdnShape& shape, float scale,
                                            void* workspace, size_t workspace_bytes, cudaStream_t stream,
                                            bool forward_kept = false);
// The backward's own scratch (per-chunk D, dU, dW, dk and dγ partials, dO in bf16, per-v-head dq under GVA) when the
// kept forward lives in a buffer of its own. ≈ 0.55 GB at the shape above.
size_t gated_delta_rule_chunked_backward_scratch_bytes(const GdnShape& shape, int64_t n_seqs);
// The backward of a forward kept in a buffer of its own: `kept` (kept_bytes) as gated_delta_rule_chunked_forward_cuda
// with keep_for_backward left it on the same inputs, shape and scale (only read here, so it stays valid), `scratch`
// (backward_scratch_bytes) the backward's own. The same kernels on the same data as the one-workspace backward with
// forward_kept, so the same bits. Outputs as gated_delta_rule_chunked_backward_cuda.
void gated_delta_rule_chunked_backward_kept_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                                 const GdnInputs<float>& in, const GdnShape& shape, float scale,
                                                 const void* kept, size_t kept_bytes, void* scratch,
                                                 size_t scratch_bytes, cudaStream_t stream);

}  // namespace hlm
