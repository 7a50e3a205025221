// CKA (Kornblith et al. 2019) and SoftCKA (the seed's Eq. 1 and App. D; docs/analysis.md, shared evals.md §3).
//
// SoftCKA of a corpus D of parallel sentence pairs s, with token states A_s [n1, d] (language 1) and B_s [n2, d]
// (language 2) at one model location:
//   K11 = k(A,A) [n1,n1],  K22 = k(B,B) [n2,n2],  K12 = k(A,B) [n1,n2]   (one kernel, one bandwidth for all three)
//   K̃ = H_a K H_b (double centring, H_n = I − 11ᵀ/n),  h_ab = ‖K̃_ab‖²_F
//   SoftCKA(D) = Σ_s h12 / sqrt(Σ_s h11 · Σ_s h22)          (sums are raw: no per-pair length normalisation)
// Kernels: RBF k(x,y) = exp(−‖x−y‖² / (2σ²)) or linear k(x,y) = x·y.
//
// How ‖H_a K H_b‖²_F is computed (never forming H or, for long inputs, K):
//   RBF: kernel tiles of `tile`×`tile` entries from D² = ‖x‖² + ‖y‖² − 2x·y (dot products in the input precision,
//   norms and D² in fp64, D² clamped at 0), two passes in fp64: row means r, column means c and grand
//   mean ḡ of K, then Σ (K_ij − r_i − c_j + ḡ)². Centring before squaring keeps each entry's error at the rounding
//   of K (no cancellation of large sums when K is near 0 or near 1). A kernel of one tile is computed once.
//   Linear: H_a A Bᵀ H_b = Ã B̃ᵀ with column-centred Ã, B̃ (fp64), so ‖K̃‖² is the sum of squares of Ã B̃ᵀ tiles.
// Memory: O(tile² + (n_a + n_b)·d) per call. Single-threaded (callers parallelise over pairs / layers).
// Properties (tested): A = B ⇒ 1; token order within a sentence does not matter; value in [0, 1].
#pragma once
#include <cstdint>
#include <vector>

namespace hlm {

enum class CkaKernel { Rbf, Linear };

struct KernelSpec {
  CkaKernel kind = CkaKernel::Rbf;
  double sigma = 1.0;  // RBF bandwidth σ > 0 (unused by the linear kernel)
};

inline constexpr int64_t kDefaultKernelTile = 128;

// ‖H_a K H_b‖²_F for K[i,j] = k(A_i, B_j); A [na, d], B [nb, d] contiguous row-major (T = float or double).
template <typename T>
double centered_kernel_sq_norm(const T* A, int64_t na, const T* B, int64_t nb, int64_t d, const KernelSpec& kernel,
                               int64_t tile = kDefaultKernelTile);

// The three corpus sums of Eq. 1; `+=` adds a pair (or a partial corpus), value() normalises.
struct SoftCkaTerms {
  double h11 = 0.0, h22 = 0.0, h12 = 0.0;
  SoftCkaTerms& operator+=(const SoftCkaTerms& o) {
    h11 += o.h11, h22 += o.h22, h12 += o.h12;
    return *this;
  }
  // Σh12 / sqrt(Σh11 Σh22); NaN when the denominator is 0 (the score is undefined, e.g. all tokens identical).
  double value() const;
};

// h11, h22, h12 of one sentence pair: A [n1, d], B [n2, d].
template <typename T>
SoftCkaTerms softcka_pair_terms(const T* A, int64_t n1, const T* B, int64_t n2, int64_t d, const KernelSpec& kernel,
                                int64_t tile = kDefaultKernelTile);

// Median of the squared distances ‖x_i − x_j‖² over distinct pairs i < j of the rows of X [n, d] (n ≥ 2; the mean of
// the two middle values for an even count). The SoftCKA median heuristic is σ = sqrt of this over a token sample.
double median_sq_distance_pairs(const float* X, int64_t n, int64_t d);

// Standard CKA on paired rows X [n, p], Y [n, q] (fp64, forms the n×n Gram matrices: a reference for small n).
//   cka_linear: ⟨K̃, L̃⟩ / (‖K̃‖ ‖L̃‖) with K = XXᵀ, L = YYᵀ.
//   cka_rbf: each Gram with its own bandwidth σ² = t² · median(D²), D² the full n×n matrix of squared distances
//   (diagonal zeros included), as in Kornblith et al.'s reference code; t is the "fraction of the median distance".
double cka_linear(const double* X, const double* Y, int64_t n, int64_t p, int64_t q);
double cka_rbf(const double* X, const double* Y, int64_t n, int64_t p, int64_t q, double t);

}  // namespace hlm
