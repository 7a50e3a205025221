// Private device helpers of the chunked gated delta rule on CUDA (gated_delta_rule_chunked_fwd.cu / _bwd.cu):
// the chunk table and scratch layout, tile loaders into shared memory (batched vector loads, cp.async copies), a
// block-wide bf16 tensor-core GEMM (wmma 16×16×16, fp32 accumulate), the 32×128 state tile held in accumulator
// fragments by the sequential passes (StateTile) and their per-chunk tile updates, the chunk-local cumulative decay
// and its suffix sums, the decayed causal mask, the fp32 unit-lower-triangular inverse and row dot products.
//
// Tiles: a chunk is kC = 64 token rows; head dims are zero-padded to kD = 128 columns in shared memory, so padded
// rows (≥ the chunk's valid length) and columns (≥ dk or dv) are exact zeros and stay inert through every product.
// Shared-memory row strides are padded by 16 bytes (kLd*) to spread banks; every tile base is 128-byte aligned, so
// each 16×16 fragment starts on a 32-byte boundary as wmma requires.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm::gdn_chunked {

// Which kernels the forward and backward launchers take: HLM_GDN_KERNELS unset or v2 (the default since session 23,
// after the H200 ran the chunked and model tests with v2): the v2 kernels (gdn_fwd_v2.cuh, gdn_bwd_v2.cuh); v1: the
// v1 kernels (A/B, and a fallback). Any other value is an input error. Read once per process.
inline bool gdn_kernels_v2() {
  static const bool v2 = [] {
    const char* e = std::getenv("HLM_GDN_KERNELS");
    const std::string v = e == nullptr ? "v2" : e;
    HLM_CHECK_INPUT(v == "v1" || v == "v2", "HLM_GDN_KERNELS must be v1 or v2 (unset: v2), not '", v, "'");
    return v == "v2";
  }();
  return v2;
}

using bf16 = __nv_bfloat16;

constexpr int kC = 64;          // chunk length (tokens)
constexpr int kD = 128;         // padded head dim: dk, dv ≤ 128
constexpr int kLdD = kD + 8;    // bf16 stride of [rows][128] tiles (272 B)
constexpr int kLdC = kC + 8;    // bf16 stride of [rows][64] tiles (144 B)
constexpr int kLdDf = kD + 4;   // fp32 stride of [rows][128] tiles (528 B)
constexpr int kLdCf = kC + 4;   // fp32 stride of [rows][64] tiles (272 B)
constexpr int kBV = 32;         // state rows (value channels) per block of the sequential passes
constexpr int kLdV = kBV + 8;   // bf16 stride of [64][32] tiles (80 B)
constexpr int kLdVf = kBV + 4;  // fp32 stride of [64][32] tiles (144 B)

// One chunk of one sequence: tokens [t0, t0 + len), 1 ≤ len ≤ kC; len = 0 marks an unused table slot.
struct ChunkInfo {
  int64_t t0;
  int32_t len;
  int32_t seq;
};

// Upper bound of the chunk count: Σ ceil(len_s / kC) ≤ T / kC + N.
inline int64_t max_chunks(int64_t tokens, int64_t n_seqs) { return tokens / kC + n_seqs + 1; }

// Carves 256-byte aligned pieces off a workspace; `bytes()` alone (base = nullptr) sizes it.
struct Carver {
  char* base = nullptr;
  size_t used = 0;
  template <typename T>
  T* take(size_t count) {
    used = (used + 255) / 256 * 256;
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += count * sizeof(T);
    return p;
  }
};

// Shared-memory carving for a kernel's dynamic buffer: 128-byte aligned pieces.
struct SmemCarver {
  char* base;
  size_t used = 0;
  template <typename T>
  __device__ T* take(size_t count) {
    used = (used + 127) / 128 * 128;
    T* p = reinterpret_cast<T*>(base + used);
    used += count * sizeof(T);
    return p;
  }
};
template <typename T>
constexpr size_t smem_piece(size_t count) {
  return (count * sizeof(T) + 127) / 128 * 128;
}

