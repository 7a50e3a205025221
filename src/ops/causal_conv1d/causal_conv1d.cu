// Depthwise causal conv CUDA kernels and launchers (contract: causal_conv1d.h, causal_conv1d_cuda.h).
// The ops are memory-bound (a few flops per element; at the GDN training shape, T 4096 × C 4096 × K 4, the forward
// must move 134 MB and the backward 201 MB), so the kernels are built around reading each x / dy element about once,
// in wide coalesced rows, with many rows in flight and few instructions per element:
//   tiling:   a block is kThreadsX threads along the channels (each thread owns V consecutive channels: V = 4 with
//             16-byte rows when K == 4, C % 4 == 0 and the row pointers are 16-byte aligned, else V = 1; a warp
//             covers 32·V consecutive floats of a token row) × kRunsPerTile runs (threadIdx.y) of R consecutive
//             tokens (causal_conv1d_cuda_tiling). Each thread walks its run keeping the last K inputs of each of its
//             channels in registers (a window of KMAX slots; the kernels are templated on KMAX = 4, 8 or 64 ≥ K; the
//             V = 4 kernels also on K == KMAX = 4, so every tap index and mask is a constant), so x is read once
//             plus a K−1 halo before the run. The run's sequence is found once (a binary search of cu_seqlens at the
//             run's first token), then the cursor steps forward when the walk reaches a sequence end (empty
//             sequences skipped); at a sequence start the window is refilled from state_in (or zeros). The token
//             logic (sequence ends, halo, masks) is the same for the whole warp, so it never diverges.
//   loads:    each thread streams its rows (x, and dy in the backward) through its own kRing slots of a shared
//             ring with cp.async, kRing rows ahead of the walk (no registers held while they are in flight; the
//             thread reads only its own slots, after cp.async.wait_group, so there is no barrier).
//   forward:  y = [silu](pre) per token of the run; pre is the K-term fmaf chain in tap order (zeros or state_in
//             before the sequence start), silu(p) = p / (1 + expf(−p)). One thread per (sequence, channel) builds
//             state_out in registers before writing it (so it may alias state_in).
//   backward: one fused pass per run: dpre = dy · silu'(pre) (pre recomputed as in the forward) is kept in a
//             K-slot register window, never written to memory; the walk continues K−1 tokens past the run (the
//             halo, recomputing dpre there, only inside the sequence of the run's last token) so that
//             dx[t] = Σ_j w[j]·dpre[t+K−1−j] (taps inside t's sequence only, fmaf chain in tap order) is complete
//             for every token of the run. The same pass accumulates dw: per tap j an fmaf chain
//             Σ_t dpre[t]·in(t−K+1+j) over the run's tokens in order; the kRunsPerTile runs of a block are added in
//             run order through shared memory into one partial per (tile, tap, channel) in the workspace, and
//             conv_dw_finish_kernel adds the partials in tile order into dw (overwritten). No atomics: dw is
//             deterministic and independent of the GPU model, of V and of the channel tiling (the per-channel
//             operations and their order depend only on T). d_state_in: one thread per (sequence, channel, slot)
//             recomputes the dpre of the sequence's first K−1 tokens from dy, x, w, state_in (tiny).
//             Interior runs (K == KMAX and the run with its halo inside one sequence: every run of the training
//             shapes but those ending a sequence) take a walk without the cursor, the live test and the masks, in
//             four loops whose per-token conditions are constants (ncu on an H100, session 41: the general walk issued
//             0.63 warp instructions per scheduler cycle at 71 % of DRAM bandwidth; on the H200's wider memory it is
//             issue-bound). Same operations, same order: the same bits (HLM_CONV_INTERIOR=off for A/B).
// Every per-channel operation and its order is the same for V = 1 and V = 4 (y, dx and dw bit-identical across the
// paths) and as in the kernels before (one channel per thread, batches of 8 register loads), except dpre_of, which
// now takes σ(−p) from the same exponential as σ(p): y, and dx and dw without SiLU, are bit-identical to theirs.
// That version reached 55 % (forward) and 23 % (backward) of the H200's 4.27 TB/s (bench_memory_ops): 4-byte
// accesses with 64-bit index math per element, and loads issued in batches of 8 rows that then sat idle while the
// batch was computed (the backward, at 94 registers in 256-thread blocks, ran 16 warps per SM with at most 32 KB in
// flight per SM, and only while a batch loaded).
// bf16 dx (causal_conv1d_backward_bf16_dx_cuda): the same kernel with the dx type as a template parameter, each
// fp32 dx value rounded at its store by bf16_round.cuh (cast_f32_to_bf16_cuda's rounding): the bits of the cast.
// The GDN q/k's per-head l2norm (its consumer) is fused in both directions where a head is one warp's 128 channels
// (conv_forward_kernel / conv_backward_kernel with kL2; causal_conv1d_l2norm_*_cuda), the bits of the two launches.
// Non-goals for now: bf16 inputs (halves the bytes, changes the layer's contract), fusing the conv with the projection.
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/warp_rows.cuh"
#include "core/env_switch.h"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/causal_conv1d/conv_decode.cuh"
#include "ops/l2norm/l2norm_cuda.h"

