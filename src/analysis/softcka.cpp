// CKA and SoftCKA (contracts and formulas in softcka.h).
#include "analysis/softcka.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace hlm {
namespace {

// C [M, N] = A [M, K] · B [N, K]ᵀ (row-major, leading dimensions given), accumulating in T. Plain loops, not BLAS:
// callers run many small products from OpenMP threads, where OpenBLAS' own threads contend (measured: ~100× slower
// wall time than CPU time on 2 cores). The SIMD reduction has a fixed lane order, so an entry's value does not
// depend on where it sits in a tile.
template <typename T>
void gemm_abt(const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t M, int64_t N, int64_t K) {
  // Four columns at a time share each load of a row of A. A short last group repeats row N−1 (results dropped), so
  // every entry comes from the same code path.
  for (int64_t i = 0; i < M; ++i) {
    const T* a = A + i * lda;
    for (int64_t j = 0; j < N; j += 4) {
      const T* b0 = B + std::min(j, N - 1) * ldb;
      const T* b1 = B + std::min(j + 1, N - 1) * ldb;
      const T* b2 = B + std::min(j + 2, N - 1) * ldb;
      const T* b3 = B + std::min(j + 3, N - 1) * ldb;
      T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t k = 0; k < K; ++k) {
        const T x = a[k];
        s0 += x * b0[k];
        s1 += x * b1[k];
        s2 += x * b2[k];
        s3 += x * b3[k];
      }
      const T sums[4] = {s0, s1, s2, s3};
      for (int64_t c = 0; c < 4 && j + c < N; ++c) C[i * N + j + c] = sums[c];
    }
  }
}

template <typename T>
std::vector<double> row_sq_norms(const T* X, int64_t n, int64_t d) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (int64_t k = 0; k < d; ++k) s += static_cast<double>(X[i * d + k]) * static_cast<double>(X[i * d + k]);
    out[static_cast<size_t>(i)] = s;
  }
  return out;
}

// X [n, d] with its column means removed, in fp64.
template <typename T>
std::vector<double> column_centred(const T* X, int64_t n, int64_t d) {
  std::vector<double> mean(static_cast<size_t>(d), 0.0), out(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k) mean[static_cast<size_t>(k)] += static_cast<double>(X[i * d + k]);
  for (double& m : mean) m /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k)
      out[static_cast<size_t>(i * d + k)] = static_cast<double>(X[i * d + k]) - mean[static_cast<size_t>(k)];
  return out;
}

// Dot-product tiles of A Bᵀ: visit(i0, j0, mi, mj, dots) for each tile (dots [mi, mj] row-major, input precision).
template <typename T, typename Visit>
void for_each_dot_tile(const T* A, int64_t na, const T* B, int64_t nb, int64_t d, int64_t tile, Visit&& visit) {
  std::vector<T> dots(static_cast<size_t>(std::min(tile, na) * std::min(tile, nb)));
  for (int64_t i0 = 0; i0 < na; i0 += tile) {
    const int64_t mi = std::min(tile, na - i0);
    for (int64_t j0 = 0; j0 < nb; j0 += tile) {
      const int64_t mj = std::min(tile, nb - j0);
      gemm_abt(A + i0 * d, d, B + j0 * d, d, dots.data(), mi, mj, d);
      visit(i0, j0, mi, mj, dots.data());
    }
  }
}