// Kernels and device functions below have internal linkage (each .cu that includes this gets its own copy; no
// relocatable device code needed).
namespace {

// table[max_chunks], seq_first[N + 1] (first chunk of each sequence; seq_first[N] = chunk count). One block.
// cu_seqlens is trusted as the contract says; slots past max_chunks are never written.
__global__ void chunk_table_kernel(const int64_t* cu, int64_t n_seqs, int64_t max_chunks, ChunkInfo* table,
                                   int64_t* seq_first) {
  if (threadIdx.x == 0) {
    int64_t acc = 0;
    for (int64_t s = 0; s < n_seqs; ++s) {
      seq_first[s] = acc;
      const int64_t len = cu[s + 1] - cu[s];
      acc += len > 0 ? (len + kC - 1) / kC : 0;
    }
    seq_first[n_seqs] = acc;
  }
  __syncthreads();  // global writes of thread 0 are visible to the block after the barrier
  for (int64_t s = threadIdx.x; s < n_seqs; s += blockDim.x) {
    const int64_t first = seq_first[s], count = seq_first[s + 1] - first, begin = cu[s], len = cu[s + 1] - begin;
    for (int64_t j = 0; j < count && first + j < max_chunks; ++j)
      table[first + j] = {begin + j * kC, static_cast<int32_t>(len - j * kC < kC ? len - j * kC : kC),
                          static_cast<int32_t>(s)};
  }
  for (int64_t i = seq_first[n_seqs] + threadIdx.x; i < max_chunks; i += blockDim.x) table[i] = {0, 0, 0};
}

// Whether `blocks` blocks of `bytes` dynamic shared memory fit on one SM of the target (sm_90 / H200: 228 KB per SM,
// 1 KB reserved per block): the size constants assert the blocks per SM their kernels' design counts on.
constexpr bool blocks_fit_per_sm(size_t bytes, int blocks) {
  return static_cast<size_t>(blocks) * (bytes + 1024) <= 228 * 1024;
}

// Dynamic shared memory above the 48 KB default must be opted into per kernel.
template <typename Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Chunk buffers of the two sequential passes (state, dstate) for a grid of `blocks`: with at least two blocks per SM
// to run, one buffer (less shared memory: 3 state / 2 dstate blocks fit on an SM and hide each other's copies); with
// fewer, two (each block prefetches its next chunk itself). H200, B8×T1024 H32 (1024 blocks): state 546 -> 471 µs,
// dstate 1.16 -> 0.63 ms with one buffer; B1×T16384 (128 blocks) is no faster with one.
inline int state_pass_buffers(int64_t blocks) {
  int device = 0, sms = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return blocks >= 2 * static_cast<int64_t>(sms) ? 1 : 2;
}

}  // namespace

// ---- Tile loaders (all threads of the block; no barrier inside)

// Memory-level parallelism decides these kernels' speed (few blocks per SM, many dependent phases), so every loader
// issues a batch of loads before it uses any: 16-byte vectors (4 floats or 8 bf16) when the row width, the row stride
// and the base allow it, else kBatch scalar loads at a time.
constexpr int kBatch = 8;

template <typename Src>
__device__ __forceinline__ bool vector_ok(const Src* src, int64_t stride, int width) {
  constexpr int V = 16 / static_cast<int>(sizeof(Src));
  return width % V == 0 && stride % V == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
}

// Calls put(i, d, v[V]) for every V-wide run of the tile [kRows][kCols] (rows ≥ len and columns ≥ width as zeros),
// from src rows i·stride: vectors when vector_ok, else scalars (V = 1).
template <int kRows, int kCols, typename Src, typename Put>
__device__ __forceinline__ void for_tile(const Src* src, int64_t stride, int len, int width, Put put) {
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  constexpr int V = 16 / static_cast<int>(sizeof(Src));
  static_assert(kCols % V == 0, "tile width must hold whole vectors");
  if (vector_ok(src, stride, width)) {
    constexpr int kVecs = kRows * kCols / V, kPerRow = kCols / V;
    for (int base = tid; base < kVecs; base += kBatch * nt) {
      uint4 raw[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int idx = base + u * nt, i = idx / kPerRow, d = (idx % kPerRow) * V;
        raw[u] = (idx < kVecs && i < len && d < width) ? *reinterpret_cast<const uint4*>(src + i * stride + d)
                                                       : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int idx = base + u * nt;
        if (idx < kVecs) put(idx / kPerRow, (idx % kPerRow) * V, reinterpret_cast<const Src*>(&raw[u]), V);
      }
    }
  } else {
    for (int base = tid; base < kRows * kCols; base += kBatch * nt) {
      Src v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int idx = base + u * nt, i = idx / kCols, d = idx % kCols;
        v[u] = (idx < kRows * kCols && i < len && d < width) ? src[i * stride + d] : Src(0.0f);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int idx = base + u * nt;
        if (idx < kRows * kCols) put(idx / kCols, idx % kCols, &v[u], 1);
      }
    }
  }
}