namespace hlm {

namespace {

constexpr int64_t kMaxKernel = causal_conv1d_cuda_max_kernel();
constexpr int kThreadsX = 32;                                                         // blockDim.x
constexpr int kRunsPerTile = static_cast<int>(causal_conv1d_cuda_runs_per_tile());  // blockDim.y
constexpr int kTileThreads = kThreadsX * kRunsPerTile;
constexpr int kRing = 8;  // rows each thread keeps in flight (cp.async into its own slots of a shared ring)
static_assert((kRing & (kRing - 1)) == 0, "the ring slot is k & (kRing − 1)");
constexpr int kFinishUnroll = 16;        // partials conv_dw_finish_kernel loads before adding them
constexpr int kDecodeConvThreads = 256;  // conv_decode_kernel's block
constexpr int kFinishThreads = 128;

struct Geometry {
  int64_t T, C, K, N;
};

// The backward's interior walk (conv_backward_kernel), on by default; HLM_CONV_INTERIOR=off or
// causal_conv1d_cuda_set_interior_walk(0) sends every run through the general walk (A/B runs; the same bits).
OverridableSwitch g_interior_walk{"HLM_CONV_INTERIOR", true};
// The conv + per-head l2norm in one launch (causal_conv1d_l2norm_forward_cuda), on by default; HLM_CONV_L2NORM=off or
// causal_conv1d_cuda_set_l2norm_fused(0) gives the two launches back (A/B runs; the same bits).
OverridableSwitch g_l2norm_fused{"HLM_CONV_L2NORM", true};
std::atomic<int64_t> g_l2norm_fused_launches{0};  // causal_conv1d_l2norm_fused_launches
constexpr int64_t kL2HeadDim = kThreadsX * 4;  // the fused l2norm's head: one warp of 4-channel lanes

// Index of the sequence holding token t: the last s with cu[s] ≤ t (empty sequences are skipped).
__device__ int64_t sequence_of(const int64_t* cu, int64_t n_seqs, int64_t t) {
  int64_t lo = 0, hi = n_seqs + 1;  // first index with cu[i] > t lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (cu[mid] > t)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo - 1;
}

// The sequence s = [start, end) holding the token a walk is at.
struct SeqCursor {
  int64_t s, start, end;
};

__device__ SeqCursor seq_cursor_at(const int64_t* cu, int64_t n_seqs, int64_t t) {
  const int64_t s = sequence_of(cu, n_seqs, t);
  return {s, cu[s], cu[s + 1]};
}

// Moves the cursor to the sequence starting at t (t == q.end < T), skipping empty sequences.
__device__ void seq_cursor_advance(SeqCursor& q, const int64_t* cu, int64_t t) {
  do {
    ++q.s;
  } while (cu[q.s + 1] <= t);
  q.start = cu[q.s];
  q.end = cu[q.s + 1];
}

// Raw input at absolute position p ≥ start − (K−1) for a token of sequence s.
__device__ __forceinline__ float input_at(const float* x, const float* state_in, int64_t p, int64_t start, int64_t s,
                                          int64_t c, const Geometry& g) {
  if (p >= start) return x[p * g.C + c];
  if (state_in == nullptr) return 0.0f;
  const int64_t Km1 = g.K - 1;
  return state_in[(s * g.C + c) * Km1 + (Km1 + p - start)];
}

__device__ float pre_activation(const float* x, const float* w, const float* state_in, int64_t t, int64_t start,
                                int64_t s, int64_t c, const Geometry& g) {
  float acc = 0.0f;
  for (int64_t j = 0; j < g.K; ++j)
    acc = fmaf(w[c * g.K + j], input_at(x, state_in, t - (g.K - 1) + j, start, s, c, g), acc);
  return acc;
}

using cuda::conv_silu;  // conv_decode.cuh: shared with the fused GDN decode preparation

// dy · silu'(pre) with silu'(p) = σ(p)·(1 + p·σ(−p)), from one exponential: e = e^−p, σ(p) = 1/(1 + e) and
// σ(−p) = e·σ(p), taken as 1 where e overflows (σ(p) = 0; e·σ(p) would be ∞·0). No 1 − σ cancellation; σ(−p) carries
// expf's error times σ(p) plus three roundings (≤ 7u, one more than 1/(1 + e^p)), for half the transcendental work
// (the backward's largest instruction cost).
__device__ __forceinline__ float dpre_of(float dy, float pre) {
  const float e = expf(-pre);
  const float sp = 1.0f / (1.0f + e);
  const float sm = sp > 0.0f ? e * sp : 1.0f;  // NaN pre: sp is NaN and so is the result
  float d = dy;
  d *= sp * (1.0f + pre * sm);
  return d;
}

// ---- Rows of V consecutive channels (V = 4: one 16-byte access; the caller guarantees the alignment).

template <int V>
__device__ __forceinline__ void load_row(float (&out)[V], const float* p) {
  if constexpr (V == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = p[v];
  }
}

template <int V>
__device__ __forceinline__ void store_row(float* p, const float (&in)[V]) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(in[0], in[1], in[2], in[3]);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) p[v] = in[v];
  }
}

// The same row rounded to bf16 as cast_f32_to_bf16_cuda rounds (V = 4: one 8-byte store).
template <int V>
__device__ __forceinline__ void store_row(__nv_bfloat16* p, const float (&in)[V]) {
  if constexpr (V == 4) {
    const uint32_t lo = cuda::f32_to_bf16_bits(in[0]) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(in[1])) << 16);
    const uint32_t hi = cuda::f32_to_bf16_bits(in[2]) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(in[3])) << 16);
    *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) reinterpret_cast<uint16_t*>(p)[v] = cuda::f32_to_bf16_bits(in[v]);
  }
}

// ---- Per-thread rings of rows in shared memory: slot k of thread tid holds V floats at
// ring[(k · kTileThreads + tid) · V] (consecutive threads, consecutive 4V-byte chunks). Each thread copies its own
// rows in with cp.async (no registers held while they are in flight), one commit group per row, and reads only its
// own slots after cp.async.wait_group, so no barrier is needed.

template <int V>
__device__ __forceinline__ int ring_thread_offset() {
  return static_cast<int>(threadIdx.y * kThreadsX + threadIdx.x) * V;
}
template <int V>
__device__ __forceinline__ int ring_slot_offset(int k) {
  return k * kTileThreads * V;
}