// ‖H_a K H_b‖²_F for the RBF kernel in two passes over kernel tiles: row/column/grand means, then the sum of
// (K − r_i − c_j + ḡ)². Subtracting before squaring keeps the error of each centred entry at the fp64 rounding of K,
// whether K is near 0 (narrow σ) or near 1 (wide σ). A kernel that fits one tile is computed once and reused.
template <typename T>
double rbf_centred_sq_norm(const T* A, int64_t na, const T* B, int64_t nb, int64_t d, double sigma, int64_t tile) {
  const double inv_two_sigma_sq = 1.0 / (2.0 * sigma * sigma);
  const std::vector<double> norm_a = row_sq_norms(A, na, d), norm_b = row_sq_norms(B, nb, d);
  std::vector<double> kernel(static_cast<size_t>(std::min(tile, na) * std::min(tile, nb)));
  // Fills `kernel` with the tile's entries exp(−D²/2σ²), D² = ‖x‖² + ‖y‖² − 2x·y clamped at 0.
  const auto tile_kernel = [&](int64_t i0, int64_t j0, int64_t mi, int64_t mj, const T* dots) {
    for (int64_t i = 0; i < mi; ++i)
      for (int64_t j = 0; j < mj; ++j) {
        const double dot = static_cast<double>(dots[i * mj + j]);
        const double dist_sq =
            std::max(0.0, norm_a[static_cast<size_t>(i0 + i)] + norm_b[static_cast<size_t>(j0 + j)] - 2.0 * dot);
        kernel[static_cast<size_t>(i * mj + j)] = std::exp(-dist_sq * inv_two_sigma_sq);
      }
  };
  std::vector<double> row(static_cast<size_t>(na), 0.0), col(static_cast<size_t>(nb), 0.0);
  for_each_dot_tile(A, na, B, nb, d, tile, [&](int64_t i0, int64_t j0, int64_t mi, int64_t mj, const T* dots) {
    tile_kernel(i0, j0, mi, mj, dots);
    for (int64_t i = 0; i < mi; ++i)
      for (int64_t j = 0; j < mj; ++j) {
        const double k = kernel[static_cast<size_t>(i * mj + j)];
        row[static_cast<size_t>(i0 + i)] += k;
        col[static_cast<size_t>(j0 + j)] += k;
      }
  });
  double grand = 0.0;
  for (double& r : row) grand += r, r /= static_cast<double>(nb);
  for (double& c : col) c /= static_cast<double>(na);
  grand /= static_cast<double>(na * nb);
  double sum_sq = 0.0;
  const auto accumulate = [&](int64_t i0, int64_t j0, int64_t mi, int64_t mj) {
    for (int64_t i = 0; i < mi; ++i)
      for (int64_t j = 0; j < mj; ++j) {
        const double c = kernel[static_cast<size_t>(i * mj + j)] - row[static_cast<size_t>(i0 + i)] -
                         col[static_cast<size_t>(j0 + j)] + grand;
        sum_sq += c * c;
      }
  };
  if (na <= tile && nb <= tile) {
    accumulate(0, 0, na, nb);  // the one tile is still in `kernel`
  } else {
    for_each_dot_tile(A, na, B, nb, d, tile, [&](int64_t i0, int64_t j0, int64_t mi, int64_t mj, const T* dots) {
      tile_kernel(i0, j0, mi, mj, dots);
      accumulate(i0, j0, mi, mj);
    });
  }
  return sum_sq;
}

double numpy_median(std::vector<double> v) {
  HLM_CHECK(!v.empty(), "median of nothing");
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

}  // namespace

template <typename T>
double centered_kernel_sq_norm(const T* A, int64_t na, const T* B, int64_t nb, int64_t d, const KernelSpec& kernel,
                               int64_t tile) {
  HLM_CHECK_INPUT(na > 0 && nb > 0 && d > 0, "kernel of empty token sets (", na, " x ", nb, ", d ", d, ")");
  HLM_CHECK_INPUT(tile > 0, "kernel tile must be positive");
  if (kernel.kind == CkaKernel::Linear) {
    const std::vector<double> a = column_centred(A, na, d), b = column_centred(B, nb, d);
    double sum_sq = 0.0;
    for_each_dot_tile(a.data(), na, b.data(), nb, d, tile,
                      [&](int64_t, int64_t, int64_t mi, int64_t mj, const double* v) {
                        for (int64_t e = 0; e < mi * mj; ++e) sum_sq += v[e] * v[e];
                      });
    return sum_sq;
  }
  HLM_CHECK_INPUT(kernel.sigma > 0 && std::isfinite(kernel.sigma), "RBF bandwidth must be positive, got ",
                  kernel.sigma);
  return rbf_centred_sq_norm(A, na, B, nb, d, kernel.sigma, tile);
}

double SoftCkaTerms::value() const {
  const double denom = std::sqrt(h11 * h22);
  return denom > 0 ? h12 / denom : std::numeric_limits<double>::quiet_NaN();
}

template <typename T>
SoftCkaTerms softcka_pair_terms(const T* A, int64_t n1, const T* B, int64_t n2, int64_t d, const KernelSpec& kernel,
                                int64_t tile) {
  SoftCkaTerms t;
  t.h11 = centered_kernel_sq_norm(A, n1, A, n1, d, kernel, tile);
  t.h22 = centered_kernel_sq_norm(B, n2, B, n2, d, kernel, tile);
  t.h12 = centered_kernel_sq_norm(A, n1, B, n2, d, kernel, tile);
  return t;
}