// dst[i][d] (i < kRows, d < kCols) = i < len && d < width ? scale(i) · src[i·stride + d] : 0, rounded to bf16.
template <int kRows, int kCols, typename Src, typename Scale>
__device__ __forceinline__ void load_tile_bf16(bf16* dst, int ld, const Src* src, int64_t stride, int len, int width,
                                               Scale scale) {
  for_tile<kRows, kCols>(src, stride, len, width, [&](int i, int d, const Src* v, int n) {
    const float s = i < len ? scale(i) : 0.0f;
    for (int e = 0; e < n; ++e) dst[i * ld + d + e] = __float2bfloat16_rn(s * static_cast<float>(v[e]));
  });
}
// The same into fp32.
template <int kRows, int kCols, typename Src>
__device__ __forceinline__ void load_tile_f32(float* dst, int ld, const Src* src, int64_t stride, int len, int width) {
  for_tile<kRows, kCols>(src, stride, len, width, [&](int i, int d, const Src* v, int n) {
    for (int e = 0; e < n; ++e) dst[i * ld + d + e] = static_cast<float>(v[e]);
  });
}
struct NoScale {
  __device__ float operator()(int) const { return 1.0f; }
};

// ---- Asynchronous copies (cp.async, no registers held): for the sequential passes' double buffering

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// dst [kRows][kCols] bf16 (zeros beyond len rows / width columns) = src rows (bf16, row stride `stride`), copied with
// cp.async when vector_ok (the caller commits and waits), else synchronously (the wait is then a no-op).
template <int kRows, int kCols>
__device__ __forceinline__ void load_tile_async(bf16* dst, int ld, const bf16* src, int64_t stride, int len,
                                                int width) {
  if (!vector_ok(src, stride, width)) {
    load_tile_bf16<kRows, kCols>(dst, ld, src, stride, len, width, NoScale{});
    return;
  }
  constexpr int V = 8, kPerRow = kCols / V;
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * kPerRow; idx += static_cast<int>(blockDim.x)) {
    const int i = idx / kPerRow, d = (idx % kPerRow) * V;
    const bool valid = i < len && d < width;
    cp_async16(dst + i * ld + d, valid ? src + i * stride + d : src, valid);
  }
}

// dst [64][kLdD] bf16 (zeros beyond len rows / width columns) = src rows (row stride `stride`) by cp.async, for
// kThreads threads, when vector_ok(src, stride, width) (the caller checks): thread tid always copies the 16-byte
// column piece tid % 16 of rows tid / 16 + (kThreads / 16)·it, so the loop is unrolled with one pointer step per piece
// (load_tile_async's general loop spends ~3× the instructions per copy, which one-warp blocks pay alone).
template <int kThreads>
__device__ __forceinline__ void copy_rows_async(bf16* dst, const bf16* src, int64_t stride, int len, int width) {
  static_assert(kThreads % 16 == 0 && kC * 16 % kThreads == 0, "whole rows per step");
  constexpr int kStep = kThreads / 16, kIters = kC * 16 / kThreads;
  const int tid = static_cast<int>(threadIdx.x), v = 8 * (tid % 16), r = tid / 16;
  const bool col_ok = v < width;
  const bf16* sp = src + r * stride + v;
  bf16* dp = dst + r * kLdD + v;
  const int64_t sstep = kStep * stride;
#pragma unroll 4
  for (int it = 0; it < kIters; ++it, sp += sstep, dp += kStep * kLdD) {
    const bool valid = col_ok && r + it * kStep < len;
    cp_async16(dp, valid ? sp : src, valid);
  }
}