template <int V>
__device__ __forceinline__ void cp_async_row(float* smem, const float* gmem) {
  static_assert(V == 1 || V == 4, "rows of 4 or 16 bytes");
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (V == 4)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- Register windows. A window of KMAX slots holds positions u−KMAX+1 … u (slot KMAX−1 = the newest); only the
// slots i ≥ KMAX − K are taps (tap j = slot KMAX − K + j), the lower ones are never read.

template <int KMAX, typename T>
__device__ __forceinline__ void shift_in(T (&win)[KMAX], T v) {
#pragma unroll
  for (int i = 0; i < KMAX - 1; ++i) win[i] = win[i + 1];
  win[KMAX - 1] = v;
}

// The window just before token u of sequence q enters it: slot i holds in(u − KMAX + i) for the slots that are taps
// after the next shift_in (i ≥ KMAX − K + 1), 0 elsewhere. At a sequence start (q.start == u) no x is read.
template <int KMAX>
__device__ void fill_window(float (&win)[KMAX], const float* x, const float* state_in, int64_t u, const SeqCursor& q,
                            int64_t c, int K, const Geometry& g) {
  win[0] = 0.0f;
#pragma unroll
  for (int i = 1; i < KMAX; ++i)
    win[i] = i >= KMAX - K + 1 ? input_at(x, state_in, u - KMAX + i, q.start, q.s, c, g) : 0.0f;
}

// Weights in window layout: wr[KMAX − K + j] = w[c, j], 0 below.
template <int KMAX>
__device__ void load_taps_slots(float (&wr)[KMAX], const float* w, int64_t c, int K) {
#pragma unroll
  for (int i = 0; i < KMAX; ++i) wr[i] = i >= KMAX - K ? w[c * K + (i - (KMAX - K))] : 0.0f;
}

// Weights in tap layout: wd[j] = w[c, j] for j < K, 0 above.
template <int KMAX>
__device__ void load_taps(float (&wd)[KMAX], const float* w, int64_t c, int K) {
#pragma unroll
  for (int j = 0; j < KMAX; ++j) wd[j] = j < K ? w[c * K + j] : 0.0f;
}

// pre = Σ_j w[j]·in(u−K+1+j): the fmaf chain of pre_activation, in tap order, from the window.
template <int KMAX>
__device__ __forceinline__ float window_pre(const float (&wr)[KMAX], const float (&win)[KMAX], int K) {
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < KMAX; ++i)
    if (i >= KMAX - K) acc = fmaf(wr[i], win[i], acc);
  return acc;
}

// Channel origin and run of this thread: c0 = the first of its V channels, [t0, min(t0 + R, T)) its run.
template <int V>
__device__ __forceinline__ int64_t thread_channel() {
  return (static_cast<int64_t>(blockIdx.x) * kThreadsX + threadIdx.x) * V;
}
__device__ __forceinline__ int64_t thread_run_start(int64_t run_tokens) {
  return (static_cast<int64_t>(blockIdx.y) * kRunsPerTile + threadIdx.y) * run_tokens;
}

// ---- Forward

// KMAX: the window; EXACT: K == KMAX (constant taps); V: channels per thread.
// kL2 (V = 4, C % 128 == 0: a warp's 32 lanes × 4 channels are one head of 128): each token's y row of the head also
// L2-normalized into yn, as l2norm_forward_cuda's warp path does it (its float4 slices are the lanes' 4 channels in the
// same order: Σy² as an fmaf chain over the 4, warp_sum's xor tree, 1 / sqrtf(Σ + eps), y · inv): the same bits.
template <int KMAX, bool EXACT, int V, bool kL2 = false>
__global__ void __launch_bounds__(kTileThreads)
    conv_forward_kernel(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ state_in, const int64_t* __restrict__ cu, Geometry g,
                        int64_t run_tokens, bool silu, float* __restrict__ yn = nullptr, float l2_eps = 0.0f) {
  __shared__ __align__(16) float ring[kRing * kTileThreads * V];
  const int K = EXACT ? KMAX : static_cast<int>(g.K);
  const int64_t c0 = thread_channel<V>(), t0 = thread_run_start(run_tokens), C = g.C;
  if (c0 >= C || t0 >= g.T) return;  // no barrier below
  const int n = static_cast<int>((t0 + run_tokens < g.T ? t0 + run_tokens : g.T) - t0);  // tokens of the run
  float* const slots = ring + ring_thread_offset<V>();
  const float* xnext = x + t0 * C + c0;  // the next row to copy into the ring
#pragma unroll
  for (int k = 0; k < kRing; ++k) {  // rows t0 … t0 + kRing − 1 in flight (one group each)
    if (k < n) cp_async_row<V>(slots + ring_slot_offset<V>(k), xnext);
    xnext += C;
    cp_async_commit();
  }
  float wr[V][KMAX], win[V][KMAX];
#pragma unroll
  for (int v = 0; v < V; ++v) load_taps_slots(wr[v], w, c0 + v, K);
  SeqCursor q = seq_cursor_at(cu, g.N, t0);
#pragma unroll
  for (int v = 0; v < V; ++v) fill_window(win[v], x, state_in, t0, q, c0 + v, K, g);
  float* yp = y + t0 * C + c0;
  float* ynp = kL2 ? yn + t0 * C + c0 : nullptr;
#pragma unroll 4
  for (int k = 0; k < n; ++k) {
    const int64_t u = t0 + k;
    float* const slot = slots + ring_slot_offset<V>(k & (kRing - 1));
    cp_async_wait<kRing - 1>();  // row u has landed (groups 0 … k complete)
    float xv[V];
    load_row(xv, slot);
    if (u == q.end) {  // a new sequence starts at u: its window comes from state_in (or zeros)
      seq_cursor_advance(q, cu, u);
#pragma unroll
      for (int v = 0; v < V; ++v) fill_window(win[v], x, state_in, u, q, c0 + v, K, g);
    }
    float out[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      shift_in(win[v], xv[v]);
      const float pre = window_pre(wr[v], win[v], K);
      out[v] = silu ? conv_silu(pre) : pre;
    }
    store_row(yp, out);
    yp += C;
    if constexpr (kL2) {  // every lane of the warp is here (the launcher's C % 128 == 0; the token logic is uniform)
      float ss = 0.0f;
#pragma unroll
      for (int v = 0; v < V; ++v) ss = fmaf(out[v], out[v], ss);
      ss = cuda::warp_sum(ss);
      const float inv = 1.0f / sqrtf(ss + l2_eps);
#pragma unroll
      for (int v = 0; v < V; ++v) out[v] = out[v] * inv;
      store_row(ynp, out);
      ynp += C;
    }
    // The slot is refilled only after its row was consumed (the store above depends on it).
    if (k + kRing < n) cp_async_row<V>(slot, xnext);
    xnext += C;
    cp_async_commit();
  }
}

