// Depthwise causal conv (+ SiLU) on CUDA: launchers for the contract in causal_conv1d.h (packed sequences with
// cu_seqlens, optional conv state in and out; same formulas, aliasing rules and overwrite semantics), f32, raw device
// pointers (cu_seqlens too), queued on `stream`, no synchronization.
// cu_seqlens must satisfy the contract (cu[0] = 0, non-decreasing, cu[N] = T); the kernels do not check it (the CPU
// reference throws on a bad one; check on the host before uploading).
// Kernels (causal_conv1d.cu): tiles of 32·V channels × causal_conv1d_cuda_runs_per_tile() runs of R consecutive tokens
// (causal_conv1d_cuda_tiling); each thread walks one run of V channels (V = 4, 16-byte rows, when K == 4, C % 4 == 0
// and x, y / dy, dx and the workspace are 16-byte aligned; else V = 1) with the last K inputs in registers, its rows
// streamed in by cp.async. The backward is one fused pass (dpre = dy·silu'(pre) stays in registers, dx and the dw
// partials come from the same walk) plus a small kernel that adds the dw partials. V and the channel tiling change no
// result bit (every per-channel operation and its order depend only on T).
// Numerics (the CPU reference accumulates in double): each pre-activation is a K-term fp32 FMA chain in tap order;
// silu(p) = p / (1 + e^-p) with expf (≤ 2 ulp); silu'(p) = σ(p)·(1 + p·σ(−p)) with σ(p) = 1/(1 + e^-p) and
// σ(−p) = e^-p·σ(p) (one expf; no 1 − σ cancellation); dx is a K-term FMA chain in tap order. dw is deterministic
// (fixed order, no atomics): per (run, channel, tap) an FMA chain over the run's R tokens in order, then the runs of a
// tile added in run order, then the tiles added in tile order; its longest chain of fp32 roundings is
// causal_conv1d_cuda_dw_path_length(T). State copies are exact.
// Limits: kernel ≤ causal_conv1d_cuda_max_kernel() (GDN uses 4: the 4-channel path; K ≤ 4 and K ≤ 8 have
// register-window fast paths, larger K runs the same code with a 64-slot window, slower).
// Shapes: x, y, dy, dx [T, C]; w, dw [C, K]; state_in, state_out, d_state_in [N, C, K-1]; cu_seqlens int64 [N+1].
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct CausalConv1dCudaParams {
  int64_t total_tokens = 0;  // T
  int64_t channels = 0;      // C
  int64_t kernel = 0;        // K ≥ 1
  int64_t n_seqs = 0;        // N
  bool silu = true;
};

constexpr int64_t causal_conv1d_cuda_max_kernel() { return 64; }

// Tiling of the token axis (the tests derive the dw tolerance from it): a block covers runs_per_tile() runs of
// run_tokens consecutive tokens; run_tokens grows past 32 only to keep tiles ≤ 256 (which bounds the dw partials and
// the serial sum of the finishing kernel).
constexpr int64_t causal_conv1d_cuda_runs_per_tile() { return 4; }

struct CausalConv1dCudaTiling {
  int64_t run_tokens = 0;  // R: tokens one thread walks
  int64_t tiles = 0;       // ceil(T / (R · runs_per_tile)): blocks along the token axis
};

constexpr CausalConv1dCudaTiling causal_conv1d_cuda_tiling(int64_t total_tokens) {
  constexpr int64_t kMinRun = 32, kMaxTiles = 256, Y = causal_conv1d_cuda_runs_per_tile();
  const int64_t need = (total_tokens + Y * kMaxTiles - 1) / (Y * kMaxTiles);
  CausalConv1dCudaTiling t;
  t.run_tokens = need > kMinRun ? need : kMinRun;
  t.tiles = (total_tokens + t.run_tokens * Y - 1) / (t.run_tokens * Y);
  return t;
}

// Longest chain of fp32 roundings behind one dw element: R FMAs over a run, runs_per_tile − 1 additions over the
// runs of a tile, tiles − 1 additions over the tiles (counted as R + runs_per_tile + tiles, an upper bound).
constexpr int64_t causal_conv1d_cuda_dw_path_length(int64_t total_tokens) {
  const CausalConv1dCudaTiling t = causal_conv1d_cuda_tiling(total_tokens);
  return t.run_tokens + causal_conv1d_cuda_runs_per_tile() + t.tiles;
}

// y = [silu](conv(x)); y may not alias x. state_out (nullable) receives each sequence's last K-1 raw inputs and may
// alias state_in (nullable = zeros).
void causal_conv1d_forward_cuda(float* y, float* state_out, const float* x, const float* w, const float* state_in,
                                const int64_t* cu_seqlens, const CausalConv1dCudaParams& p, cudaStream_t stream);