double median_sq_distance_pairs(const float* X, int64_t n, int64_t d) {
  HLM_CHECK_INPUT(n >= 2, "median distance needs at least 2 tokens, got ", n);
  const std::vector<double> norms = row_sq_norms(X, n, d);
  std::vector<double> dist;
  dist.reserve(static_cast<size_t>(n * (n - 1) / 2));
  for_each_dot_tile(X, n, X, n, d, kDefaultKernelTile,
                    [&](int64_t i0, int64_t j0, int64_t mi, int64_t mj, const float* dots) {
                      for (int64_t i = i0; i < i0 + mi; ++i)
                        for (int64_t j = std::max(j0, i + 1); j < j0 + mj; ++j)
                          dist.push_back(std::max(0.0, norms[static_cast<size_t>(i)] + norms[static_cast<size_t>(j)] -
                                                           2.0 * dots[(i - i0) * mj + (j - j0)]));
                    });
  return numpy_median(std::move(dist));
}

namespace {

// Gram matrix [n, n] of the rows of X [n, p] (linear).
std::vector<double> gram_linear(const double* X, int64_t n, int64_t p) {
  std::vector<double> g(static_cast<size_t>(n * n));
  gemm_abt(X, p, X, p, g.data(), n, n, p);
  return g;
}

// RBF Gram with σ² = t² · median of the full squared-distance matrix (Kornblith et al.'s gram_rbf).
std::vector<double> gram_rbf(const double* X, int64_t n, int64_t p, double t) {
  std::vector<double> g = gram_linear(X, n, p), dist(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      dist[static_cast<size_t>(i * n + j)] =
          g[static_cast<size_t>(i * n + i)] + g[static_cast<size_t>(j * n + j)] - 2.0 * g[static_cast<size_t>(i * n + j)];
  const double median = numpy_median(dist);
  HLM_CHECK_INPUT(median > 0, "RBF CKA: median squared distance is 0 (too many identical rows)");
  for (size_t k = 0; k < dist.size(); ++k) g[k] = std::exp(-dist[k] / (2.0 * t * t * median));
  return g;
}

// In place: K̃ = K − r_i − r_j + r̄ (r the row means of the symmetric K).
void centre_gram(std::vector<double>& k, int64_t n) {
  std::vector<double> mean(static_cast<size_t>(n), 0.0);
  double grand = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) mean[static_cast<size_t>(i)] += k[static_cast<size_t>(i * n + j)];
    mean[static_cast<size_t>(i)] /= static_cast<double>(n);
    grand += mean[static_cast<size_t>(i)];
  }
  grand /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      k[static_cast<size_t>(i * n + j)] += grand - mean[static_cast<size_t>(i)] - mean[static_cast<size_t>(j)];
}

double cka_of_grams(std::vector<double> k, std::vector<double> l, int64_t n) {
  centre_gram(k, n);
  centre_gram(l, n);
  double kl = 0.0, kk = 0.0, ll = 0.0;
  for (size_t i = 0; i < k.size(); ++i) kl += k[i] * l[i], kk += k[i] * k[i], ll += l[i] * l[i];
  return kl / std::sqrt(kk * ll);
}

}  // namespace

double cka_linear(const double* X, const double* Y, int64_t n, int64_t p, int64_t q) {
  HLM_CHECK_INPUT(n >= 2, "CKA needs at least 2 rows");
  return cka_of_grams(gram_linear(X, n, p), gram_linear(Y, n, q), n);
}

double cka_rbf(const double* X, const double* Y, int64_t n, int64_t p, int64_t q, double t) {
  HLM_CHECK_INPUT(n >= 2, "CKA needs at least 2 rows");
  HLM_CHECK_INPUT(t > 0, "RBF CKA: the median fraction must be positive");
  return cka_of_grams(gram_rbf(X, n, p, t), gram_rbf(Y, n, q, t), n);
}

template double centered_kernel_sq_norm<float>(const float*, int64_t, const float*, int64_t, int64_t,
                                               const KernelSpec&, int64_t);
template double centered_kernel_sq_norm<double>(const double*, int64_t, const double*, int64_t, int64_t,
                                                const KernelSpec&, int64_t);
template SoftCkaTerms softcka_pair_terms<float>(const float*, int64_t, const float*, int64_t, int64_t,
                                                const KernelSpec&, int64_t);
template SoftCkaTerms softcka_pair_terms<double>(const double*, int64_t, const double*, int64_t, int64_t,
                                                 const KernelSpec&, int64_t);

}  // namespace hlm