__global__ void conv_state_out_kernel(float* state_out, const float* x, const float* state_in, const int64_t* cu,
                                      Geometry g) {
  const int64_t Km1 = g.K - 1, n = g.N * g.C;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < n;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = item / g.C, c = item - s * g.C, start = cu[s], end = cu[s + 1];
    float row[kMaxKernel - 1];  // the new state row, read completely before writing (state_out may alias state_in)
    for (int64_t i = 0; i < Km1; ++i) row[i] = input_at(x, state_in, end - Km1 + i, start, s, c, g);
    for (int64_t i = 0; i < Km1; ++i) state_out[item * Km1 + i] = row[i];
  }
}

// Decode: every sequence holds exactly one token (T == N, cu_seqlens = 0, 1, ..., N), so token n is sequence n and
// no search is needed. One thread per (sequence, channel): the K−1 state slots and the new input are read into
// registers, y = [silu](the same fmaf chain in tap order as conv_forward_kernel / pre_activation), and the state
// advances by one slot in the same thread (so state_out may alias state_in). Bit for bit the general path's y and
// state_out (tests/cuda/cases_causal_conv1d.cpp).
template <int KMAX>
__global__ void conv_decode_kernel(float* y, float* state_out, const float* __restrict__ x,
                                   const float* __restrict__ w, const float* state_in, Geometry g, bool silu) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // n · C + c
  if (item >= g.N * g.C) return;
  const float acc = cuda::conv_decode_pre<KMAX>(x, w, state_in, state_out, item, item % g.C, g.K);
  y[item] = silu ? conv_silu(acc) : acc;
}


// ---- Backward

