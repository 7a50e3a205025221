// Gate and write strength of a Gated DeltaNet layer (gdn.md §1.1 step 4, §3 step 8): CPU reference, forward and
// backward. Non-goals: the chunk-local cumsum of g (inside the gated delta rule), fusing with the recurrence.
//
// Shapes (contiguous): a, b, g, beta [T, H] (H = value heads); A_log, dt_bias [H].
//   g[t, h]    = −exp(A_log[h]) · softplus(a[t, h] + dt_bias[h])         per-token LOG decay (≤ 0)
//   beta[t, h] = sigmoid(b[t, h]) · (neg_eigval ? 2 : 1)                 (D4: OLMo-Hybrid / FLA allow_neg_eigval)
// softplus matches torch.nn.functional.softplus (beta 1, threshold 20): softplus(u) = u for u > 20, else
// log1p(exp(u)) (exact for very negative u, where exp underflows to 0). Math in double, stored as T (fp32 for the
// engine: decision D5 keeps the gate in fp32, never bf16).
//
// Backward: given dg, dbeta [T, H]: da, db [T, H] and dA_log, ddt_bias [H], all overwritten.
//   da = dg · (−exp(A_log)) · softplus'(a + dt_bias)  (softplus' = 1 above the threshold, else sigmoid);
//   ddt_bias[h] = Σ_t da[t, h];  dA_log[h] = Σ_t dg[t, h] · g[t, h];  db = dbeta · scale · σ(b)(1 − σ(b)).
// Parallelism: OpenMP over tokens for the per-token values, over heads for the sums (fixed token order), so results
// do not depend on the thread count.
#pragma once
#include <cstdint>

namespace hlm {

inline constexpr double kSoftplusThreshold = 20.0;  // torch's default

template <typename T>
void gdn_gate_forward(T* g, T* beta, const T* a, const T* b, const T* A_log, const T* dt_bias, int64_t tokens,
                      int64_t heads, bool neg_eigval);

template <typename T>
void gdn_gate_backward(T* da, T* db, T* dA_log, T* ddt_bias, const T* dg, const T* dbeta, const T* a, const T* b,
                       const T* A_log, const T* dt_bias, int64_t tokens, int64_t heads, bool neg_eigval);

}  // namespace hlm
