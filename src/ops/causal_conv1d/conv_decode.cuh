// Device functions of the causal conv shared with the fused GDN decode preparation (ops/gdn_decode_prep), which must
// produce the conv's bits. Included only by .cu files.
//   conv_silu: silu(p) = p / (1 + e^−p): expf (≤ 2 ulp), one addition, one division, in this order.
//   conv_decode_pre: one channel of one sequence's decode step (one new token): the pre-activation, the fmaf chain
//     over the K taps in tap order (the window: the K − 1 state slots, then x), and the state advanced by one slot
//     (state_out may alias state_in: every slot is read before any is written, by this one thread). With kNullable a
//     null state_in reads as zeros and a null state_out is not written (causal_conv1d_decode_cuda's contract);
//     without it both must be valid when K > 1 (the fused GDN preparation: no per-element pointer tests).
//     Layouts: x [N, C], w [C, K], states [N, C, K − 1]; item = n·C + c.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hlm::cuda {

__device__ __forceinline__ float conv_silu(float pre) { return pre / (1.0f + expf(-pre)); }

template <int KMAX, bool kNullable = true>
__device__ __forceinline__ float conv_decode_pre(const float* x, const float* w, const float* state_in,
                                                 float* state_out, int64_t item, int64_t c, int64_t K) {
  const int64_t Km1 = K - 1;
  float in[KMAX];  // in[j] = the input at position t − K + 1 + j, j < K (in[K − 1] = x)
#pragma unroll
  for (int j = 0; j < KMAX; ++j)
    in[j] = j < Km1 ? (!kNullable || state_in != nullptr ? state_in[item * Km1 + j] : 0.0f) : j == Km1 ? x[item] : 0.0f;
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < KMAX; ++j)
    if (j < K) acc = fmaf(w[c * K + j], in[j], acc);
  if (!kNullable || state_out != nullptr)
#pragma unroll
    for (int j = 0; j + 1 < KMAX; ++j)
      if (j < Km1) state_out[item * Km1 + j] = in[j + 1];
  return acc;
}

}  // namespace hlm::cuda
