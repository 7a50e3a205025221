// Depthwise causal 1-D convolution with optional SiLU: the short conv of a Gated DeltaNet layer (gdn.md §1.1 step 2),
// CPU reference, forward and backward, over packed sequences. Non-goals: bias (GDN convs have none), dilation,
// strides, other activations.
//
// Layout (contiguous, token-major; T = total tokens of all sequences, C channels, K taps):
//   x, y       [T, C]       y may not alias x
//   w          [C, K]       HF conv1d.weight [C, 1, K] reshaped; tap K-1 multiplies the current token
//   cu_seqlens int64 [N+1]  sequence s spans tokens [cu[s], cu[s+1]); cu[0] = 0, cu[N] = T
//   state      [N, C, K-1]  the K-1 raw (pre-conv) inputs preceding each sequence, oldest first (state[.., K-2] is
//                           the token right before the sequence); nullptr = zeros (a fresh sequence)
//
//   pre[t, c] = Σ_{j=0..K-1} w[c, j] · in(t − K + 1 + j, c),   y = silu ? pre · σ(pre) : pre
//   in(p, c) = x[p, c] inside t's sequence, the initial state for the K-1 positions before its start, else 0.
// So the conv resets at every sequence boundary (no token of one sequence reaches another).
//
// state_out (optional, [N, C, K-1]) receives the K-1 raw inputs ending at each sequence's last token (taken from the
// initial state when the sequence is shorter than K-1): the decode / continued-prefill state. It may alias state_in.
//
// Backward: given dy [T, C], produces dx [T, C] (overwritten), dw [C, K] (overwritten, may be nullptr) and, when
// state_in is given, d_state_in [N, C, K-1] (overwritten, may be nullptr). state_out is not differentiated (its
// gradient is taken as zero). The forward pre-activation is recomputed; nothing is saved.
//
// Parallelism: OpenMP over tokens (y, dx), channels (dw) or (sequence, channel) (states); each output element is
// written by one work item with a fixed summation order, so results do not depend on the thread count.
// Accumulation in double for both instantiations (float, double).
#pragma once
#include <cstdint>

namespace hlm {

struct CausalConv1dShape {
  int64_t total_tokens = 0;  // T
  int64_t channels = 0;      // C
  int64_t kernel = 0;        // K ≥ 1
};

template <typename T>
void causal_conv1d_forward(T* y, T* state_out, const T* x, const T* w, const T* state_in, const int64_t* cu_seqlens,
                           int64_t n_seqs, const CausalConv1dShape& shape, bool silu);

template <typename T>
void causal_conv1d_backward(T* dx, T* dw, T* d_state_in, const T* dy, const T* x, const T* w, const T* state_in,
                            const int64_t* cu_seqlens, int64_t n_seqs, const CausalConv1dShape& shape, bool silu);

}  // namespace hlm
