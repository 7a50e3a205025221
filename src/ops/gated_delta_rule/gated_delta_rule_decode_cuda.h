// Gated delta rule decode step on CUDA: the launcher for the contract in gated_delta_rule_decode.h (same layout, GVA
// mapping, in-place state, overwrite of o), fp32 storage and fp32 state, raw device pointers, queued on `stream`; no
// synchronization, no allocation.
//
// The step is memory-bound: the state (B·Hv·dv·dk·4 bytes) is read once and written once, everything else is small.
// Each state row (value channel a of one (sequence, v-head)) is touched exactly once, in registers:
//   read row, r = e^g·row, p = r·k, u = β(v_a − p), row' = r + u·k, o_a = scale·(row'·q), write row'.
// Two kernels (gated_delta_rule_decode.cu says more):
//   vector path, when dk ∈ {64, 128, 256} and state, q, k are 16-byte aligned: each row is split over dk/16 lanes of a
//     warp, every lane holding 16 floats (four 16-byte loads, interleaved across the lanes of the row so that every
//     32-byte sector a warp load instruction touches is used whole); a thread keeps two rows in flight; k and q sit
//     in shared memory; streaming cache hints (ld/st .cs) on the state.
//   scalar path, any dk, dv, alignment: one warp per row, lanes stride over dk; the row is read twice (the second read
//     hits L1) and written once.
// Numerics: fp32 state and arithmetic; α = expf(g) (≤ 2 ulp), r = α·row rounded, both dot products are FMA chains
// per lane in a fixed column order followed by a fixed xor-shuffle tree over the lanes of the row (every lane gets
// the same bits), row' = fmaf(u, k, r). Deterministic: same inputs, same bits, whatever the launch history. The
// vector and scalar paths group the sums differently, so they agree only to rounding. A NaN/Inf in one sequence's
// inputs or state stays in that sequence's o and state (blocks never mix (sequence, v-head) pairs).
#pragma once
#include <cuda_runtime_api.h>

#include "ops/gated_delta_rule/gated_delta_rule_decode.h"

namespace hlm {

// o [B, Hv, dv] OVERWRITTEN; state [B, Hv, dv, dk] updated in place. `in` holds device pointers. `o` must not alias
// the state or an input.
void gated_delta_rule_decode_cuda(float* o, float* state, const GdnDecodeInputs<float>& in, const GdnDecodeShape& shape,
                                  float scale, cudaStream_t stream);

// Whether a call with these pointers and shape takes the vector path (for tests and benchmarks).
bool gated_delta_rule_decode_cuda_vectorized(const float* state, const GdnDecodeInputs<float>& in,
                                             const GdnDecodeShape& shape);

}  // namespace hlm
