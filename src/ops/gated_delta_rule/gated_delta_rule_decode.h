// Gated delta rule DECODE STEP (docs gdn.md §0, §7): one new token for each of B independent sequences, updating each
// sequence's recurrent state IN PLACE. The CPU reference is here; the CUDA launcher is in
// gated_delta_rule_decode_cuda.h. Non-goals (separate ops, as for the prefill in gated_delta_rule.h): L2
// normalisation of q/k, the gate (A_log, dt_bias, softplus), the β sigmoid, the short conv and the output norm.
//
// Layout (contiguous; the prefill layout of gated_delta_rule.h with one token per sequence, T = B):
//   q, k    [B, Hk, dk]        used as given (the caller L2-normalises them)
//   v       [B, Hv, dv]
//   g       [B, Hv]            LOG decay α = e^g (normally ≤ 0, not assumed)
//   beta    [B, Hv]            write strength (normally (0,1), or (0,2) for negative eigenvalues)
//   state   [B, Hv, dv, dk]    M = Sᵀ (row a = value channel a, dk contiguous): the h0/hT layout of
//                              gated_delta_rule.h. READ and OVERWRITTEN with the state after the token.
//   o       [B, Hv, dv]        OVERWRITTEN
// GVA: v-head h reads k-head h / (Hv / Hk) (HF repeat_interleave); Hv % Hk == 0. `o` must not alias any input or
// the state; the state is the only in-place buffer.
//
// Math per sequence b and v-head h (decay before read, output inclusive of the new token):
//   M ← e^{g} M;   p = M k;   u = β (v − p);   M ← M + u kᵀ;   o = scale · M q
// This is EXACTLY one token of gated_delta_rule_recurrent_forward with h0 = state in and hT = state out, and the CPU
// function below is implemented that way (cu_seqlens = 0, 1, ..., B), so prefill + decode steps = a longer prefill
// (gdn.md §7) holds by construction, up to the rounding of the state to T between steps.
//
// Numerics of the CPU reference: those of the recurrent forward (state and dot products in double, sums over d in
// increasing order, one rounding to T at the end), deterministic and independent of the OpenMP thread count. With
// T = double, S decode steps are bit-identical to the recurrent forward over the S tokens; with T = float the state
// is rounded to fp32 after every step (relative error ~2^-24 per step). A NaN/Inf in one sequence's inputs or state
// reaches only that sequence's o and state (work items are (sequence, v-head) pairs).
// Cost: the reference copies the state once (it writes hT into a scratch buffer and copies it back, so it does not
// rely on how the recurrent forward orders its reads of h0 and writes of hT); it is a reference, not a fast path.
#pragma once
#include <cstdint>

#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm {

struct GdnDecodeShape {
  int64_t batch = 0;      // B: sequences, one token each
  int64_t k_heads = 0;    // Hk (q and k heads)
  int64_t v_heads = 0;    // Hv (v, g, beta, state, o heads), a multiple of Hk
  int64_t key_dim = 0;    // dk
  int64_t value_dim = 0;  // dv
  // The same problem as a packed prefill of B one-token sequences (gated_delta_rule.h).
  GdnShape as_prefill() const { return {batch, k_heads, v_heads, key_dim, value_dim}; }
  int64_t state_elements() const { return batch * v_heads * value_dim * key_dim; }
};

// Inputs of one decode step (all read-only).
template <typename T>
struct GdnDecodeInputs {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* g = nullptr;
  const T* beta = nullptr;
};

// One decode step on the CPU: o [B, Hv, dv] OVERWRITTEN, state [B, Hv, dv, dk] updated in place. T = float or double.
template <typename T>
void gated_delta_rule_decode(T* o, T* state, const GdnDecodeInputs<T>& in, const GdnDecodeShape& shape, T scale);

}  // namespace hlm
