// Routed-expert dispatch kernels: routing (one warp per token), the stable sort of picks by expert (one block per
// expert), row gather, fused-gate/up SwiGLU and the weighted combine. Contract: moe_dispatch_cuda.h.
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/moe_dispatch/moe_dispatch_cuda.h"

namespace hlm {
namespace {

constexpr int kPerLane = static_cast<int>(kMoeMaxExperts / 32);
constexpr int kMaxK = static_cast<int>(kMoeMaxTopK);
constexpr int kRouteWarps = 4;
constexpr int kDispatchThreads = 256;

// (pa, ia) ranks before (pb, ib): larger p, ties (and NaN, which compares unordered) to the lower index; ib < 0 is
// "nothing yet".
__device__ __forceinline__ bool ranks_before(float pa, int ia, float pb, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  if (pa > pb) return true;
  if (pa < pb) return false;
  return ia < ib;
}

__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(int32_t* expert, float* weight, float* probs,
                                                                     const float* logits, int64_t T, int E, int k,
                                                                     bool norm) {
  const int lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + threadIdx.x / 32;
  if (t >= T) return;
  const float* row = logits + t * E;
  float p[kPerLane];
  float mx = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const int e = lane + 32 * s;
    p[s] = e < E ? row[e] : -INFINITY;
    nan |= p[s] != p[s];
    mx = fmaxf(mx, p[s]);
  }
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (__any_sync(0xffffffffu, nan)) mx = cuda::quiet_nan();
  double sum = 0.0;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const int e = lane + 32 * s;
    p[s] = e < E ? static_cast<float>(exp(static_cast<double>(p[s] - mx))) : 0.0f;
    sum += p[s];
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const int e = lane + 32 * s;
    if (e < E) {
      p[s] = static_cast<float>(p[s] / sum);
      if (probs != nullptr) probs[t * E + e] = p[s];
    }
  }
  unsigned taken = 0;  // bit s: this lane's expert lane + 32·s is picked
  float sel_p[kMaxK];
  int sel_e[kMaxK];
  float chosen = 0.0f;
  for (int j = 0; j < k; ++j) {
    float bp = 0.0f;
    int be = -1;
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) {
      const int e = lane + 32 * s;
      if (e < E && !(taken >> s & 1u) && ranks_before(p[s], e, bp, be)) {
        bp = p[s];
        be = e;
      }
    }
    for (int o = 16; o > 0; o /= 2) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (ranks_before(op, oe, bp, be)) {
        bp = op;
        be = oe;
      }
    }
    if (be % 32 == lane) taken |= 1u << (be / 32);
    sel_p[j < kMaxK ? j : 0] = bp;
    sel_e[j < kMaxK ? j : 0] = be;
    chosen = __fadd_rn(chosen, bp);  // j ascending, as the CPU
  }
  if (lane == 0)
    for (int j = 0; j < k; ++j) {
      expert[t * k + j] = sel_e[j];
      weight[t * k + j] = norm ? __fdiv_rn(sel_p[j], chosen) : sel_p[j];
    }
}