// A GDN layer's q or k: y = [silu](conv(x)) as causal_conv1d_forward_cuda (no state in or out), and yn = y with each
// row of head_dim channels L2-normalized as l2norm_forward_cuda(yn, y, {T·C / head_dim, head_dim, eps}) does it: the
// same bits as those two launches, in ONE launch where causal_conv1d_l2norm_fusable (head_dim 128, K 4, C a multiple of
// 128, y, yn and x 16-byte aligned, HLM_CONV_L2NORM not off), else the two launches. The fused form saves the l2norm's
// read of y and its launch (at the 4B student's [8,192, 4,096] rows, 134 MB per call). y, yn and x distinct.
void causal_conv1d_l2norm_forward_cuda(float* y, float* yn, const float* x, const float* w, const int64_t* cu_seqlens,
                                       const CausalConv1dCudaParams& p, int64_t head_dim, float eps,
                                       cudaStream_t stream);
bool causal_conv1d_l2norm_fusable(const CausalConv1dCudaParams& p, int64_t head_dim, const void* y, const void* yn,
                                  const void* x);
// Its backward: dy_n is the gradient of yn, y the forward's y; dx and dw (OVERWRITTEN, dw nullable) of the conv from
// the l2norm's input gradient. Where the fusion applies (as above, with dy_n and dx 16-byte aligned too) ONE launch
// (plus the dw finish) that takes dy_n through the l2norm's backward per token with y recomputed from x (y unread):
// the bits of l2norm_backward_cuda(dy_n, dy_n, y, {T·C / head_dim, head_dim, eps}) followed by
// causal_conv1d_backward(_bf16_dx)_cuda on dy_n without a state; else exactly those two. dy_n is clobbered. workspace as
// causal_conv1d_backward_cuda_workspace_bytes(p).
void causal_conv1d_l2norm_backward_cuda(float* dx, float* dw, float* dy_n, const float* y, const float* x,
                                        const float* w, const int64_t* cu_seqlens, const CausalConv1dCudaParams& p,
                                        int64_t head_dim, float eps, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream);
void causal_conv1d_l2norm_backward_bf16_dx_cuda(__nv_bfloat16* dx, float* dw, float* dy_n, const float* y,
                                                const float* x, const float* w, const int64_t* cu_seqlens,
                                                const CausalConv1dCudaParams& p, int64_t head_dim, float eps,
                                                void* workspace, size_t workspace_bytes, cudaStream_t stream);
// 1 | 0 sets the fused forms on or off for the process, −1 goes back to HLM_CONV_L2NORM (tests, bench A/B).
void causal_conv1d_cuda_set_l2norm_fused(int on);
// How many fused forwards and backwards this process issued (host calls, not graph replays): the tests' proof that the
// fusion engaged.
int64_t causal_conv1d_l2norm_fused_launches();

// One decode step: every sequence has exactly one new token (p.total_tokens == p.n_seqs; token n belongs to sequence
// n). y [N, C] = [silu](conv) as causal_conv1d_forward_cuda computes it, bit for bit; `state` [N, C, K−1] (nullable =
// zeros, K = 1: unused) is read and advanced in place (one kernel, no sequence search: the decode path of
// infer/cuda/cuda_engine.cpp).
void causal_conv1d_decode_cuda(float* y, float* state, const float* x, const float* w,
                               const CausalConv1dCudaParams& p, cudaStream_t stream);

// The backward's interior walk: a run whose tokens, halo included, lie in one sequence (K = 4 on the 4-channel path)
// is walked without the sequence cursor and masks — the same operations in the same order, so the same bits, with
// fewer instructions. On by default (HLM_CONV_INTERIOR=off turns it off); 1 | 0 set it for the process, −1 goes back
// to the environment (bench_cuda_kernels conv times both; tests compare the paths).
void causal_conv1d_cuda_set_interior_walk(int on);

// Bytes of device scratch causal_conv1d_backward_cuda needs: the dw partials, tiles · K · C floats (0 when T = 0).
size_t causal_conv1d_backward_cuda_workspace_bytes(const CausalConv1dCudaParams& p);

// dx OVERWRITTEN; dw [C, K] OVERWRITTEN (nullptr = not wanted); d_state_in OVERWRITTEN when both it and state_in are
// given. No output may alias an input. `workspace` holds causal_conv1d_backward_cuda_workspace_bytes(p) bytes, used
// only by work on `stream`.
void causal_conv1d_backward_cuda(float* dx, float* dw, float* d_state_in, const float* dy, const float* x,
                                 const float* w, const float* state_in, const int64_t* cu_seqlens,
                                 const CausalConv1dCudaParams& p, void* workspace, size_t workspace_bytes,
                                 cudaStream_t stream);
// The same with dx rounded to bf16 (the GDN layer's bf16 compute mode, where the q/k/v projections' backward
// products are dx's one reader): dx the bits of casting causal_conv1d_backward_cuda's dx (cast_f32_to_bf16_cuda),
// dw and d_state_in its bits. The vector path's alignment rule (above) applies to the bf16 dx pointer as it is.
void causal_conv1d_backward_bf16_dx_cuda(__nv_bfloat16* dx, float* dw, float* d_state_in, const float* dy,
                                         const float* x, const float* w, const float* state_in,
                                         const int64_t* cu_seqlens, const CausalConv1dCudaParams& p, void* workspace,
                                         size_t workspace_bytes, cudaStream_t stream);

}  // namespace hlm
