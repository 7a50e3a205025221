// Gated delta rule decode step: CUDA kernels and launcher (contract: gated_delta_rule_decode.h; design and numerics:
// gated_delta_rule_decode_cuda.h).
//
// Vector path (dk = DK ∈ {64, 128, 256}, 16-byte aligned state/q/k). Block of 256 threads = 8 warps; one block
// works on one (sequence b, v-head h) pair and one tile of rows of its state M [dv, DK]. A row is split over
// kLanes = DK/16 consecutive lanes (a "group"); a warp holds 32/kLanes groups, i.e. that many consecutive rows. Lane
// `sub` of a group owns the float4 chunks c = sub + kLanes·i (i < 4) of its row, so for each i a group reads
// kLanes·16 contiguous bytes and every 32-byte sector the warp's load touches is used whole (DK = 128: four rows ×
// 128 contiguous bytes per instruction; over i = 0..3 the warp reads 2 KiB of consecutive rows). Each thread keeps kRowsPerThread = 2 rows (2 × 64 bytes of state, 32 registers) and
// issues all their loads before anything else, so a resident block has its whole 32 KiB of state loads in flight
// at once (75 registers per thread with CUDA 12 for sm_90a: 3 blocks per SM, ~96 KiB in flight per SM).
// k and q (DK floats each, shared by every row of the block) are staged in shared memory; v_a is a broadcast load
// per group. Row tile = 8 warps × (32/kLanes) groups × 2 rows: DK = 128 → 64 rows (a (b, h) pair of dv = 128 is two
// blocks; B = 64, Hv = 32 gives 4096 blocks of 32 KiB read + 32 KiB written).
// Per row: r = α·row; p = Σ r·k (per-lane FMA chain over the lane's 16 columns in chunk order, then an xor tree over
// the group's lanes); u = β (v_a − p); row' = fmaf(u, k, r); acc = Σ row'·q (same order); o_a = scale·acc, written by
// the group's lane 0; row' stored with a streaming hint. Rows past dv (the last tile) load zeros and store nothing,
// but their lanes still take part in the shuffles (full-warp masks; xor offsets < kLanes stay inside the group).
//
// Scalar path (any dk, dv, alignment). Block of 256 threads; warp w of tile t handles row a = 8t + w of one
// (b, h) pair (rows past dv: the whole warp returns, before any shuffle). Lane l handles columns d = l + 32j:
// pass 1 p = Σ (α·row_d)·k_d, warp xor tree; pass 2 recomputes α·row_d (same bits), writes row'_d = fmaf(u, k_d, ·)
// and sums row'_d·q_d. Every element of the row is read and written by the same thread, so the in-place update
// needs no barrier.
#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule_decode_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunks = 4;         // float4 chunks per lane per row on the vector path (16 floats)
constexpr int kRowsPerThread = 2;  // rows a thread keeps in flight on the vector path

struct DecodeArgs {
  float* o;
  float* state;
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  unsigned Hk, Hv;  // checked to fit (32-bit index arithmetic per block)
  int64_t dk, dv;
  unsigned tiles;  // row tiles per (sequence, v-head) pair; blockIdx.x = pair · tiles + tile
  float scale;
};

// Sum over aligned groups of kWidth lanes by a fixed xor tree; every lane of a group gets the same bits. All 32 lanes
// must call it.
template <int kWidth>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Vector-path geometry for dk = DK: lanes per row, rows per warp and round, rows per block.
template <int DK>
struct VecGeometry {
  static constexpr int kLanes = DK / (4 * kChunks);
  static constexpr int kGroups = 32 / kLanes;
  static constexpr int kRowsPerBlock = kWarps * kGroups * kRowsPerThread;
};

