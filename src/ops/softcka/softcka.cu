// SoftCKA kernel sums on CUDA (contract: softcka_cuda.h; CPU reference: src/analysis/softcka.cpp).
// One block per job (a grid-stride loop over jobs), in three phases separated by block barriers:
//   1. RBF: squared row norms of A and B; linear: column means of A and B (both fp64, into the job's workspace).
//   2. Kernel entries tile by tile (32×32 entries, 32-wide slices of d staged in shared memory as fp64), written to
//      the workspace matrix K [na, nb].
//   3. RBF: row and column means of K, the grand mean, then Σ (K_ij − r_i − c_j + ḡ)² (centring before squaring, as
//      the CPU does); linear: Σ K_ij² of the centred-feature products.
// Reductions are fixed-order (per-thread serial loops, then a shuffle tree and the warps in order): deterministic.
// Non-goals for now: tensor cores (fp64 DMMA) and several blocks per long job; the batch sizes SoftCKA produces
// (thousands of ~30-token sentence pairs per launch) keep every SM busy with one block per job.
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/softcka/softcka_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;                       // kernel entries per tile side
constexpr int kSlice = 32;                      // features staged per step
constexpr int kRowStride = kThreads / kTile;              // 8: a thread's entries sit 8 rows apart
constexpr int kRowsPerThread = kTile * kTile / kThreads;  // 4 entries per thread per tile
static_assert(kRowsPerThread * kRowStride == kTile && kRowsPerThread == 4, "tile shape");
constexpr int64_t kMaxJobBlocks = 65535;

// Phase 1, RBF: out[i] = ‖X_i‖² for the n rows of X (one warp per row).
__device__ void row_sq_norms(double* out, const float* X, int64_t n, int64_t d) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t i = warp; i < n; i += kThreads / 32) {
    double s = 0.0;
    for (int64_t k = lane; k < d; k += 32) {
      const double x = X[i * d + k];
      s = fma(x, x, s);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (lane == 0) out[i] = s;
  }
}

// Phase 1, linear: out[k] = mean over the n rows of X[:, k] (rows summed in order, as the CPU does).
__device__ void column_means(double* out, const float* X, int64_t n, int64_t d) {
  for (int64_t k = threadIdx.x; k < d; k += kThreads) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(X[i * d + k]);
    out[k] = s / static_cast<double>(n);
  }
}

