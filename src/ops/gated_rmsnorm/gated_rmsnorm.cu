// Gated RMSNorm CUDA kernels and launchers (contract: gated_rmsnorm.h, gated_rmsnorm_cuda.h). Two paths, chosen by
// the row length D:
//   D ≤ gated_rmsnorm_cuda_warp_max_dim() (the GDN value heads, dv = 64..256): one warp per row, kWarpRows rows per
//     block. Each lane loads its slice of the row into registers (float4 when every pointer is 16-byte aligned and
//     D % 4 == 0, else single floats), sums it in order, and a 5-level xor-shuffle tree gives every lane the row sums.
//   longer rows: one block of gated_rmsnorm_cuda_threads() threads per row, scalar loads, block sums.
//   forward:  r = 1/sqrt(mean(x²) + eps), then y = ((x·r)·w)·silu(z).
//   backward, per row: r, s = Σ_d gn·x (gn = dy·w·silu(z)), then dx = r·(gn − n·(s·r/D)) and
//             dz = dy·w·n·σ(z)·(1 + z·σ(−z)), n = x·r.
//     warp path: one fused pass over row-groups (gated_rmsnorm_cuda_dw_plan: block g takes kWarpRows · rows_per_warp
//             consecutive rows, warp k the group's rows k, k + kWarpRows, ...); each lane also adds
//             fma((dy·x)·r, silu(z), acc) for its columns from the registers; after its rows the block adds its
//             warps' accumulators in warp order through shared memory and writes one partial row [groups, D] to the
//             workspace; the finish kernel (cuda::partial_rows_finish_kernel) sums each column's partial rows in a
//             fixed order and writes dw (the contract overwrites).
//     block path: the row kernel stores r per row; then dw = Σ_rows dy·x·r·silu(z) by the two-pass column sum into a
//             zeroed dw.
// In the forward every read of x happens before the reduction and each thread reads z[i] and then writes y[i] only
// for the elements it loaded, so y may alias x or z. Deterministic: fixed summation order, no atomics; the kernels
// that write dx and dz are the same whether dw is wanted or not (a runtime branch), so they have the same bits either
// way. Non-goals for now: vectorized loads and a fused dw for rows longer than gated_rmsnorm_cuda_warp_max_dim().
// The warp path's shared helpers (slices, warp sum, partial rows, V/P dispatch): backend/cuda/warp_rows.cuh.
// bf16 outputs (gated_rmsnorm_forward_bf16_cuda's y, gated_rmsnorm_backward_bf16_dz_cuda's dz): the same kernels with
// the output type as a template parameter; the fp32 value is computed by the same expression and stored rounded by
// bf16_round.cuh (cast_f32_to_bf16_cuda's rounding), so the bits are those of casting the fp32 output.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/warp_rows.cuh"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/cast/bf16_store_slice.cuh"
#include "ops/gated_rmsnorm/gated_rmsnorm_cuda.h"