// dx for the run [t0, t1) of channels c0 … c0+V−1, and (dw_partial != nullptr) the tile's dw partials
// dw_partial[(blockIdx.y · K + j) · C + c] = Σ_{runs of the tile, in order} (Σ_{t in run, in order} dpre[t]·in(t−K+1+j)).
// kL2 (V = 4, C % 128 == 0, as the forward's): dy is the gradient of the per-head l2norm of y = [silu](pre); each live
// token's dy row of the head first goes through l2norm_backward_cuda's warp-path formula with y recomputed from pre
// (y·inv, Σy² and Σy·dy as one interleaved fmaf chain over the lane's 4 channels, warp_sum's xor tree, dy' =
// inv·(dy − y·inv·(inv·Σy·dy))): the bits of l2norm_backward_cuda on the forward's y, then of this kernel on dy'.
template <int KMAX, bool EXACT, int V, typename DX, bool kL2 = false>
__global__ void __launch_bounds__(kTileThreads)
    conv_backward_kernel(DX* __restrict__ dx, float* __restrict__ dw_partial, const float* __restrict__ dy,
                         const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ state_in, const int64_t* __restrict__ cu, Geometry g,
                         int64_t run_tokens, bool silu, bool interior_walk, float l2_eps = 0.0f) {
  __shared__ __align__(16) float ring_x[kRing * kTileThreads * V];
  __shared__ __align__(16) float ring_dy[kRing * kTileThreads * V];
  __shared__ __align__(16) float red[kRunsPerTile][kThreadsX * V];
  const int K = EXACT ? KMAX : static_cast<int>(g.K);
  const int64_t c0 = thread_channel<V>(), t0 = thread_run_start(run_tokens), C = g.C;
  float acc[V][KMAX];  // dw per tap, window layout (slot KMAX − K + j = tap j)
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int i = 0; i < KMAX; ++i) acc[v][i] = 0.0f;
  if (c0 < C && t0 < g.T) {  // no early return: the dw reduction below needs every thread of the block
    const int64_t t1 = t0 + run_tokens < g.T ? t0 + run_tokens : g.T;
    const int64_t u_end = t1 + K - 1;  // dx[t1 − 1] reads dpre up to t1 − 1 + K − 1
    const int n_walk = static_cast<int>(u_end - t0);                          // tokens walked
    const int n_rows = static_cast<int>((u_end < g.T ? u_end : g.T) - t0);  // rows loaded
    const int ring_off = ring_thread_offset<V>();
    float* const slots_x = ring_x + ring_off;
    float* const slots_dy = ring_dy + ring_off;
    const float* xnext = x + t0 * C + c0;  // the next rows to copy into the rings
    const float* dynext = dy + t0 * C + c0;
#pragma unroll
    for (int k = 0; k < kRing; ++k) {  // rows t0 … t0 + kRing − 1 in flight (one group each)
      if (k < n_rows) {
        cp_async_row<V>(slots_x + ring_slot_offset<V>(k), xnext);
        cp_async_row<V>(slots_dy + ring_slot_offset<V>(k), dynext);
      }
      xnext += C;
      dynext += C;
      cp_async_commit();
    }
    float wr[V][KMAX], wd[V][KMAX], win[V][KMAX], dwin[V][KMAX];
    int rem[KMAX];  // per dwin slot: min(end of its sequence − its position, KMAX); 0 = no dpre there
#pragma unroll
    for (int v = 0; v < V; ++v) {
      load_taps_slots(wr[v], w, c0 + v, K);  // with EXACT the same values as wd
      load_taps(wd[v], w, c0 + v, K);
#pragma unroll
      for (int i = 0; i < KMAX; ++i) dwin[v][i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < KMAX; ++i) rem[i] = 0;
    SeqCursor q = seq_cursor_at(cu, g.N, t0);
#pragma unroll
    for (int v = 0; v < V; ++v) fill_window(win[v], x, state_in, t0, q, c0 + v, K, g);
    DX* dxp = dx + t0 * C + c0;  // the next dx row to write (token t0, t0 + 1, …)
    // Pieces of a token's step shared by both walks below. A live token's dpre d from its dy row dv (the window holds
    // its input already); with kL2 dv is first taken back through the head's l2norm (every lane of the warp is here:
    // liveness is the same for the whole warp).
    const auto token_dpre = [&](const float (&dv)[V], float (&d)[V]) {
      if constexpr (kL2) {
        float pre[V], y[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          pre[v] = window_pre(wr[v], win[v], K);
          y[v] = silu ? conv_silu(pre[v]) : pre[v];
        }
        float ss = 0.0f, xg = 0.0f;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          ss = fmaf(y[v], y[v], ss);
          xg = fmaf(y[v], dv[v], xg);
        }
        ss = cuda::warp_sum(ss);
        xg = cuda::warp_sum(xg);
        const float inv = 1.0f / sqrtf(ss + l2_eps);
        const float y_dot_dy = inv * xg;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float yd = y[v] * inv;
          const float gv = inv * (dv[v] - yd * y_dot_dy);
          d[v] = silu ? dpre_of(gv, pre[v]) : gv;
        }
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          d[v] = dv[v];
          if (silu) d[v] = dpre_of(d[v], window_pre(wr[v], win[v], K));
        }
      }
    };
    // The dw terms of a run token (its dpre d with the window).
    const auto add_dw = [&](const float (&d)[V]) {
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int s = 0; s < KMAX; ++s)
          if (s >= KMAX - K) acc[v][s] = fmaf(d[v], win[v][s], acc[v][s]);
    };
    // dx of the token K − 1 behind the walk, now complete: tap j reads dpre[t + K−1−j] = dwin[KMAX − 1 − j], inside
    // t's sequence iff K−1−j < rem_t (rem_t ≥ K: every tap).
    const auto store_dx = [&](int rem_t) {
      float out[V];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < KMAX; ++j)
          if (j < K && K - 1 - j < rem_t) sum = fmaf(wd[v][j], dwin[v][KMAX - 1 - j], sum);
        out[v] = sum;
      }
      store_row(dxp, out);
      dxp += C;
    };
    // The slots are refilled only after their rows were consumed (every later store depends on them).
    const auto refill = [&](int k, int slot) {
      if (k + kRing < n_rows) {
        cp_async_row<V>(slots_x + slot, xnext);
        cp_async_row<V>(slots_dy + slot, dynext);
      }
      xnext += C;
      dynext += C;
      cp_async_commit();
    };
    // An interior run (the usual case; K == KMAX): every token walked, the halo included, lies in t0's sequence, so
    // no sequence end is met, every token is live and every dx tap of the run's tokens lies inside its sequence. The
    // walk then drops the cursor, the rem window and the masks; it does the general walk's operations in the same
    // order (bit-identical), with fewer instructions per token (the kernel is issue-bound on the H200).
    if (EXACT && interior_walk && t1 + K - 1 <= q.end) {
      // One token of the walk: the general loop's body below for a live token whose dx taps all lie inside its
      // sequence (rem ≥ K), with the token's two conditions (dw term: k < n; dx store: k ≥ K − 1) as constants.
      const auto step = [&](int k, auto accumulate, auto store) {
        const int slot = ring_slot_offset<V>(k & (kRing - 1));
        cp_async_wait<kRing - 1>();  // rows ≤ t0 + k have landed
        float xv[V], dv[V], d[V];
        load_row(xv, slots_x + slot);
        load_row(dv, slots_dy + slot);
#pragma unroll
        for (int v = 0; v < V; ++v) shift_in(win[v], xv[v]);
        token_dpre(dv, d);
        if constexpr (decltype(accumulate)::value) add_dw(d);
#pragma unroll
        for (int v = 0; v < V; ++v) shift_in(dwin[v], d[v]);
        if constexpr (decltype(store)::value) store_dx(KMAX);
        refill(k, slot);
      };
      constexpr std::true_type on{};
      constexpr std::false_type off{};
      const int n = static_cast<int>(t1 - t0);  // tokens of the run; the walk adds K − 1 (n_walk = n + K − 1)
      int k = 0;
      for (; k < K - 1 && k < n; ++k) step(k, on, off);  // no dx is complete yet
      for (; k < K - 1; ++k) step(k, off, off);          // a run shorter than K − 1 tokens
#pragma unroll 4
      for (; k < n; ++k) step(k, on, on);
      for (; k < n_walk; ++k) step(k, off, on);  // the halo: dpre past the run, for the run's last dx
    } else {
#pragma unroll 4
      for (int k = 0; k < n_walk; ++k) {
        const int64_t u = t0 + k;
        const int slot = ring_slot_offset<V>(k & (kRing - 1));
        cp_async_wait<kRing - 1>();  // rows ≤ u have landed (groups 0 … k complete)
        // dpre[u] is needed for tokens of the run (u < t1) and, past the run, only inside the sequence of t1 − 1
        // (the cursor no longer advances there; rows past T are never live since q.end ≤ T).
        bool live = false;
        if (u < t1) {
          if (u == q.end) {
            seq_cursor_advance(q, cu, u);
#pragma unroll
            for (int v = 0; v < V; ++v) fill_window(win[v], x, state_in, u, q, c0 + v, K, g);
          }
          live = true;
        } else {
          live = u < q.end;  // q.end ≤ T
        }
        float d[V];
        int r = 0;
#pragma unroll
        for (int v = 0; v < V; ++v) d[v] = 0.0f;
        if (live) {
          float xv[V], dv[V];
          load_row(xv, slots_x + slot);
          load_row(dv, slots_dy + slot);
#pragma unroll
          for (int v = 0; v < V; ++v) shift_in(win[v], xv[v]);
          token_dpre(dv, d);
          r = q.end - u < KMAX ? static_cast<int>(q.end - u) : KMAX;
          if (u < t1) add_dw(d);
        }
#pragma unroll
        for (int v = 0; v < V; ++v) shift_in(dwin[v], d[v]);  // dwin[KMAX − 1 − m] = dpre[u − m]
        shift_in(rem, r);
        if (u - (K - 1) >= t0) {  // dx of token t = u − (K−1) is now complete
          int rem_t = 0;          // rem of position t: slot KMAX − K
#pragma unroll
          for (int s = 0; s < KMAX; ++s)
            if (s == KMAX - K) rem_t = rem[s];
          store_dx(rem_t);
        }
        refill(k, slot);
      }
    }
  }
  if (dw_partial == nullptr) return;  // uniform over the block