// The bailing router (moe_dispatch.h, route_sigmoid_grouped): one warp per token, lane l holds experts l + 32·s; the
// group scores go through the warp's shared row (G ≤ E / 2 ≤ 256), which every lane then reads.
__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_sigmoid_grouped_kernel(
    int32_t* expert, float* weight, float* scores, const float* logits, const float* bias, int64_t T, int E, int k,
    int G, int topk_group, bool norm, float scaling) {
  __shared__ float group_score[kRouteWarps][kMoeMaxExperts / 2];
  __shared__ unsigned char group_kept[kRouteWarps][kMoeMaxExperts / 2];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= T) return;  // whole warps leave together (t is per warp)
  const int per = E / G;
  float sg[kPerLane], b[kPerLane];
  bool nan = false;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const int e = lane + 32 * s;
    sg[s] = 0.0f;
    b[s] = -INFINITY;
    if (e < E) {
      sg[s] = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(logits[t * E + e]))));
      b[s] = __fadd_rn(sg[s], bias[e]);
      nan |= b[s] != b[s];
      if (scores != nullptr) scores[t * E + e] = sg[s];
    }
  }
  nan = __any_sync(0xffffffffu, nan);
  // Group scores: the two largest b of each group (a multiset: a tie fills both), merged across the lanes.
  for (int g = 0; g < G; ++g) {
    float first = -INFINITY, second = -INFINITY;
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) {
      const int e = lane + 32 * s;
      if (e >= E || e / per != g) continue;
      if (b[s] > first) {
        second = first;
        first = b[s];
      } else if (b[s] > second) {
        second = b[s];
      }
    }
    for (int o = 16; o > 0; o /= 2) {
      const float f2 = __shfl_xor_sync(0xffffffffu, first, o), s2 = __shfl_xor_sync(0xffffffffu, second, o);
      const float lo = fminf(first, f2);
      second = fmaxf(lo, fmaxf(second, s2));
      first = fmaxf(first, f2);
    }
    if (lane == 0) {
      group_score[warp][g] = __fadd_rn(first, second);
      group_kept[warp][g] = 0;
    }
  }
  __syncwarp();
  // The topk_group best groups (larger score, ties to the lower index): the same serial scan in every lane.
  if (lane == 0)
    for (int j = 0; j < topk_group; ++j) {
      int best = -1;
      for (int g = 0; g < G; ++g)
        if (!group_kept[warp][g] && (best < 0 || group_score[warp][g] > group_score[warp][best])) best = g;
      group_kept[warp][best] = 1;
    }
  __syncwarp();
  unsigned taken = 0;
  float sel_s[kMaxK];
  int sel_e[kMaxK];
  float chosen = 0.0f;
  for (int j = 0; j < k; ++j) {
    float bp = 0.0f, bs = 0.0f;
    int be = -1;
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) {
      const int e = lane + 32 * s;
      if (e >= E || (taken >> s & 1u)) continue;
      const float m = group_kept[warp][e / per] ? b[s] : -INFINITY;
      if (ranks_before(m, e, bp, be)) {
        bp = m;
        bs = sg[s];
        be = e;
      }
    }
    for (int o = 16; o > 0; o /= 2) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, o), os = __shfl_xor_sync(0xffffffffu, bs, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (ranks_before(op, oe, bp, be)) {
        bp = op;
        bs = os;
        be = oe;
      }
    }
    if (be % 32 == lane) taken |= 1u << (be / 32);
    sel_s[j < kMaxK ? j : 0] = bs;
    sel_e[j < kMaxK ? j : 0] = be;
    chosen = __fadd_rn(chosen, bs);  // j ascending, as the CPU
  }
  if (lane == 0)
    for (int j = 0; j < k; ++j) {
      expert[t * k + j] = nan ? j : sel_e[j];
      const float w = norm ? __fdiv_rn(sel_s[j], __fadd_rn(chosen, 1e-20f)) : sel_s[j];
      weight[t * k + j] = nan ? cuda::quiet_nan() : __fmul_rn(w, scaling);
    }
}

// counts[e] for block e: a block-wide count over all picks.
__global__ void __launch_bounds__(kDispatchThreads) moe_count_kernel(int32_t* counts, const int32_t* expert,
                                                                     int64_t n) {
  const int e = blockIdx.x;
  int c = 0;
  for (int64_t base = 0; base < n; base += kDispatchThreads) {
    const int64_t i = base + threadIdx.x;
    c += __syncthreads_count(i < n && expert[i] == e);
  }
  if (threadIdx.x == 0) counts[e] = c;
}