template <int DK>
__global__ void __launch_bounds__(kThreads) decode_vec_kernel(const DecodeArgs a) {
  cuda::dependent_launch_trigger();  // a programmatic dependent may start now
  cuda::dependent_launch_wait();     // launched as a dependent itself (launch()): q, k, v, g, β are written
  constexpr int kLanes = VecGeometry<DK>::kLanes;    // lanes per row
  constexpr int kGroups = VecGeometry<DK>::kGroups;  // rows per warp and round
  constexpr int kRowChunks = DK / 4;                 // float4 per row
  static_assert(kLanes >= 1 && kLanes <= 32 && 32 % kLanes == 0, "decode: DK/16 lanes must divide a warp");
  static_assert(2 * kRowChunks <= kThreads, "decode: k and q staging needs DK/2 threads");
  __shared__ float4 kq[2 * kRowChunks];  // k, then q

  const unsigned pair = blockIdx.x / a.tiles, tile = blockIdx.x % a.tiles;  // pair = b·Hv + h
  const unsigned b = pair / a.Hv, h = pair % a.Hv, hk = h / (a.Hv / a.Hk);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int sub = lane % kLanes, grp = lane / kLanes;
  float4* M = reinterpret_cast<float4*>(a.state + static_cast<int64_t>(pair) * a.dv * DK);

  // 1. The state rows first: all of this thread's loads are in flight before any other work.
  int64_t row[kRowsPerThread];
  bool active[kRowsPerThread];
  float4 s[kRowsPerThread][kChunks];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    row[r] = static_cast<int64_t>(tile) * VecGeometry<DK>::kRowsPerBlock + (r * kWarps + warp) * kGroups + grp;
    active[r] = row[r] < a.dv;
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
      s[r][i] = active[r] ? __ldcs(M + row[r] * kRowChunks + sub + kLanes * i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // 2. k and q of the pair's k-head to shared memory; the per-pair scalars; v of the rows.
  const int64_t qk_off = (static_cast<int64_t>(b) * a.Hk + hk) * DK;
  const int t = static_cast<int>(threadIdx.x);
  if (t < kRowChunks)
    kq[t] = __ldg(reinterpret_cast<const float4*>(a.k + qk_off) + t);
  else if (t < 2 * kRowChunks)
    kq[t] = __ldg(reinterpret_cast<const float4*>(a.q + qk_off) + (t - kRowChunks));
  const float alpha = expf(__ldg(a.g + pair)), beta = __ldg(a.beta + pair);
  float vr[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r)
    vr[r] = active[r] ? __ldg(a.v + static_cast<int64_t>(pair) * a.dv + row[r]) : 0.f;
  __syncthreads();

  // 3. Per row: decay, p = r·k, u, row' = r + u k, o = scale·row'·q, store.
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    float p = 0.f;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const float4 kk = kq[sub + kLanes * i];
      float4& x = s[r][i];
      x.x = alpha * x.x;
      x.y = alpha * x.y;
      x.z = alpha * x.z;
      x.w = alpha * x.w;
      p = fmaf(x.x, kk.x, p);
      p = fmaf(x.y, kk.y, p);
      p = fmaf(x.z, kk.z, p);
      p = fmaf(x.w, kk.w, p);
    }
    p = group_sum<kLanes>(p);
    const float u = beta * (vr[r] - p);
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const float4 kk = kq[sub + kLanes * i], qq = kq[kRowChunks + sub + kLanes * i];
      float4& x = s[r][i];
      x.x = fmaf(u, kk.x, x.x);
      x.y = fmaf(u, kk.y, x.y);
      x.z = fmaf(u, kk.z, x.z);
      x.w = fmaf(u, kk.w, x.w);
      acc = fmaf(x.x, qq.x, acc);
      acc = fmaf(x.y, qq.y, acc);
      acc = fmaf(x.z, qq.z, acc);
      acc = fmaf(x.w, qq.w, acc);
    }
    acc = group_sum<kLanes>(acc);
    if (active[r]) {
#pragma unroll
      for (int i = 0; i < kChunks; ++i) __stcs(M + row[r] * kRowChunks + sub + kLanes * i, s[r][i]);
      if (sub == 0) a.o[static_cast<int64_t>(pair) * a.dv + row[r]] = a.scale * acc;
    }
  }
}