namespace hlm {

namespace {

using cuda::aligned16;
using cuda::for_slice;
using cuda::load_slice;
using cuda::row_blocks;
using cuda::store_slice;
using cuda::warp_sum;
constexpr int kThreads = gated_rmsnorm_cuda_threads();
constexpr int64_t kWarpMaxDim = gated_rmsnorm_cuda_warp_max_dim();
constexpr int kWarpRows = gated_rmsnorm_cuda_warp_rows();  // rows (warps) per block on the warp path
constexpr int kFinishSlices = gated_rmsnorm_cuda_dw_finish_slices();
constexpr int kWarpThreads = 32 * kWarpRows;
static_assert(kWarpMaxDim <= 32 * 32, "warp path: at most 32 elements per lane are held in registers");

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// Output stores: fp32 as is; bf16 rounded as cast_f32_to_bf16_cuda rounds (a chunk of V values in one store: 8 bytes
// for V = 4, which the launcher's alignment check allows).
template <int V, int P>
__device__ __forceinline__ void store_out(float* row, const float (&src)[P], int64_t D, int lane) {
  store_slice<V, P>(row, src, D, lane);
}
template <int V, int P>
__device__ __forceinline__ void store_out(__nv_bfloat16* row, const float (&src)[P], int64_t D, int lane) {
  cuda::store_slice_bf16<V, P>(row, src, D, lane);
}
__device__ __forceinline__ void store_one(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store_one(__nv_bfloat16* out, int64_t i, float v) {
  reinterpret_cast<uint16_t*>(out)[i] = cuda::f32_to_bf16_bits(v);
}

// Whether an output allows the warp path's vector chunks: 16 bytes for fp32 (4 floats), 8 for bf16 (4 values).
bool vec_out(const float* p) { return aligned16(p); }
bool vec_out(const __nv_bfloat16* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

// ---- Warp path (helpers: backend/cuda/warp_rows.cuh)

template <typename Y, int V, int P>
__global__ void __launch_bounds__(kWarpThreads) gated_rmsnorm_forward_warp_kernel(Y* y, const float* x,
                                                                              const float* z, const float* w,
                                                                              int64_t R, int64_t D, float eps) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  cuda::dependent_launch_wait();     // launched as a dependent itself (forward_impl): x and z are written
  const int lane = static_cast<int>(threadIdx.x % 32);
  float wv[P];
  load_slice<V, P>(wv, w, D, lane);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32; r < R;
       r += static_cast<int64_t>(gridDim.x) * kWarpRows) {
    float xv[P], zv[P];
    load_slice<V, P>(xv, x + r * D, D, lane);
    load_slice<V, P>(zv, z + r * D, D, lane);
    float ss = cuda::slice_sum_squares<V, P>(xv, D, lane);
    ss = warp_sum(ss);  // every read of this lane's x and z happened above: y may alias x or z
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
#pragma unroll
    for (int i = 0; i < P; ++i) xv[i] = ((xv[i] * inv) * wv[i]) * silu(zv[i]);
    store_out<V, P>(y + r * D, xv, D, lane);
  }
}

// Backward over the row-group blockIdx.x (rows [g·kWarpRows·rows_per_warp, (g + 1)·kWarpRows·rows_per_warp) ∩ [0,
// R)): writes dx, dz, and, when dw_partial != nullptr, the group's dw partial row dw_partial[g, :] = Σ_warps (in warp
// order) Σ_rows of the warp (in row order) dy·x·r·silu(z).
template <typename DZ, int V, int P>
__global__ void __launch_bounds__(kWarpThreads) gated_rmsnorm_backward_warp_kernel(float* dx, DZ* dz,
                                                                               float* dw_partial, const float* dy,
                                                                               const float* x, const float* z,
                                                                               const float* w, int64_t R, int64_t D,
                                                                               int64_t rows_per_warp, float eps) {
  __shared__ float red[kWarpRows][32 * P];  // the warps' dw accumulators, by column
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  float wv[P], acc[P];
  load_slice<V, P>(wv, w, D, lane);
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0.0f;
  const cuda::RowGroup rows = cuda::row_group<kWarpRows>(blockIdx.x, rows_per_warp, R);
  for (int64_t r = rows.first + warp; r < rows.end; r += kWarpRows) {
    float xv[P], zv[P], gv[P];  // gv: dy as loaded (dy·w is formed where it is used)
    load_slice<V, P>(xv, x + r * D, D, lane);
    load_slice<V, P>(zv, z + r * D, D, lane);
    load_slice<V, P>(gv, dy + r * D, D, lane);
    float ss = 0.0f, s = 0.0f;
    for_slice<V, P>(D, lane, [&](int i) {
      ss = fmaf(xv[i], xv[i], ss);
      s = fmaf((gv[i] * wv[i]) * silu(zv[i]), xv[i], s);
    });
    ss = warp_sum(ss);
    s = warp_sum(s);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    const float mean = s * inv / static_cast<float>(D);  // mean_d(gn · n)
    if (dw_partial != nullptr) {
#pragma unroll
      for (int i = 0; i < P; ++i) acc[i] = fmaf((gv[i] * xv[i]) * inv, silu(zv[i]), acc[i]);
    }
    float dzv[P];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float zi = zv[i], n = xv[i] * inv, dyw = gv[i] * wv[i];
      const float sg = sigmoid(zi);
      xv[i] = inv * (dyw * silu(zi) - n * mean);
      dzv[i] = dyw * n * sg * (1.0f + zi * sigmoid(-zi));
    }
    store_slice<V, P>(dx + r * D, xv, D, lane);
    store_out<V, P>(dz + r * D, dzv, D, lane);
  }
  if (dw_partial == nullptr) return;  // the same for every thread of the grid
  cuda::store_partial_row<kWarpRows, V>(dw_partial, red, acc, D, lane, warp);
}

// ---- Block path (rows longer than kWarpMaxDim)

template <typename Y>
__global__ void __launch_bounds__(kThreads) gated_rmsnorm_forward_kernel(Y* y, const float* x, const float* z,
                                                                         const float* w, int64_t R, int64_t D,
                                                                         float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float* xr = x + r * D;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) ss = fmaf(xr[d], xr[d], ss);
    ss = cuda::block_sum<kThreads>(ss, smem);  // every read of x happens before this barrier: y may alias x
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const int64_t i = r * D + d;
      store_one(y, i, ((xr[d] * inv) * w[d]) * silu(z[i]));  // reads x[i], z[i] before writing y[i] (same thread)
    }
  }
}