// Block e: its offset from counts, then its picks ranked in increasing i (warp ballots + a scan over the warps).
__global__ void __launch_bounds__(kDispatchThreads) moe_place_kernel(int32_t* offsets, int32_t* perm, int32_t* slot,
                                                                     const int32_t* counts, const int32_t* expert,
                                                                     int64_t n, int E) {
  constexpr int kWarps = kDispatchThreads / 32;
  __shared__ int warp_count[kWarps];
  __shared__ int start;
  const int e = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    int off = 0;
    for (int x = 0; x < e; ++x) off += counts[x];
    start = off;
    if (e == 0) {
      int acc = 0;
      for (int x = 0; x < E; ++x) {
        offsets[x] = acc;
        acc += counts[x];
      }
      offsets[E] = acc;
    }
  }
  __syncthreads();
  int placed = start;
  for (int64_t base = 0; base < n; base += kDispatchThreads) {
    const int64_t i = base + threadIdx.x;
    const bool mine = i < n && expert[i] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_count[w] : 0;
      total += warp_count[w];
    }
    if (mine) {
      const int r = placed + before + __popc(ballot & ((1u << lane) - 1u));
      perm[r] = static_cast<int32_t>(i);
      slot[i] = r;
    }
    placed += total;
    __syncthreads();  // warp_count is rewritten next round
  }
}

template <typename Out>
__global__ void moe_gather_kernel(Out* dst, const float* x, const int32_t* perm, int64_t k, int64_t H) {
  const int64_t r = blockIdx.x;
  const float* src = x + (perm[r] / k) * H;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) dst[r * H + h] = cuda::from_f32<Out>(src[h]);
}

template <typename Out>
__global__ void moe_swiglu_kernel(Out* h, const float* gu, int64_t R, int64_t F) {
  const int64_t n = R * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, f = i % F;
    const float g = gu[r * 2 * F + f], u = gu[r * 2 * F + F + f];
    h[i] = cuda::from_f32<Out>(g / (1.0f + expf(-g)) * u);  // swiglu.cu's expression and order
  }
}

__global__ void moe_combine_kernel(float* out, const float* y, const float* weight, const int32_t* expert,
                                   const int32_t* slot, const float* shared, const float* shared_gate, int k,
                                   int64_t H) {
  const int64_t t = blockIdx.x;
  int order[kMaxK];  // the token's picks in increasing expert index (k is small: insertion sort per thread)
  for (int j = 0; j < k; ++j) {
    int m = j;
    while (m > 0 && expert[t * k + order[m - 1]] > expert[t * k + j]) {
      order[m] = order[m - 1];
      --m;
    }
    order[m] = j;
  }
  float s = 0.0f;
  if (shared_gate != nullptr) s = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(shared_gate[t]))));
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int64_t i = t * k + order[j];
      acc = __fadd_rn(acc, __fmul_rn(y[static_cast<int64_t>(slot[i]) * H + h], weight[i]));
    }
    if (shared != nullptr)  // gated (Qwen3.5-MoE / Qwen3-Next) or not (bailing)
      acc = __fadd_rn(acc, shared_gate != nullptr ? __fmul_rn(s, shared[t * H + h]) : shared[t * H + h]);
    out[t * H + h] = acc;
  }
}

unsigned row_threads(int64_t H) { return static_cast<unsigned>(std::min<int64_t>(256, ((H + 31) / 32) * 32)); }

}  // namespace

