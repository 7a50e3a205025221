// Attention locality (analysis, the seed's §5 "attention locality"): how much of each query's causal softmax
// attention probability falls on its most recent keys. CPU reference, forward only (no gradients: analysis).
// Inputs as attention.h reads them: q [T, Hq, D] and k [T, Hkv, D] after q/k norm and RoPE, packed sequences
// cu_seqlens [N+1], score scale `scale`; query head h reads kv head h / (Hq / Hkv).
// Output recent_mass [T, n_windows] (overwritten): for the query at position t of its sequence and window w,
//   recent_mass[t, w] = mean over the Hq heads of Σ_{j = max(0, t−w+1)}^{t} softmax_j(scale · q_t · k_j)
// i.e. the share of mass on the last w keys including the query's own token (1 when t + 1 ≤ w). A sliding-window
// layer (shape.window = W > 0) has its softmax over keys max(0, t−W+1) .. t only, as the forward (attention.h): the
// share is then 1 for every w ≥ W.
// Computed one query row at a time (O(T) scratch per thread, never a T×T matrix); scores, max-subtracted exp and the
// row sum in double. Threads split the queries; the result does not depend on the thread count.
#pragma once
#include <cstdint>

#include "ops/attention/attention.h"

namespace hlm {

void attention_recent_mass(double* recent_mass, const float* q, const float* k, const int64_t* cu_seqlens,
                           int64_t n_seqs, const AttentionShape& shape, double scale, const int64_t* windows,
                           int64_t n_windows);

}  // namespace hlm
