// Fused GDN decode preparation (contract: gdn_decode_prep_cuda.h). One warp per row of a sequence: its Hk q heads,
// its Hk k heads, then its Hv v heads; blocks of 8 warps. A q/k row's warp computes the conv of the elements its lanes
// hold in the l2norm warp path's layout (lane l: the V-element chunks starting at (32·j + l)·V), then the row's sum of
// squares in that order, the xor-shuffle tree, the scaling and the store; a v row's warp strides over the channels
// (no sum: any assignment gives the same bits) and its lane 0 writes the head's g and β.
// Why: at batch 1 the six separate launches (three convs, two l2norms, the gate) cost ~9 µs of kernel time per GDN
// layer on the H200 plus their launch gaps (session 27 trace of olmo_hybrid_7b: 24 GDN layers per step).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/warp_rows.cuh"
#include "core/error.h"
#include "ops/causal_conv1d/conv_decode.cuh"
#include "ops/gdn_decode_prep/gdn_decode_prep_cuda.h"
#include "ops/gdn_gate/gdn_gate_math.cuh"
#include "ops/l2norm/l2norm_cuda.h"

namespace hlm {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxKernel = 8;

struct Prep {
  GdnDecodePrepCudaArgs a;
  int64_t N, Hk, Hv, dk, dv, K;
  float beta_scale, eps;
};

// silu(conv) of channel c of sequence n, the channel's state advanced: conv_decode_kernel's operations
// (conv_decode.cuh, the same function).
template <int KMAX>
__device__ __forceinline__ float conv_channel(const float* x, const float* w, float* state, int64_t n, int64_t C,
                                              int64_t c, int64_t K) {
  return cuda::conv_silu(cuda::conv_decode_pre<KMAX, false>(x, w, state, state, n * C + c, c, K));
}

template <int V, int P, int KMAX>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) gdn_decode_prep_kernel(const Prep p) {
  cuda::dependent_launch_trigger();  // a programmatic dependent may start now
  cuda::dependent_launch_wait();     // launched as a dependent itself: the projections are written
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t rows = 2 * p.Hk + p.Hv;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (w >= p.N * rows) return;
  const int64_t n = w / rows, r = w - n * rows;
  if (r < 2 * p.Hk) {  // a q or k head: conv in the l2norm warp layout, then the norm
    const bool is_q = r < p.Hk;
    const int64_t h = is_q ? r : r - p.Hk, C = p.Hk * p.dk, base = h * p.dk;
    const float* x = is_q ? p.a.q : p.a.k;
    const float* cw = is_q ? p.a.q_conv : p.a.k_conv;
    float* st = is_q ? p.a.q_state : p.a.k_state;
    float* out = is_q ? p.a.q_out : p.a.k_out;
    float xv[P];
#pragma unroll
    for (int j = 0; j < P / V; ++j) {
      const int64_t s = cuda::chunk_start<V>(lane, j);
#pragma unroll
      for (int e = 0; e < V; ++e)
        xv[j * V + e] = s < p.dk ? conv_channel<KMAX>(x, cw, st, n, C, base + s + e, p.K) : 0.0f;
    }
    float ss = cuda::slice_sum_squares<V, P>(xv, p.dk, lane);
    ss = cuda::warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss + p.eps);
#pragma unroll
    for (int i = 0; i < P; ++i) xv[i] = xv[i] * inv;
    cuda::store_slice<V, P>(out + n * C + base, xv, p.dk, lane);
  } else {  // a v head: conv only; lane 0 adds the head's gate
    const int64_t h = r - 2 * p.Hk, C = p.Hv * p.dv, base = h * p.dv;
    for (int64_t d = lane; d < p.dv; d += 32)
      p.a.v_out[n * C + base + d] = conv_channel<KMAX>(p.a.v, p.a.v_conv, p.a.v_state, n, C, base + d, p.K);
    if (lane == 0) {
      const int64_t i = n * p.Hv + h;
      cuda::gdn_gate_element(p.a.g[i], p.a.beta[i], p.a.a[i], p.a.b[i], p.a.A_log[h], p.a.dt_bias[h], p.beta_scale);
    }
  }
}

}  // namespace

bool gdn_decode_prep_cuda_supported(const GdnDecodePrepCudaShape& s) {
  return s.n_seqs >= 0 && s.key_heads > 0 && s.value_heads > 0 && s.key_dim > 0 && s.value_dim > 0 &&
         s.key_dim <= l2norm_cuda_warp_max_dim() && s.conv_kernel >= 1 && s.conv_kernel <= kMaxKernel;
}

void gdn_decode_prep_cuda(const GdnDecodePrepCudaArgs& args, const GdnDecodePrepCudaShape& s, cudaStream_t stream) {
  HLM_CHECK(gdn_decode_prep_cuda_supported(s), "gdn_decode_prep_cuda: unsupported shape (key_dim ", s.key_dim,
            ", conv kernel ", s.conv_kernel, ")");
  if (s.n_seqs == 0) return;
  const Prep p{args, s.n_seqs, s.key_heads, s.value_heads, s.key_dim, s.value_dim, s.conv_kernel,
               s.neg_eigval ? 2.0f : 1.0f, L2normCudaParams{}.eps};
  const int64_t warps = s.n_seqs * (2 * s.key_heads + s.value_heads);
  const auto blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  // V as l2norm_forward_cuda picks it for y = the output, x = the conv output it would read (here: q_out/k_out stand
  // for both; the engine's and the tests' buffers are all 16-byte aligned or all not).
  const bool vec = cuda::aligned16(args.q_out) && cuda::aligned16(args.k_out);
  cuda::dispatch_warp<float>(s.key_dim, vec, [&](auto v, auto pl) {
    constexpr int V = decltype(v)::value, P = decltype(pl)::value;
    // A programmatic dependent (dependent_launch.cuh): its launch overlaps the projections' GEMV.
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(
        cuda::dependent_launch_enabled(),
        s.conv_kernel <= 4 ? gdn_decode_prep_kernel<V, P, 4> : gdn_decode_prep_kernel<V, P, 8>, dim3(blocks),
        dim3(32 * kWarpsPerBlock), 0, stream, p));
  });
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