// Phase 2: K [na, nb] (row-major in the workspace). RBF entries use the norms in norm_a / norm_b; linear entries
// subtract the column means mean_a / mean_b from the features as they are staged.
template <bool kLinear>
__device__ void kernel_entries(double* K, const float* A, int64_t na, const float* B, int64_t nb, int64_t d,
                               const double* norm_a, const double* norm_b, const double* mean_a,
                               const double* mean_b, double inv_two_sigma_sq) {
  __shared__ double a_tile[kTile][kSlice + 1];
  __shared__ double b_tile[kTile][kSlice + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;  // entries (ty + 8q, tx), q < 4
  for (int64_t i0 = 0; i0 < na; i0 += kTile)
    for (int64_t j0 = 0; j0 < nb; j0 += kTile) {
      double acc[kRowsPerThread] = {0.0, 0.0, 0.0, 0.0};
      for (int64_t k0 = 0; k0 < d; k0 += kSlice) {
        for (int e = threadIdx.x; e < kTile * kSlice; e += kThreads) {
          const int r = e / kSlice, kk = e % kSlice;
          const int64_t k = k0 + kk;
          double av = 0.0, bv = 0.0;
          if (k < d && i0 + r < na) av = static_cast<double>(A[(i0 + r) * d + k]) - (kLinear ? mean_a[k] : 0.0);
          if (k < d && j0 + r < nb) bv = static_cast<double>(B[(j0 + r) * d + k]) - (kLinear ? mean_b[k] : 0.0);
          a_tile[r][kk] = av;
          b_tile[r][kk] = bv;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < kSlice; ++kk) {
          const double bv = b_tile[tx][kk];
#pragma unroll
          for (int q = 0; q < kRowsPerThread; ++q) acc[q] = fma(a_tile[ty + kRowStride * q][kk], bv, acc[q]);
        }
        __syncthreads();
      }
      const int64_t j = j0 + tx;
#pragma unroll
      for (int q = 0; q < kRowsPerThread; ++q) {
        const int64_t i = i0 + ty + kRowStride * q;
        if (i >= na || j >= nb) continue;
        if (kLinear) {
          K[i * nb + j] = acc[q];
        } else {
          const double dist_sq = fmax(0.0, norm_a[i] + norm_b[j] - 2.0 * acc[q]);
          K[i * nb + j] = exp(-dist_sq * inv_two_sigma_sq);
        }
      }
    }
}

template <bool kLinear>
__global__ void __launch_bounds__(kThreads) softcka_sq_norms_kernel(double* out, const float* rows, int64_t d,
                                                                    const SoftckaCudaJob* jobs, int64_t n_jobs,
                                                                    double* workspace) {
  __shared__ double smem[kThreads / 32];
  for (int64_t job = blockIdx.x; job < n_jobs; job += gridDim.x) {
    const SoftckaCudaJob jb = jobs[job];
    const int64_t na = jb.na, nb = jb.nb;
    const float* A = rows + jb.a_row * d;
    const float* B = rows + jb.b_row * d;
    double* K = workspace + jb.ws_offset;  // [na, nb]
    double* row_stat = K + na * nb;        // [na]: RBF norms, then row means
    double* col_stat = row_stat + na;      // [nb]: RBF norms, then column means
    double* mean_a = col_stat + nb;        // [d] (linear)
    double* mean_b = mean_a + d;           // [d] (linear)

    if (kLinear) {
      column_means(mean_a, A, na, d);
      column_means(mean_b, B, nb, d);
    } else {
      row_sq_norms(row_stat, A, na, d);
      row_sq_norms(col_stat, B, nb, d);
    }
    __syncthreads();
    kernel_entries<kLinear>(K, A, na, B, nb, d, row_stat, col_stat, mean_a, mean_b,
                            1.0 / (2.0 * jb.sigma * jb.sigma));
    __syncthreads();

    double sum_sq = 0.0;
    if (kLinear) {
      for (int64_t e = threadIdx.x; e < na * nb; e += kThreads) sum_sq = fma(K[e], K[e], sum_sq);
    } else {
      // Row sums (kept for the grand mean) and means, then column means; the norms they overwrite are no longer read.
      double row_total = 0.0;
      for (int64_t i = threadIdx.x; i < na; i += kThreads) {
        double s = 0.0;
        for (int64_t j = 0; j < nb; ++j) s += K[i * nb + j];
        row_total += s;
        row_stat[i] = s / static_cast<double>(nb);
      }
      for (int64_t j = threadIdx.x; j < nb; j += kThreads) {
        double s = 0.0;
        for (int64_t i = 0; i < na; ++i) s += K[i * nb + j];
        col_stat[j] = s / static_cast<double>(na);
      }
      // The block sum's barrier also makes the means visible to every thread.
      const double grand = cuda::block_sum<kThreads>(row_total, smem) / static_cast<double>(na * nb);
      for (int64_t e = threadIdx.x; e < na * nb; e += kThreads) {
        const double c = K[e] - row_stat[e / nb] - col_stat[e % nb] + grand;
        sum_sq = fma(c, c, sum_sq);
      }
    }
    sum_sq = cuda::block_sum<kThreads>(sum_sq, smem);
    if (threadIdx.x == 0) out[job] = sum_sq;
    __syncthreads();  // the next job's phase 1 must not overwrite statistics still being read
  }
}

}  // namespace

void softcka_centered_sq_norms_cuda(double* out, const float* rows, int64_t d, const SoftckaCudaJob* jobs,
                                    int64_t n_jobs, SoftckaCudaKernel kernel, double* workspace, cudaStream_t stream) {
  HLM_CHECK(d > 0 && n_jobs >= 0, "softcka_cuda: bad feature size ", d, " or job count ", n_jobs);
  if (n_jobs == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min(n_jobs, kMaxJobBlocks));
  if (kernel == SoftckaCudaKernel::Linear)
    softcka_sq_norms_kernel<true><<<blocks, kThreads, 0, stream>>>(out, rows, d, jobs, n_jobs, workspace);
  else
    softcka_sq_norms_kernel<false><<<blocks, kThreads, 0, stream>>>(out, rows, d, jobs, n_jobs, workspace);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