#pragma unroll
  for (int s = 0; s < KMAX; ++s) {
    if (s < KMAX - K) continue;  // uniform over the block
    float mine[V];
#pragma unroll
    for (int v = 0; v < V; ++v) mine[v] = acc[v][s];
    store_row(&red[threadIdx.y][threadIdx.x * V], mine);
    __syncthreads();
    if (threadIdx.y == 0 && c0 < C) {
      float sum[V], part[V];
      load_row(sum, &red[0][threadIdx.x * V]);
      for (int r = 1; r < kRunsPerTile; ++r) {
        load_row(part, &red[r][threadIdx.x * V]);
#pragma unroll
        for (int v = 0; v < V; ++v) sum[v] += part[v];
      }
      const int64_t j = s - (KMAX - K);
      store_row(dw_partial + (static_cast<int64_t>(blockIdx.y) * K + j) * C + c0, sum);
    }
    __syncthreads();
  }
}

// dw[c, j] = Σ_tiles partial[tile, j, c] in tile order (overwrites dw); the loads of kFinishUnroll tiles are issued
// before they are added.
__global__ void __launch_bounds__(kFinishThreads)
    conv_dw_finish_kernel(float* __restrict__ dw, const float* __restrict__ partial, int64_t tiles, Geometry g) {
  const int64_t n = g.C * g.K, stride = g.K * g.C;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = idx / g.C, c = idx - j * g.C;
    const float* p = partial + idx;  // partial[(tile · K + j) · C + c] = p[tile · stride]
    float acc = 0.0f;
    int64_t tile = 0;
    for (; tile + kFinishUnroll <= tiles; tile += kFinishUnroll) {
      float b[kFinishUnroll];
#pragma unroll
      for (int i = 0; i < kFinishUnroll; ++i) b[i] = p[(tile + i) * stride];
#pragma unroll
      for (int i = 0; i < kFinishUnroll; ++i) acc += b[i];
    }
    for (; tile < tiles; ++tile) acc += p[tile * stride];
    dw[c * g.K + j] = acc;
  }
}

// d_state[s, c, i] = Σ_{m=0..i, m<len} w[c, i−m]·dpre[start+m, c], with dpre of the sequence's first tokens
// recomputed (pre as in the forward).
__global__ void conv_dstate_kernel(float* d_state, const float* dy, const float* x, const float* w,
                                   const float* state_in, const int64_t* cu, Geometry g, bool silu) {
  const int64_t Km1 = g.K - 1, n = g.N * g.C * Km1;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t item = idx / Km1, i = idx - item * Km1, s = item / g.C, c = item - s * g.C;
    const int64_t start = cu[s], len = cu[s + 1] - start;
    float acc = 0.0f;
    for (int64_t m = 0; m <= i && m < len; ++m) {
      const int64_t t = start + m;
      float d = dy[t * g.C + c];
      if (silu) d = dpre_of(d, pre_activation(x, w, state_in, t, start, s, c, g));
      acc = fmaf(w[c * g.K + i - m], d, acc);
    }
    d_state[idx] = acc;
  }
}