void moe_route_cuda(int32_t* expert, float* weight, float* probs, const float* logits, int64_t T, int64_t E, int64_t k,
                    bool norm_topk_prob, cudaStream_t stream) {
  HLM_CHECK_INPUT(E > 0 && E <= kMoeMaxExperts && k > 0 && k <= E && k <= kMoeMaxTopK, "moe route on CUDA: ", E,
                  " experts, top_k ", k, " (at most ", kMoeMaxExperts, " experts and top_k ", kMoeMaxTopK, ")");
  if (T == 0) return;
  const auto blocks = static_cast<unsigned>((T + kRouteWarps - 1) / kRouteWarps);
  moe_route_kernel<<<blocks, kRouteWarps * 32, 0, stream>>>(expert, weight, probs, logits, T, static_cast<int>(E),
                                                            static_cast<int>(k), norm_topk_prob);
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_route_sigmoid_grouped_cuda(int32_t* expert, float* weight, float* scores, const float* logits,
                                    const float* expert_bias, int64_t T, int64_t E, int64_t k, int64_t n_group,
                                    int64_t topk_group, bool norm_topk_prob, float routed_scaling,
                                    cudaStream_t stream) {
  const int64_t per = n_group > 0 ? E / n_group : 0;
  HLM_CHECK_INPUT(E > 0 && E <= kMoeMaxExperts && k > 0 && k <= kMoeMaxTopK && n_group > 0 && E % n_group == 0 &&
                      per >= 2 && topk_group >= 1 && topk_group <= n_group && k <= topk_group * per,
                  "moe route (sigmoid, grouped) on CUDA: top_k ", k, " of ", E, " experts in ", n_group, " groups, ",
                  topk_group, " kept (at most ", kMoeMaxExperts, " experts and top_k ", kMoeMaxTopK, ")");
  if (T == 0) return;
  const auto blocks = static_cast<unsigned>((T + kRouteWarps - 1) / kRouteWarps);
  moe_route_sigmoid_grouped_kernel<<<blocks, kRouteWarps * 32, 0, stream>>>(
      expert, weight, scores, logits, expert_bias, T, static_cast<int>(E), static_cast<int>(k),
      static_cast<int>(n_group), static_cast<int>(topk_group), norm_topk_prob, routed_scaling);
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_dispatch_cuda(int32_t* counts, int32_t* offsets, int32_t* perm, int32_t* slot, const int32_t* expert,
                       int64_t T, int64_t k, int64_t E, cudaStream_t stream) {
  HLM_CHECK_INPUT(E > 0 && T * k < (int64_t{1} << 31), "moe dispatch on CUDA: ", T * k, " picks, ", E, " experts");
  const auto blocks = static_cast<unsigned>(E);
  moe_count_kernel<<<blocks, kDispatchThreads, 0, stream>>>(counts, expert, T * k);
  HLM_CUDA_CHECK_LAUNCH();
  moe_place_kernel<<<blocks, kDispatchThreads, 0, stream>>>(offsets, perm, slot, counts, expert, T * k,
                                                            static_cast<int>(E));
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_gather_rows_cuda(float* dst, const float* x, const int32_t* perm, int64_t T, int64_t k, int64_t H,
                          cudaStream_t stream) {
  if (T * k == 0) return;
  moe_gather_kernel<float><<<static_cast<unsigned>(T * k), row_threads(H), 0, stream>>>(dst, x, perm, k, H);
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_gather_rows_bf16_cuda(__nv_bfloat16* dst, const float* x, const int32_t* perm, int64_t T, int64_t k,
                               int64_t H, cudaStream_t stream) {
  if (T * k == 0) return;
  moe_gather_kernel<__nv_bfloat16><<<static_cast<unsigned>(T * k), row_threads(H), 0, stream>>>(dst, x, perm, k, H);
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_swiglu_cuda(float* h, const float* gu, int64_t R, int64_t F, cudaStream_t stream) {
  if (R * F == 0) return;
  moe_swiglu_kernel<float><<<cuda::grid_blocks(R * F), cuda::kElementwiseThreads, 0, stream>>>(h, gu, R, F);
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_swiglu_bf16_cuda(__nv_bfloat16* h, const float* gu, int64_t R, int64_t F, cudaStream_t stream) {
  if (R * F == 0) return;
  moe_swiglu_kernel<__nv_bfloat16><<<cuda::grid_blocks(R * F), cuda::kElementwiseThreads, 0, stream>>>(h, gu, R, F);
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_combine_cuda(float* out, const float* y, const float* weight, const int32_t* expert, const int32_t* slot,
                      const float* shared, const float* shared_gate, int64_t T, int64_t k, int64_t H,
                      cudaStream_t stream) {
  HLM_CHECK_INPUT(k > 0 && k <= kMoeMaxTopK, "moe combine on CUDA: top_k ", k);
  if (T == 0) return;
  moe_combine_kernel<<<static_cast<unsigned>(T), row_threads(H), 0, stream>>>(out, y, weight, expert, slot, shared,
                                                                              shared_gate, static_cast<int>(k), H);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