// ---- Block GEMM on tensor cores

// C[M×N] (fp32, row-major, ldc) = (kAccumulate ? C : 0) + op(A)[M×K] · op(B)[K×N], bf16 operands in shared memory.
// A is stored [M][K] (lda) or, with kTransA, [K][M]; B is stored [K][N] (ldb) or, with kTransB, [N][K].
// Warp w computes output tiles w, w + kWarps, ...: calls with the same M, N and kWarps give each warp the same tiles,
// so an accumulating call right after another needs no block barrier (each warp re-reads only what it stored).
// Callers put a block barrier before (operands written) and after (C read by other warps).
template <int M, int N, int K, bool kTransA, bool kTransB, bool kAccumulate, int kWarps>
__device__ __forceinline__ void block_mma(float* C, int ldc, const bf16* A, int lda, const bf16* B, int ldb) {
  using namespace nvcuda;
  using LayoutA = std::conditional_t<kTransA, wmma::col_major, wmma::row_major>;
  using LayoutB = std::conditional_t<kTransB, wmma::col_major, wmma::row_major>;
  static_assert(M % 16 == 0 && N % 16 == 0 && K % 16 == 0, "block_mma: 16-multiples only");
  constexpr int kTilesN = N / 16;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (kAccumulate) __syncwarp();
  for (int tile = warp; tile < (M / 16) * kTilesN; tile += kWarps) {
    const int m = (tile / kTilesN) * 16, n = (tile % kTilesN) * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (kAccumulate)
      wmma::load_matrix_sync(acc, C + m * ldc + n, ldc, wmma::mem_row_major);
    else
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll 4
    for (int k = 0; k < K; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> b;
      wmma::load_matrix_sync(a, kTransA ? A + k * lda + m : A + m * lda + k, lda);
      wmma::load_matrix_sync(b, kTransB ? B + n * ldb + k : B + k * ldb + n, ldb);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + m * ldc + n, acc, ldc, wmma::mem_row_major);
  }
}

// ---- Chunk-local decay

// gam[i] = Σ_{j ≤ i} g[j·stride] for i < len (fp32, inclusive scan by warp 0: 2 rows per lane, then a shuffle scan);
// rows ≥ len get gam[len − 1] (never used unmasked). No barrier inside; callers sync before reading gam.
__device__ __forceinline__ void chunk_cumsum(float* gam, const float* g, int64_t stride, int len) {
  if (threadIdx.x >= 32) return;
  const int lane = static_cast<int>(threadIdx.x);
  const float a = 2 * lane < len ? g[(2 * lane) * stride] : 0.0f;
  const float b = 2 * lane + 1 < len ? g[(2 * lane + 1) * stride] : 0.0f;
  float run = a + b;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float up = __shfl_up_sync(0xffffffffu, run, off);
    if (lane >= off) run += up;
  }
  const float before = run - (a + b);
  gam[2 * lane] = before + a;
  gam[2 * lane + 1] = run;
  __syncwarp();
  const float last = gam[len - 1];
  __syncwarp();
  if (2 * lane >= len) gam[2 * lane] = last;
  if (2 * lane + 1 >= len) gam[2 * lane + 1] = last;
}