template <typename DZ>
__global__ void __launch_bounds__(kThreads) gated_rmsnorm_backward_kernel(float* dx, DZ* dz, float* inv_out,
                                                                          const float* dy, const float* x,
                                                                          const float* z, const float* w, int64_t R,
                                                                          int64_t D, float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const int64_t base = r * D;
    float ss = 0.0f, s = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float xv = x[base + d];
      ss = fmaf(xv, xv, ss);
      s = fmaf((dy[base + d] * w[d]) * silu(z[base + d]), xv, s);
    }
    ss = cuda::block_sum<kThreads>(ss, smem);
    s = cuda::block_sum<kThreads>(s, smem);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    const float mean = s * inv / static_cast<float>(D);  // mean_d(gn · n)
    if (threadIdx.x == 0 && inv_out != nullptr) inv_out[r] = inv;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const int64_t i = base + d;
      const float zi = z[i], n = x[i] * inv, dyw = dy[i] * w[d];
      const float sg = sigmoid(zi);
      dx[i] = inv * (dyw * silu(zi) - n * mean);
      store_one(dz, i, dyw * n * sg * (1.0f + zi * sigmoid(-zi)));
    }
  }
}

struct DwTerm {
  const float *dy, *x, *z, *inv;
  int64_t D;
  __device__ float operator()(int64_t r, int64_t d) const {
    const int64_t i = r * D + d;
    return dy[i] * x[i] * inv[r] * silu(z[i]);
  }
};

// ---- Launch helpers

void check_params(const GatedRmsnormCudaParams& p) {
  HLM_CHECK(p.rows >= 0 && p.dim > 0, "gated_rmsnorm_cuda: bad shape [", p.rows, ", ", p.dim, "]");
}

unsigned warp_row_blocks(int64_t R) { return cuda::warp_row_blocks<kWarpRows>(R); }

struct Workspace {
  float* inv;      // block path: r [rows]
  float* partial;  // warp path: dw partial rows [groups, dim]; block path: the column sum's partials
  GatedRmsnormCudaDwPlan warp_plan;
  ColumnSumPlan plan;
  size_t bytes;
};

// Sizes the workspace and, when `base` is given, places the pieces in it. Warp path: the dw partial rows. Block path:
// r [rows], the column sum's partials.
Workspace carve(void* base, const GatedRmsnormCudaParams& p) {
  Workspace ws{};
  if (p.dim <= kWarpMaxDim) {
    ws.warp_plan = gated_rmsnorm_cuda_dw_plan(p.rows, p.dim);
    ws.bytes = static_cast<size_t>(ws.warp_plan.groups * p.dim) * sizeof(float);
    ws.partial = static_cast<float*>(base);
    return ws;
  }
  const size_t row_bytes = cuda::align_up_256(static_cast<size_t>(p.rows) * sizeof(float));
  ws.plan = column_sum_plan(p.rows, p.dim, ~size_t{0} / 2);
  ws.bytes = row_bytes + ws.plan.scratch_bytes;
  if (base == nullptr) return ws;
  ws.inv = static_cast<float*>(base);
  ws.partial = reinterpret_cast<float*>(static_cast<char*>(base) + row_bytes);
  return ws;
}