Geometry check_params(const CausalConv1dCudaParams& p) {
  HLM_CHECK(p.total_tokens >= 0 && p.channels > 0 && p.kernel >= 1 && p.n_seqs >= 0,
            "causal_conv1d_cuda: bad shape T=", p.total_tokens, " C=", p.channels, " K=", p.kernel, " N=", p.n_seqs);
  HLM_CHECK(p.kernel <= kMaxKernel, "causal_conv1d_cuda: kernel ", p.kernel, " above the CUDA limit ", kMaxKernel);
  return {p.total_tokens, p.channels, p.kernel, p.n_seqs};
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 4 channels per thread (16-byte rows) when K == 4 (the GDN and Mamba-2 convs; larger windows would not fit four
// channels in registers), C % 4 == 0 and every row pointer is 16-byte aligned; else 1.
int channels_per_thread(const Geometry& g, const void* a, const void* b, const void* c, const void* d) {
  return g.K == 4 && g.C % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(c) && aligned16(d) ? 4 : 1;
}

dim3 tile_grid(const Geometry& g, const CausalConv1dCudaTiling& tiling, int V) {
  const int64_t per_block = static_cast<int64_t>(kThreadsX) * V;
  return dim3(static_cast<unsigned>((g.C + per_block - 1) / per_block), static_cast<unsigned>(tiling.tiles));
}

size_t dw_partial_bytes(const Geometry& g, const CausalConv1dCudaTiling& tiling) {
  return static_cast<size_t>(tiling.tiles * g.K * g.C) * sizeof(float);
}

// kL2: the per-head l2norm fused in (V = 4, heads of 128; yn and l2_eps its output and epsilon).
template <int KMAX, bool EXACT, int V, bool kL2 = false>
void launch_forward(float* y, const float* x, const float* w, const float* state_in, const int64_t* cu,
                    const Geometry& g, const CausalConv1dCudaTiling& tiling, bool silu, cudaStream_t stream,
                    float* yn = nullptr, float l2_eps = 0.0f) {
  conv_forward_kernel<KMAX, EXACT, V, kL2><<<tile_grid(g, tiling, V), dim3(kThreadsX, kRunsPerTile), 0, stream>>>(
      y, x, w, state_in, cu, g, tiling.run_tokens, silu, yn, l2_eps);
  HLM_CUDA_CHECK_LAUNCH();
}

// kL2: the per-head l2norm's backward fused in (V = 4, heads of 128, no state).
template <int KMAX, bool EXACT, int V, typename DX, bool kL2 = false>
void launch_backward(DX* dx, float* dw_partial, const float* dy, const float* x, const float* w,
                     const float* state_in, const int64_t* cu, const Geometry& g,
                     const CausalConv1dCudaTiling& tiling, bool silu, cudaStream_t stream, float l2_eps = 0.0f) {
  const dim3 grid = tile_grid(g, tiling, V), block(kThreadsX, kRunsPerTile);
  conv_backward_kernel<KMAX, EXACT, V, DX, kL2><<<grid, block, 0, stream>>>(
      dx, dw_partial, dy, x, w, state_in, cu, g, tiling.run_tokens, silu, g_interior_walk.on(), l2_eps);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void causal_conv1d_forward_cuda(float* y, float* state_out, const float* x, const float* w, const float* state_in,
                                const int64_t* cu_seqlens, const CausalConv1dCudaParams& p, cudaStream_t stream) {
  const Geometry g = check_params(p);
  HLM_CHECK(y != x || p.total_tokens == 0, "causal_conv1d_forward_cuda: y may not alias x");
  if (g.T > 0) {
    const CausalConv1dCudaTiling tiling = causal_conv1d_cuda_tiling(g.T);
    if (channels_per_thread(g, y, x, nullptr, nullptr) == 4)
      launch_forward<4, true, 4>(y, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
    else if (g.K <= 4)
      launch_forward<4, false, 1>(y, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
    else if (g.K <= 8)
      launch_forward<8, false, 1>(y, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
    else
      launch_forward<kMaxKernel, false, 1>(y, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
  }
  if (state_out != nullptr && g.K > 1 && g.N > 0) {
    conv_state_out_kernel<<<cuda::grid_blocks(g.N * g.C), cuda::kElementwiseThreads, 0, stream>>>(
        state_out, x, state_in, cu_seqlens, g);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

namespace {
// The fusion's shape (both directions): heads of one warp's 128 channels, K 4, whole heads, the switch on.
bool l2norm_fusion_shape(const CausalConv1dCudaParams& p, int64_t head_dim) {
  return g_l2norm_fused.on() && head_dim == kL2HeadDim && p.kernel == 4 && p.channels % kL2HeadDim == 0;
}
}  // namespace

bool causal_conv1d_l2norm_fusable(const CausalConv1dCudaParams& p, int64_t head_dim, const void* y, const void* yn,
                                  const void* x) {
  return l2norm_fusion_shape(p, head_dim) && aligned16(y) && aligned16(yn) && aligned16(x) && y != yn;
}

void causal_conv1d_cuda_set_l2norm_fused(int on) { g_l2norm_fused.set(on); }
int64_t causal_conv1d_l2norm_fused_launches() { return g_l2norm_fused_launches.load(); }

void causal_conv1d_l2norm_forward_cuda(float* y, float* yn, const float* x, const float* w, const int64_t* cu_seqlens,
                                       const CausalConv1dCudaParams& p, int64_t head_dim, float eps,
                                       cudaStream_t stream) {
  const Geometry g = check_params(p);
  HLM_CHECK(head_dim > 0 && g.C % head_dim == 0, "causal_conv1d_l2norm_forward_cuda: ", g.C,
            " channels are not whole heads of ", head_dim);
  HLM_CHECK(y != x && yn != x && yn != y, "causal_conv1d_l2norm_forward_cuda: y, yn and x must be distinct");
  if (g.T == 0) return;
  if (!causal_conv1d_l2norm_fusable(p, head_dim, y, yn, x)) {
    causal_conv1d_forward_cuda(y, nullptr, x, w, nullptr, cu_seqlens, p, stream);
    l2norm_forward_cuda(yn, y, L2normCudaParams{g.T * g.C / head_dim, head_dim, eps}, stream);
    return;
  }
  launch_forward<4, true, 4, true>(y, x, w, nullptr, cu_seqlens, g, causal_conv1d_cuda_tiling(g.T), p.silu, stream, yn,
                                   eps);
  ++g_l2norm_fused_launches;
}

void causal_conv1d_decode_cuda(float* y, float* state, const float* x, const float* w,
                               const CausalConv1dCudaParams& p, cudaStream_t stream) {
  const Geometry g = check_params(p);
  HLM_CHECK(p.total_tokens == p.n_seqs, "causal_conv1d_decode_cuda: one token per sequence (T ", p.total_tokens,
            ", N ", p.n_seqs, ")");
  HLM_CHECK(y != x || p.total_tokens == 0, "causal_conv1d_decode_cuda: y may not alias x");
  if (g.N == 0) return;
  float* st = g.K > 1 ? state : nullptr;
  const auto blocks = static_cast<unsigned>((g.N * g.C + kDecodeConvThreads - 1) / kDecodeConvThreads);
  if (g.K <= 4)
    conv_decode_kernel<4><<<blocks, kDecodeConvThreads, 0, stream>>>(y, st, x, w, st, g, p.silu);
  else if (g.K <= 8)
    conv_decode_kernel<8><<<blocks, kDecodeConvThreads, 0, stream>>>(y, st, x, w, st, g, p.silu);
  else
    conv_decode_kernel<kMaxKernel><<<blocks, kDecodeConvThreads, 0, stream>>>(y, st, x, w, st, g, p.silu);
  HLM_CUDA_CHECK_LAUNCH();
}

void causal_conv1d_cuda_set_interior_walk(int on) { g_interior_walk.set(on); }

size_t causal_conv1d_backward_cuda_workspace_bytes(const CausalConv1dCudaParams& p) {
  const Geometry g = check_params(p);
  return dw_partial_bytes(g, causal_conv1d_cuda_tiling(g.T));
}

namespace {

// l2_eps ≥ 0: the l2norm-fused form (l2norm_backward_impl checked its shape and alignment; no state).
template <typename DX>
void backward_impl(DX* dx, float* dw, float* d_state_in, const float* dy, const float* x, const float* w,
                   const float* state_in, const int64_t* cu_seqlens, const CausalConv1dCudaParams& p,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream, float l2_eps = -1.0f) {
  const Geometry g = check_params(p);
  const CausalConv1dCudaTiling tiling = causal_conv1d_cuda_tiling(g.T);
  const size_t need = dw_partial_bytes(g, tiling);
  HLM_CHECK(workspace_bytes >= need && (workspace != nullptr || need == 0), "causal_conv1d_backward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", need);
  const bool want_dstate = d_state_in != nullptr && state_in != nullptr && g.K > 1 && g.N > 0;
  if (g.T == 0) {  // no tokens: every gradient is zero
    if (dw != nullptr) HLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, static_cast<size_t>(g.C * g.K) * sizeof(float), stream));
    if (want_dstate) {
      const size_t bytes = static_cast<size_t>(g.N * g.C * (g.K - 1)) * sizeof(float);
      HLM_CUDA_CHECK(cudaMemsetAsync(d_state_in, 0, bytes, stream));
    }
    return;
  }
  float* partial = dw != nullptr ? static_cast<float*>(workspace) : nullptr;
  if (l2_eps >= 0.0f)
    launch_backward<4, true, 4, DX, true>(dx, partial, dy, x, w, nullptr, cu_seqlens, g, tiling, p.silu, stream,
                                          l2_eps);
  else if (channels_per_thread(g, dx, dy, x, partial) == 4)
    launch_backward<4, true, 4>(dx, partial, dy, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
  else if (g.K <= 4)
    launch_backward<4, false, 1>(dx, partial, dy, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
  else if (g.K <= 8)
    launch_backward<8, false, 1>(dx, partial, dy, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
  else
    launch_backward<kMaxKernel, false, 1>(dx, partial, dy, x, w, state_in, cu_seqlens, g, tiling, p.silu, stream);
  if (dw != nullptr) {
    conv_dw_finish_kernel<<<cuda::grid_blocks(g.C * g.K, kFinishThreads), kFinishThreads, 0, stream>>>(
        dw, partial, tiling.tiles, g);
    HLM_CUDA_CHECK_LAUNCH();
  }
  if (want_dstate) {
    conv_dstate_kernel<<<cuda::grid_blocks(g.N * g.C * (g.K - 1)), cuda::kElementwiseThreads, 0, stream>>>(
        d_state_in, dy, x, w, state_in, cu_seqlens, g, p.silu);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void causal_conv1d_backward_cuda(float* dx, float* dw, float* d_state_in, const float* dy, const float* x,
                                 const float* w, const float* state_in, const int64_t* cu_seqlens,
                                 const CausalConv1dCudaParams& p, void* workspace, size_t workspace_bytes,
                                 cudaStream_t stream) {
  backward_impl(dx, dw, d_state_in, dy, x, w, state_in, cu_seqlens, p, workspace, workspace_bytes, stream);
}

void causal_conv1d_backward_bf16_dx_cuda(__nv_bfloat16* dx, float* dw, float* d_state_in, const float* dy,
                                         const float* x, const float* w, const float* state_in,
                                         const int64_t* cu_seqlens, const CausalConv1dCudaParams& p, void* workspace,
                                         size_t workspace_bytes, cudaStream_t stream) {
  backward_impl(dx, dw, d_state_in, dy, x, w, state_in, cu_seqlens, p, workspace, workspace_bytes, stream);
}

namespace {

// The fused form or the two ops: the l2norm's backward in place on dy_n, then the conv's.
template <typename DX>
void l2norm_backward_impl(DX* dx, float* dw, float* dy_n, const float* y, const float* x, const float* w,
                          const int64_t* cu_seqlens, const CausalConv1dCudaParams& p, int64_t head_dim, float eps,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const Geometry g = check_params(p);
  HLM_CHECK(head_dim > 0 && g.C % head_dim == 0, "causal_conv1d_l2norm_backward_cuda: ", g.C,
            " channels are not whole heads of ", head_dim);
  HLM_CHECK(eps >= 0.0f, "causal_conv1d_l2norm_backward_cuda: eps ", eps, " < 0");
  float* partial = dw != nullptr ? static_cast<float*>(workspace) : nullptr;
  if (g.T > 0 && l2norm_fusion_shape(p, head_dim) && channels_per_thread(g, dx, dy_n, x, partial) == 4) {
    backward_impl(dx, dw, nullptr, dy_n, x, w, nullptr, cu_seqlens, p, workspace, workspace_bytes, stream, eps);
    ++g_l2norm_fused_launches;
    return;
  }
  if (g.T > 0) l2norm_backward_cuda(dy_n, dy_n, y, L2normCudaParams{g.T * g.C / head_dim, head_dim, eps}, stream);
  backward_impl(dx, dw, nullptr, dy_n, x, w, nullptr, cu_seqlens, p, workspace, workspace_bytes, stream);
}

}  // namespace

void causal_conv1d_l2norm_backward_cuda(float* dx, float* dw, float* dy_n, const float* y, const float* x,
                                        const float* w, const int64_t* cu_seqlens, const CausalConv1dCudaParams& p,
                                        int64_t head_dim, float eps, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream) {
  l2norm_backward_impl(dx, dw, dy_n, y, x, w, cu_seqlens, p, head_dim, eps, workspace, workspace_bytes, stream);
}

void causal_conv1d_l2norm_backward_bf16_dx_cuda(__nv_bfloat16* dx, float* dw, float* dy_n, const float* y,
                                                const float* x, const float* w, const int64_t* cu_seqlens,
                                                const CausalConv1dCudaParams& p, int64_t head_dim, float eps,
                                                void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  l2norm_backward_impl(dx, dw, dy_n, y, x, w, cu_seqlens, p, head_dim, eps, workspace, workspace_bytes, stream);
}

}  // namespace hlm