__global__ void __launch_bounds__(kThreads) decode_scalar_kernel(const DecodeArgs a) {
  cuda::dependent_launch_trigger();  // a programmatic dependent may start now
  cuda::dependent_launch_wait();     // launched as a dependent itself (launch()): q, k, v, g, β are written
  const unsigned pair = blockIdx.x / a.tiles, tile = blockIdx.x % a.tiles;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64_t row = static_cast<int64_t>(tile) * kWarps + warp;
  if (row >= a.dv) return;  // the whole warp: no shuffle below is left half-attended
  const unsigned b = pair / a.Hv, h = pair % a.Hv, hk = h / (a.Hv / a.Hk);
  const int64_t dk = a.dk, qk_off = (static_cast<int64_t>(b) * a.Hk + hk) * dk;
  const float* k = a.k + qk_off;
  const float* q = a.q + qk_off;
  float* M = a.state + (static_cast<int64_t>(pair) * a.dv + row) * dk;
  const float alpha = expf(__ldg(a.g + pair)), beta = __ldg(a.beta + pair);
  float p = 0.f;
  for (int64_t d = lane; d < dk; d += 32) p = fmaf(alpha * M[d], __ldg(k + d), p);
  p = group_sum<32>(p);
  const float u = beta * (__ldg(a.v + static_cast<int64_t>(pair) * a.dv + row) - p);
  float acc = 0.f;
  for (int64_t d = lane; d < dk; d += 32) {
    const float x = fmaf(u, __ldg(k + d), alpha * M[d]);
    M[d] = x;
    acc = fmaf(x, __ldg(q + d), acc);
  }
  acc = group_sum<32>(acc);
  if (lane == 0) a.o[static_cast<int64_t>(pair) * a.dv + row] = a.scale * acc;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Launches `kernel` over pairs × tiles blocks.
template <typename Kernel>
void launch(Kernel kernel, DecodeArgs a, int64_t pairs, int64_t rows_per_tile, cudaStream_t stream) {
  const int64_t tiles = (a.dv + rows_per_tile - 1) / rows_per_tile, blocks = pairs * tiles;
  HLM_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "gated_delta_rule_decode_cuda: ", blocks,
            " blocks exceed the grid limit");
  a.tiles = static_cast<unsigned>(tiles);
  // A programmatic dependent (dependent_launch.cuh): its launch overlaps the kernel before it, which it waits for.
  HLM_CUDA_CHECK(cuda::launch_maybe_dependent(cuda::dependent_launch_enabled(), kernel,
                                              dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, a));
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool gated_delta_rule_decode_cuda_vectorized(const float* state, const GdnDecodeInputs<float>& in,
                                             const GdnDecodeShape& s) {
  const bool dk_ok = s.key_dim == 64 || s.key_dim == 128 || s.key_dim == 256;
  return dk_ok && aligned16(state) && aligned16(in.q) && aligned16(in.k);
}

void gated_delta_rule_decode_cuda(float* o, float* state, const GdnDecodeInputs<float>& in, const GdnDecodeShape& s,
                                  float scale, cudaStream_t stream) {
  HLM_CHECK(s.batch >= 0 && s.key_dim > 0 && s.value_dim > 0, "gated_delta_rule_decode_cuda: bad shape");
  HLM_CHECK(s.k_heads > 0 && s.v_heads > 0 && s.v_heads % s.k_heads == 0, "gated_delta_rule_decode_cuda: v heads ",
            s.v_heads, " not a multiple of k heads ", s.k_heads);
  if (s.batch == 0) return;
  HLM_CHECK(o && state && in.q && in.k && in.v && in.g && in.beta, "gated_delta_rule_decode_cuda: missing buffer");
  HLM_CHECK(s.v_heads <= std::numeric_limits<int32_t>::max(), "gated_delta_rule_decode_cuda: too many heads");
  DecodeArgs a{};
  a.o = o;
  a.state = state;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  a.g = in.g;
  a.beta = in.beta;
  a.Hk = static_cast<unsigned>(s.k_heads);
  a.Hv = static_cast<unsigned>(s.v_heads);
  a.dk = s.key_dim;
  a.dv = s.value_dim;
  a.scale = scale;  // a.tiles: set by launch()
  const int64_t pairs = s.batch * s.v_heads;
  if (gated_delta_rule_decode_cuda_vectorized(state, in, s)) {
    switch (s.key_dim) {
      case 64: return launch(decode_vec_kernel<64>, a, pairs, VecGeometry<64>::kRowsPerBlock, stream);
      case 128: return launch(decode_vec_kernel<128>, a, pairs, VecGeometry<128>::kRowsPerBlock, stream);
      case 256: return launch(decode_vec_kernel<256>, a, pairs, VecGeometry<256>::kRowsPerBlock, stream);
      default: break;
    }
  }
  launch(decode_scalar_kernel, a, pairs, kWarps, stream);
}

}  // namespace hlm