// The kBV × 128 state tile as wmma accumulators: warp w holds rows 16r.. (r = 0, 1) × columns 32w + 16c.. (c = 0, 1).
using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
struct StateTile {
  Acc f[2][2];
  __device__ void store(float* Sf) const {
    const int w = static_cast<int>(threadIdx.x) / 32;
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c)
        nvcuda::wmma::store_matrix_sync(Sf + (16 * r) * kLdDf + 32 * w + 16 * c, f[r][c], kLdDf,
                                        nvcuda::wmma::mem_row_major);
  }
  __device__ void load(const float* Sf) {
    const int w = static_cast<int>(threadIdx.x) / 32;
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c)
        nvcuda::wmma::load_matrix_sync(f[r][c], Sf + (16 * r) * kLdDf + 32 * w + 16 * c, kLdDf,
                                       nvcuda::wmma::mem_row_major);
  }
  // From src [rows][cols] fp32 (row stride ld; padded with zeros), or zeros when src is null, staged through Sf.
  __device__ void init(const float* src, int64_t ld, int rows, int cols, float* Sf) {
    if (src) {
      load_tile_f32<kBV, kD>(Sf, kLdDf, src, ld, rows, cols);
      __syncthreads();
      load(Sf);
    } else {
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 2; ++c) nvcuda::wmma::fill_fragment(f[r][c], 0.0f);
    }
  }
  // dst [rows][cols] (row stride ld) = the tile, staged through Sf.
  __device__ void write(float* dst, int64_t ld, int rows, int cols, float* Sf) const {
    store(Sf);
    __syncthreads();
    for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x)
      dst[(idx / cols) * ld + idx % cols] = Sf[(idx / cols) * kLdDf + idx % cols];
  }
  __device__ void scale(float s) {
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c)
        for (int e = 0; e < f[r][c].num_elements; ++e) f[r][c].x[e] *= s;
  }
  // += Aᵀ B with A stored [64][kBV] (lda) and B stored [64][128] (ldb), bf16.
  __device__ void add_tn(const bf16* A, int lda, const bf16* B, int ldb) {
    using namespace nvcuda;
    const int w = static_cast<int>(threadIdx.x) / 32;
    for (int k = 0; k < kC; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b[2];
      for (int r = 0; r < 2; ++r) wmma::load_matrix_sync(a[r], A + k * lda + 16 * r, lda);
      for (int c = 0; c < 2; ++c) wmma::load_matrix_sync(b[c], B + k * ldb + 32 * w + 16 * c, ldb);
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 2; ++c) wmma::mma_sync(f[r][c], a[r], b[c], f[r][c]);
    }
  }
};

// Ab[i][j] = bf16(s · QK[i][j] · Γ_ij) for j ≤ i < len, else 0 (QK fp32 [64][kLdCf]); exponents only for j ≤ i.
__device__ __forceinline__ void decayed_causal_bf16(bf16* Ab, const float* QK, const float* gam, int len, float s) {
  for (int idx = threadIdx.x; idx < kC * kC; idx += blockDim.x) {
    const int i = idx / kC, j = idx % kC;
    const float a = (j <= i && i < len) ? s * QK[i * kLdCf + j] * expf(gam[i] - gam[j]) : 0.0f;
    Ab[i * kLdC + j] = __float2bfloat16_rn(a);
  }
}

// Sb = bf16(Sf) over the kBV × 128 state tile; its valid part (r < rows, d < dk) also to out (row stride ld).
__device__ __forceinline__ void state_to_bf16(bf16* Sb, const float* Sf, bf16* out, int64_t ld, int rows, int dk) {
  for (int idx = threadIdx.x; idx < kBV * kD; idx += blockDim.x) {
    const int r = idx / kD, d = idx % kD;
    const bf16 x = __float2bfloat16_rn(Sf[r * kLdDf + d]);
    Sb[r * kLdD + d] = x;
    if (r < rows && d < dk) out[r * ld + d] = x;
  }
}