template <typename Y>
void forward_impl(Y* y, const float* x, const float* z, const float* w, const GatedRmsnormCudaParams& p,
                  cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;
  if (p.dim <= kWarpMaxDim) {
    const bool vec = vec_out(y) && aligned16(x) && aligned16(z) && aligned16(w);
    const bool pdl = cuda::dependent_launch_enabled();  // a programmatic dependent (dependent_launch.cuh)
    cuda::dispatch_warp<float>(p.dim, vec, [&](auto v, auto pl) {
      HLM_CUDA_CHECK(cuda::launch_maybe_dependent(
          pdl, gated_rmsnorm_forward_warp_kernel<Y, decltype(v)::value, decltype(pl)::value>,
          dim3(warp_row_blocks(p.rows)), dim3(kWarpThreads), 0, stream, y, x, z, w, p.rows, p.dim, p.eps));
    });
  } else {
    gated_rmsnorm_forward_kernel<Y><<<row_blocks(p.rows), kThreads, 0, stream>>>(y, x, z, w, p.rows, p.dim, p.eps);
  }
  HLM_CUDA_CHECK_LAUNCH();
}

template <typename DZ>
void backward_impl(float* dx, DZ* dz, float* dw, const float* dy, const float* x, const float* z, const float* w,
                   const GatedRmsnormCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) {
    if (dw != nullptr) HLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, static_cast<size_t>(p.dim) * sizeof(float), stream));
    return;
  }
  HLM_CHECK(workspace != nullptr, "gated_rmsnorm_backward_cuda: no workspace");
  const Workspace ws = carve(workspace, p);
  HLM_CHECK(workspace_bytes >= ws.bytes, "gated_rmsnorm_backward_cuda: workspace of ", workspace_bytes,
            " bytes, needs ", ws.bytes);
  if (p.dim <= kWarpMaxDim) {
    const bool vec = aligned16(dx) && vec_out(dz) && aligned16(dy) && aligned16(x) && aligned16(z) && aligned16(w);
    float* partial = dw != nullptr ? ws.partial : nullptr;
    cuda::dispatch_warp<float>(p.dim, vec, [&](auto v, auto pl) {
      gated_rmsnorm_backward_warp_kernel<DZ, decltype(v)::value, decltype(pl)::value>
          <<<static_cast<unsigned>(ws.warp_plan.groups), kWarpThreads, 0, stream>>>(
              dx, dz, partial, dy, x, z, w, p.rows, p.dim, ws.warp_plan.rows_per_warp, p.eps);
    });
    HLM_CUDA_CHECK_LAUNCH();
    if (dw == nullptr) return;
    cuda::partial_rows_finish<kFinishSlices, /*kAccumulate=*/false>(dw, ws.partial, ws.warp_plan.groups, p.dim, stream);
    return;
  }
  if (dw != nullptr) HLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, static_cast<size_t>(p.dim) * sizeof(float), stream));
  gated_rmsnorm_backward_kernel<DZ><<<row_blocks(p.rows), kThreads, 0, stream>>>(dx, dz, ws.inv, dy, x, z, w, p.rows,
                                                                                p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
  if (dw != nullptr)
    cuda::column_sum_accumulate(dw, DwTerm{dy, x, z, ws.inv, p.dim}, p.rows, p.dim, ws.plan, ws.partial, stream);
}

}  // namespace

void gated_rmsnorm_forward_cuda(float* y, const float* x, const float* z, const float* w,
                                const GatedRmsnormCudaParams& p, cudaStream_t stream) {
  forward_impl(y, x, z, w, p, stream);
}

void gated_rmsnorm_forward_bf16_cuda(__nv_bfloat16* y, const float* x, const float* z, const float* w,
                                     const GatedRmsnormCudaParams& p, cudaStream_t stream) {
  forward_impl(y, x, z, w, p, stream);
}

size_t gated_rmsnorm_backward_cuda_workspace_bytes(const GatedRmsnormCudaParams& p) {
  check_params(p);
  return carve(nullptr, p).bytes;
}

void gated_rmsnorm_backward_cuda(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                 const float* w, const GatedRmsnormCudaParams& p, void* workspace,
                                 size_t workspace_bytes, cudaStream_t stream) {
  backward_impl(dx, dz, dw, dy, x, z, w, p, workspace, workspace_bytes, stream);
}

void gated_rmsnorm_backward_bf16_dz_cuda(float* dx, __nv_bfloat16* dz, float* dw, const float* dy, const float* x,
                                         const float* z, const float* w, const GatedRmsnormCudaParams& p,
                                         void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  backward_impl(dx, dz, dw, dy, x, z, w, p, workspace, workspace_bytes, stream);
}

}  // namespace hlm
