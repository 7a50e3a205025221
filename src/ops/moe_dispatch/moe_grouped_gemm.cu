// Grouped GEMM over routed experts (contract: moe_grouped_gemm_cuda.h): y[r] = a[r] · w[e]ᵀ for the rows each expert
// owns, all experts in one launch. blockIdx.x walks N tiles, blockIdx.y row tiles; a row tile finds its expert by
// walking offsets (E ≤ a few hundred: cheaper than a separate tile-map kernel, and no host sync).
#include <cuda_runtime.h>
#include <mma.h>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/moe_dispatch/moe_grouped_gemm_cuda.h"

namespace hlm {
namespace {

struct RowTile {
  int expert;  // -1: a spare tile (the grid is an upper bound)
  int row0, rows;
};

// Row tile `tile` of BM rows: the expert whose rows it covers, walking each expert's ⌈count / BM⌉ tiles in order.
__device__ RowTile find_row_tile(const int32_t* offsets, int E, int tile, int BM) {
  int acc = 0;
  for (int e = 0; e < E; ++e) {
    const int start = offsets[e], count = offsets[e + 1] - start;
    const int tiles = (count + BM - 1) / BM;
    if (tile < acc + tiles) {
      const int first = (tile - acc) * BM;
      return {e, start + first, min(BM, count - first)};
    }
    acc += tiles;
  }
  return {-1, 0, 0};
}

// ---- fp32: 64×64 tiles, BK 16, 256 threads of 4×4 outputs.
constexpr int kF32BM = 64, kF32BN = 64, kF32BK = 16;

__global__ void __launch_bounds__(256) grouped_gemm_f32_kernel(float* y, const float* a, const float* w,
                                                               const int32_t* offsets, int E, int N, int K) {
  __shared__ RowTile tile;
  __shared__ float As[kF32BK][kF32BM + 4];
  __shared__ float Bs[kF32BK][kF32BN + 4];
  if (threadIdx.x == 0) tile = find_row_tile(offsets, E, static_cast<int>(blockIdx.y), kF32BM);
  __syncthreads();
  if (tile.expert < 0) return;
  const int n0 = static_cast<int>(blockIdx.x) * kF32BN;
  const float* a0 = a + static_cast<int64_t>(tile.row0) * K;
  const float* w0 = w + (static_cast<int64_t>(tile.expert) * N + n0) * K;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kF32BK) {
    for (int l = threadIdx.x; l < kF32BM * kF32BK; l += 256) {
      const int m = l / kF32BK, kk = l % kF32BK;
      As[kk][m] = m < tile.rows && k0 + kk < K ? a0[static_cast<int64_t>(m) * K + k0 + kk] : 0.0f;
      Bs[kk][m] = n0 + m < N && k0 + kk < K ? w0[static_cast<int64_t>(m) * K + k0 + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kF32BK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        av[i] = As[kk][ty * 4 + i];
        bv[i] = Bs[kk][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int m = ty * 4 + i;
    if (m >= tile.rows) continue;
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n < N) y[static_cast<int64_t>(tile.row0 + m) * N + n] = acc[i][j];
    }
  }
}

// ---- bf16: 128×128×32 tiles, 8 warps (2 along M × 4 along N) of 64×32 (4×2 wmma fragments).
constexpr int kBM = 128, kBN = 128, kBK = 32, kLd = kBK + 8;  // +8 bf16: rows 80 bytes apart, fewer bank conflicts
constexpr int kThreads = 256;
constexpr int kChunks = kBM * kBK / 8 / kThreads;  // 16-byte chunks of A (and of B) per thread per stage: 2

template <bool kVec>
__device__ __forceinline__ void load_stage(uint4 (&ra)[kChunks], uint4 (&rb)[kChunks], const __nv_bfloat16* a0,
                                           const __nv_bfloat16* w0, int rows, int cols, int k0, int K) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int l = threadIdx.x + c * kThreads, m = l / (kBK / 8), kk = (l % (kBK / 8)) * 8;
    if constexpr (kVec) {
      const bool in_k = k0 + kk < K;  // K % 8 == 0: a chunk is all in or all out
      ra[c] = m < rows && in_k ? *reinterpret_cast<const uint4*>(a0 + static_cast<int64_t>(m) * K + k0 + kk)
                               : make_uint4(0, 0, 0, 0);
      rb[c] = m < cols && in_k ? *reinterpret_cast<const uint4*>(w0 + static_cast<int64_t>(m) * K + k0 + kk)
                               : make_uint4(0, 0, 0, 0);
    } else {
      __nv_bfloat16 va[8], vb[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const bool in_k = k0 + kk + q < K;
        va[q] = m < rows && in_k ? a0[static_cast<int64_t>(m) * K + k0 + kk + q] : __float2bfloat16_rn(0.0f);
        vb[q] = m < cols && in_k ? w0[static_cast<int64_t>(m) * K + k0 + kk + q] : __float2bfloat16_rn(0.0f);
      }
      ra[c] = *reinterpret_cast<const uint4*>(va);
      rb[c] = *reinterpret_cast<const uint4*>(vb);
    }
  }
}