// In place over the chunk's [len][rows] part of a global [64][kBV] tile (row stride ld): x ← x + p_sign · P (P fp32
// [64][kLdVf] in shared memory); opb = bf16(op_sign · x) for the whole [64][kBV] tile, zeros outside. Loads batched.
template <int kThreads>
__device__ __forceinline__ void update_tile(float* x, int64_t ld, const float* P, float p_sign, bf16* opb,
                                            float op_sign, int len, int rows) {
  static_assert(kC * kBV % (kBatch * kThreads) == 0, "whole load batches");
  const int tid = static_cast<int>(threadIdx.x);
  for (int base = tid; base < kC * kBV; base += kBatch * kThreads) {
    float cur[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = (base + u * kThreads) / kBV, c = (base + u * kThreads) % kBV;
      cur[u] = (i < len && c < rows) ? x[i * ld + c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = (base + u * kThreads) / kBV, c = (base + u * kThreads) % kBV;
      const bool valid = i < len && c < rows;
      const float nx = valid ? cur[u] + p_sign * P[i * kLdVf + c] : 0.0f;
      if (valid) x[i * ld + c] = nx;
      opb[i * kLdV + c] = __float2bfloat16_rn(op_sign * nx);
    }
  }
}

// y[i] = Σ_{len > m ≥ i} x[m] for i < len (reverse inclusive scan by warp 0, 2 rows per lane); no barrier inside.
__device__ __forceinline__ void chunk_suffix_sum(float* y, const float* x, int len) {
  if (threadIdx.x >= 32) return;
  const int lane = static_cast<int>(threadIdx.x);
  const float a = 2 * lane < len ? x[2 * lane] : 0.0f, b = 2 * lane + 1 < len ? x[2 * lane + 1] : 0.0f;
  float run = a + b;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float down = __shfl_down_sync(0xffffffffu, run, off);
    if (lane + off < 32) run += down;
  }
  if (2 * lane < len) y[2 * lane] = run;
  if (2 * lane + 1 < len) y[2 * lane + 1] = run - a;
}

// ---- Triangular inverse

// The first step of both 64×64 unit-lower inverses (invert_unit_lower64 below, gdn_fwd_v2.cuh's
// invert_unit_lower64_tc): the four 16×16 diagonal blocks of L (A, fp32, lda) replaced by their inverses in place, by
// fp32 forward substitution, thread (b, j) < 64 solving column j of block b in registers. Contains block barriers
// (call from uniform control flow; blockDim ≥ 64); the first orders L's writes before the reads, the last makes the
// blocks visible.
__device__ inline void invert_diagonal_blocks16(float* A, int lda) {
  const int tid = static_cast<int>(threadIdx.x);
  __syncthreads();  // L written
  // 1. Diagonal blocks: thread (b, j) solves column j of block b into registers (L is read until the barrier).
  float col[16];
  const int b = tid / 16, j = tid % 16;
  if (tid < 64) {
    const float* L = A + (16 * b) * lda + 16 * b;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float acc = i == j ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < i; ++m)  // static register indices; rows above j are zero in column j
        if (m >= j) acc -= L[i * lda + m] * col[m];
      col[i] = i < j ? 0.0f : acc;
    }
  }
  __syncthreads();
  if (tid < 64) {
    float* R = A + (16 * b) * lda + 16 * b;
#pragma unroll
    for (int i = 0; i < 16; ++i) R[i * lda + j] = col[i];
  }
  __syncthreads();
}

// On entry A [64][lda] fp32 holds a strictly lower triangular L (zeros on and above the diagonal); on return it
// holds R = (I + L)^-1 (unit diagonal, zeros above). fp32 throughout (gdn.md §4): forward substitution inside the four
// 16×16 diagonal blocks (one thread per column), then two block merges R21 = −R22 · L21 · R11 (16 → 32 → 64).
// `tmp` holds 1024 floats. Contains block barriers (call from uniform control flow); any blockDim ≥ 64.
__device__ inline void invert_unit_lower64(float* A, int lda, float* tmp) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  invert_diagonal_blocks16(A, lda);
  // 2. Merges: size 16 (block pairs (0,1), (2,3)), then 32 (halves). R21 = −R22 · (L21 · R11).
  for (int size = 16; size <= 32; size *= 2) {
    const int pairs = 64 / (2 * size), per = size * size;
    for (int idx = tid; idx < pairs * per; idx += nt) {  // T = L21 · R11 (R11 lower triangular: m ≥ c)
      const int p = idx / per, r = (idx % per) / size, c = idx % size, o = 2 * size * p;
      const float* L21 = A + (o + size) * lda + o;
      const float* R11 = A + o * lda + o;
      float acc = 0.0f;
      for (int m = c; m < size; ++m) acc += L21[r * lda + m] * R11[m * lda + c];
      tmp[p * per + r * size + c] = acc;  // pairs · per ≤ 2 · 256 or 1 · 1024 floats
    }
    __syncthreads();
    for (int idx = tid; idx < pairs * per; idx += nt) {  // R21 = −R22 · T (R22 lower triangular: m ≤ r)
      const int p = idx / per, r = (idx % per) / size, c = idx % size, o = 2 * size * p;
      const float* R22 = A + (o + size) * lda + o + size;
      float acc = 0.0f;
      for (int m = 0; m <= r; ++m) acc += R22[r * lda + m] * tmp[p * per + m * size + c];
      A[(o + size + r) * lda + o + c] = -acc;
    }
    __syncthreads();
  }
}

