// Fused preparation of a GDN layer's decode step on CUDA: one launch instead of six for what lies between the layer's
// input projections and the gated delta rule when every sequence brings one token (the CUDA engine's decode steps,
// infer/cuda/cuda_engine.cpp). Per sequence n (its row of each [N, ·] tensor):
//   q' = l2norm_per_key_head(silu(conv(q))),  k' = l2norm_per_key_head(silu(conv(k))),  v' = silu(conv(v)),
//   g = −exp(A_log)·softplus(a + dt_bias),  β = beta_scale·sigmoid(b)   (beta_scale = 2 when neg_eigval, else 1),
// each conv the depthwise causal conv over the channel's K − 1 state slots and the new input, the state advanced by
// one slot in place (causal_conv1d_cuda.h's decode contract). Shapes: q, k, q', k' [N, Hk·dk]; v, v' [N, Hv·dv];
// a, b, g, β [N, Hv]; conv weights [C, K]; conv states [N, C, K − 1]; A_log, dt_bias [Hv].
//
// Bits: equal to causal_conv1d_decode_cuda (silu on) + l2norm_forward_cuda (dim dk, its default eps) +
// gdn_gate_forward_cuda on the same buffers: the same per-element operations (conv_decode.cuh, gdn_gate_math.cuh), and
// each q/k head row summed in the l2norm warp path's order (warp_rows.cuh: the lane's V-element chunks in order, then
// the xor-shuffle tree) with V chosen as l2norm_forward_cuda chooses it for these pointers (tests/cuda: bit for bit).
// CPU reference: the composition of the three ops' references (causal_conv1d, l2norm, gdn_gate: each with its CPU
// forward and backward, finite-difference checks and CUDA harness cases); this fusion is forward-only (decode steps
// need no gradient) and its harness case compares it with the separate CUDA launches byte for byte.
// Aliasing: an output may alias its own input (each element is read and written by one thread); nothing else aliases.
// Supported (gdn_decode_prep_cuda_supported): dk ≤ l2norm_cuda_warp_max_dim(), 1 ≤ K ≤ 8; otherwise the caller runs
// the separate kernels.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

struct GdnDecodePrepCudaShape {
  int64_t n_seqs = 0;  // N, one token each
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  int64_t conv_kernel = 0;  // K
  bool neg_eigval = false;
};

struct GdnDecodePrepCudaArgs {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *a = nullptr, *b = nullptr;  // the projections
  const float *q_conv = nullptr, *k_conv = nullptr, *v_conv = nullptr;                // [C, K]
  const float *A_log = nullptr, *dt_bias = nullptr;                                     // [Hv]
  float *q_state = nullptr, *k_state = nullptr, *v_state = nullptr;                    // [N, C, K − 1], in place
  float *q_out = nullptr, *k_out = nullptr, *v_out = nullptr, *g = nullptr, *beta = nullptr;
};

bool gdn_decode_prep_cuda_supported(const GdnDecodePrepCudaShape& s);

// Queued on `stream`; no synchronization, no allocation. Checks the shape (internal error when unsupported).
void gdn_decode_prep_cuda(const GdnDecodePrepCudaArgs& args, const GdnDecodePrepCudaShape& shape, cudaStream_t stream);

}  // namespace hlm