__device__ __forceinline__ void store_stage(__nv_bfloat16* As, __nv_bfloat16* Bs, const uint4 (&ra)[kChunks],
                                            const uint4 (&rb)[kChunks]) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int l = threadIdx.x + c * kThreads, m = l / (kBK / 8), kk = (l % (kBK / 8)) * 8;
    *reinterpret_cast<uint4*>(As + m * kLd + kk) = ra[c];
    *reinterpret_cast<uint4*>(Bs + m * kLd + kk) = rb[c];
  }
}

// A warp's 64×32 accumulator tiles (rows wm·64, columns wn·32 of the block tile) stored to y [rows, N] at columns
// n0 + ... through the warp's 16×16 fp32 scratch in shared memory, bounds-checked against the tile's rows and `cols`.
using AccFragment = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
__device__ __forceinline__ void store_warp_tiles(AccFragment (&acc)[4][2], float* scratch, float* y,
                                                 const RowTile& tile, int N, int n0, int cols, int wm, int wn) {
  using namespace nvcuda;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int q = lane; q < 256; q += 32) {
        const int m = wm * 64 + i * 16 + q / 16, n = wn * 32 + j * 16 + q % 16;
        if (m < tile.rows && n < cols) y[static_cast<int64_t>(tile.row0 + m) * N + n0 + n] = scratch[q];
      }
      __syncwarp();
    }
}

// acc += the warp's 64×32 share of one kBK-deep slab: A rows wm·64.. of As, B columns wn·32.. of Bs (both [·, kLd]
// in shared memory).
__device__ __forceinline__ void mma_stage(AccFragment (&acc)[4][2], const __nv_bfloat16* As, const __nv_bfloat16* Bs,
                                          int wm, int wn) {
  using namespace nvcuda;
#pragma unroll
  for (int kk = 0; kk < kBK; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[4];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], As + (wm * 64 + i * 16) * kLd + kk, kLd);
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], Bs + (wn * 32 + j * 16) * kLd + kk, kLd);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) grouped_gemm_bf16_kernel(float* y, const __nv_bfloat16* a,
                                                                     const __nv_bfloat16* w, const int32_t* offsets,
                                                                     int E, int N, int K) {
  using namespace nvcuda;
  constexpr int kStageElems = kBM * kLd;  // one operand's stage (A and B tiles have the same size)
  __shared__ __align__(128) __nv_bfloat16 smem[4 * kStageElems];  // A0, B0, A1, B1: 40 KiB
  __shared__ RowTile tile;
  if (threadIdx.x == 0) tile = find_row_tile(offsets, E, static_cast<int>(blockIdx.y), kBM);
  __syncthreads();
  if (tile.expert < 0) return;
  const int n0 = static_cast<int>(blockIdx.x) * kBN, cols = min(kBN, N - n0);
  const __nv_bfloat16* a0 = a + static_cast<int64_t>(tile.row0) * K;
  const __nv_bfloat16* w0 = w + (static_cast<int64_t>(tile.expert) * N + n0) * K;
  const int warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;  // warp tile rows wm·64, cols wn·32

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  uint4 ra[kChunks], rb[kChunks];
  load_stage<kVec>(ra, rb, a0, w0, tile.rows, cols, 0, K);
  store_stage(smem, smem + kStageElems, ra, rb);
  __syncthreads();
  const int steps = (K + kBK - 1) / kBK;
  for (int s = 0; s < steps; ++s) {
    const __nv_bfloat16* As = smem + (s % 2) * 2 * kStageElems;
    const __nv_bfloat16* Bs = As + kStageElems;
    if (s + 1 < steps) load_stage<kVec>(ra, rb, a0, w0, tile.rows, cols, (s + 1) * kBK, K);  // in flight meanwhile
    mma_stage(acc, As, Bs, wm, wn);
    if (s + 1 < steps) {
      __nv_bfloat16* next = smem + ((s + 1) % 2) * 2 * kStageElems;  // last read in step s − 1, before its barrier
      store_stage(next, next + kStageElems, ra, rb);
    }
    __syncthreads();
  }
  // Epilogue through a per-warp 16×16 fp32 scratch (reusing the stage buffers), bounds-checked stores.
  store_warp_tiles(acc, reinterpret_cast<float*>(smem) + warp * 256, y, tile, N, n0, cols, wm, wn);
}

// ---- bf16, 16-byte path: the same tiles fed by cp.async through kStages shared-memory stages (kStages − 1 tiles in
// flight while one is multiplied: the weight-streaming regime of small expert batches is latency-bound otherwise).
constexpr int kStages = 4;
constexpr size_t kStageBytes = size_t{2} * kBM * kLd * sizeof(__nv_bfloat16);  // A and B tiles of one stage
constexpr size_t kAsyncSmemBytes = kStages * kStageBytes + sizeof(RowTile);  // 80 KiB + the tile: opt-in size

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled and nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void issue_stage(__nv_bfloat16* As, __nv_bfloat16* Bs, const __nv_bfloat16* a0,
                                            const __nv_bfloat16* w0, int rows, int cols, int k0, int K) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int l = threadIdx.x + c * kThreads, m = l / (kBK / 8), kk = (l % (kBK / 8)) * 8;
    const bool in_k = k0 + kk < K, va = m < rows && in_k, vb = m < cols && in_k;  // K % 8 == 0
    cp_async16(As + m * kLd + kk, va ? a0 + static_cast<int64_t>(m) * K + k0 + kk : a0, va);
    cp_async16(Bs + m * kLd + kk, vb ? w0 + static_cast<int64_t>(m) * K + k0 + kk : w0, vb);
  }
}