// ---- Row dot products

// out[i] = Σ_{d < width} F[i·ldf + d] · x(i)[d] for i < 64 (0 for i ≥ len); width ≤ 128, kWarps = blockDim / 32.
// Warp w takes rows w, w + kWarps, ...; lane l columns l, l + 32, l + 64, l + 96. All of a warp's loads are issued
// before any is used (one memory latency per call), then a fixed shuffle tree per row. x(i): row i's vector (global).
template <int kWarps, typename RowPtr>
__device__ __forceinline__ void row_dots64(float* out, const float* F, int ldf, RowPtr x, int len, int width) {
  constexpr int kRows = kC / kWarps, kPer = kD / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float xv[kRows][kPer];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp + r * kWarps;
    const float* xi = i < len ? x(i) : nullptr;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int d = lane + 32 * u;
      xv[r][u] = (xi && d < width) ? xi[d] : 0.0f;
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp + r * kWarps;
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < kPer; ++u) acc += F[i * ldf + lane + 32 * u] * xv[r][u];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) out[i] = acc;
  }
}

}  // namespace hlm::gdn_chunked

// ---- Host side shared by the forward and backward launchers (defined in gated_delta_rule_chunked_fwd.cu)

namespace hlm::gdn_chunked {

// The inputs as the kernels read them (device pointers; h0 nullable) and the problem's sizes.
struct Problem {
  const float *q, *k, *v, *g, *beta, *h0;
  const int64_t* cu;
  int64_t T, Hk, Hv, dk, dv, N;
  float scale;
  __host__ __device__ int64_t group() const { return Hv / Hk; }
};

// The forward's scratch (Carver order is the layout): chunk table, γ [T, Hv], W and Kd [T, Hv, dk] bf16, U [T, Hv, dv] fp32
// (Ũ from prep, overwritten by U in the state pass), per-chunk entry states [max_chunks, Hv, dv, dk] bf16.
struct ForwardScratch {
  ChunkInfo* table;
  int64_t* seq_first;
  int64_t max_chunks;
  float* gam;
  bf16* W;
  bf16* Kd;  // [T, Hv, dk] e^{γ_c − γ_i} k_i (γ_c: the chunk's last γ)
  float* U;
  bf16* states;
  // Carved for the backward only (null otherwise), written by prep: R per chunk [max_chunks, Hv, 64, 64], Ũ
  // [T, Hv, dv] and Qd = scale·e^{γ_i} q_i [T, Hv, dk], all bf16 (the operands the backward's kernels multiply with).
  bf16* R;
  bf16* Ut;
  bf16* Qd;
};

Problem make_problem(const GdnInputs<float>& in, const GdnShape& shape, float scale);
// The dims and sequence count alone (no pointers): what the scratch-sizing functions carve for.
Problem sizing_problem(const GdnShape& shape, int64_t n_seqs);

// What a per-chunk kernel's block works on (grid: x = chunk slot, y = v-head): len = 0 marks an unused slot.
struct ChunkHead {
  int64_t ci, t0;
  int len, h, hk, dk, dv;
};
__device__ inline ChunkHead chunk_head(const Problem& p, const ChunkInfo* table) {
  const int64_t ci = blockIdx.x;
  const ChunkInfo info = table[ci];
  const int h = static_cast<int>(blockIdx.y);
  return {ci, info.t0, info.len, h, h / static_cast<int>(p.group()), static_cast<int>(p.dk), static_cast<int>(p.dv)};
}
ForwardScratch carve_forward(Carver& c, const Problem& p, bool for_backward);
// table, prep and the state pass (hT nullable): everything the output kernel and the backward build on.
void launch_forward_passes(const Problem& p, const ForwardScratch& s, float* hT, cudaStream_t stream);

}  // namespace hlm::gdn_chunked