__global__ void __launch_bounds__(kThreads) grouped_gemm_bf16_async_kernel(float* y, const __nv_bfloat16* a,
                                                                           const __nv_bfloat16* w,
                                                                           const int32_t* offsets, int E, int N,
                                                                           int K) {
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char smem_raw[];  // no static shared memory: stage 0 starts aligned
  auto* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto* tile = reinterpret_cast<RowTile*>(smem_raw + kStages * kStageBytes);
  if (threadIdx.x == 0) *tile = find_row_tile(offsets, E, static_cast<int>(blockIdx.y), kBM);
  __syncthreads();
  const RowTile t = *tile;
  if (t.expert < 0) return;
  const int n0 = static_cast<int>(blockIdx.x) * kBN, cols = min(kBN, N - n0);
  const __nv_bfloat16* a0 = a + static_cast<int64_t>(t.row0) * K;
  const __nv_bfloat16* w0 = w + (static_cast<int64_t>(t.expert) * N + n0) * K;
  const int warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
  const auto stage_a = [&](int s) { return smem + static_cast<size_t>(s) * 2 * kBM * kLd; };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const int steps = (K + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) issue_stage(stage_a(s), stage_a(s) + kBM * kLd, a0, w0, t.rows, cols, s * kBK, K);
    cp_async_commit();  // an empty group keeps the count uniform
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();  // stage s has landed (for this thread) ...
    __syncthreads();               // ... for every thread, and step s − 1's reads of its buffer are done
    const int next = s + kStages - 1;
    if (next < steps)
      issue_stage(stage_a(next % kStages), stage_a(next % kStages) + kBM * kLd, a0, w0, t.rows, cols, next * kBK, K);
    cp_async_commit();
    const __nv_bfloat16* As = stage_a(s % kStages);
    const __nv_bfloat16* Bs = As + kBM * kLd;
    mma_stage(acc, As, Bs, wm, wn);
  }
  cp_async_wait<0>();
  __syncthreads();  // every stage read: the epilogue reuses them
  store_warp_tiles(acc, reinterpret_cast<float*>(smem_raw) + warp * 256, y, t, N, n0, cols, wm, wn);
}

dim3 grid_for(int64_t E, int64_t R, int64_t N, int BM, int BN) {
  return dim3(static_cast<unsigned>((N + BN - 1) / BN), static_cast<unsigned>((R + BM - 1) / BM + E));
}

void check_sizes(int64_t E, int64_t R, int64_t N, int64_t K) {
  HLM_CHECK_INPUT(E > 0 && N > 0 && K > 0 && R >= 0 && R * K < (int64_t{1} << 40) && R < (int64_t{1} << 31) &&
                      (R + 63) / 64 + E < 65535,
                  "moe grouped gemm: E ", E, ", R ", R, ", N ", N, ", K ", K);
}

}  // namespace

void moe_grouped_gemm_cuda(float* y, const float* a, const float* w, const int32_t* offsets, int64_t E, int64_t R,
                           int64_t N, int64_t K, cudaStream_t stream) {
  check_sizes(E, R, N, K);
  if (R == 0) return;
  grouped_gemm_f32_kernel<<<grid_for(E, R, N, kF32BM, kF32BN), 256, 0, stream>>>(
      y, a, w, offsets, static_cast<int>(E), static_cast<int>(N), static_cast<int>(K));
  HLM_CUDA_CHECK_LAUNCH();
}

void moe_grouped_gemm_bf16_cuda(float* y, const __nv_bfloat16* a, const __nv_bfloat16* w, const int32_t* offsets,
                                int64_t E, int64_t R, int64_t N, int64_t K, cudaStream_t stream) {
  check_sizes(E, R, N, K);
  if (R == 0) return;
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const dim3 grid = grid_for(E, R, N, kBM, kBN);
  if (vec) {
    static const bool opted_in = [] {  // above the default 48 KiB of dynamic shared memory: once per process
      HLM_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_bf16_async_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kAsyncSmemBytes)));
      return true;
    }();
    (void)opted_in;
    grouped_gemm_bf16_async_kernel<<<grid, kThreads, kAsyncSmemBytes, stream>>>(
        y, a, w, offsets, static_cast<int>(E), static_cast<int>(N), static_cast<int>(K));
  } else
    grouped_gemm_bf16_kernel<false><<<grid, kThreads, 0, stream>>>(y, a, w, offsets, static_cast<int>(E),
                                                                    static_cast<int>(N), static_cast<int>(K));
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
