// CKA / SoftCKA: the test vectors of the shared evals.md §3.1–3.2 (recomputed there with Kornblith et al.'s
// formulas), and the properties the metric must have (identity, token-order invariance, range, tiling).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "analysis/softcka.h"
#include "support/random.h"

namespace hlm {
namespace {

// The vectors are quoted with 8 decimals (rounding ≤ 5e-9); 1e-7 is the bound the [align] issue sets.
constexpr double kVectorTol = 1e-7;

template <typename F>
std::vector<double> matrix(int64_t rows, int64_t cols, F&& f) {
  std::vector<double> m(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m[static_cast<size_t>(i * cols + j)] = f(double(i), double(j));
  return m;
}

TEST(Cka, EvalsTestVectors) {
  const auto X = matrix(6, 3, [](double i, double j) { return std::sin(1 + i + 2 * j); });
  const auto Y = matrix(6, 3, [](double i, double j) { return std::cos(0.5 * i * j + j) + 0.5 * std::sin(1 + i + 2 * j); });
  EXPECT_NEAR(cka_linear(X.data(), Y.data(), 6, 3, 3), 0.83333443, kVectorTol);
  EXPECT_NEAR(cka_rbf(X.data(), Y.data(), 6, 3, 3, 1.0), 0.83731566, kVectorTol);
  EXPECT_NEAR(cka_rbf(X.data(), Y.data(), 6, 3, 3, 0.5), 0.90846866, kVectorTol);
  EXPECT_NEAR(cka_linear(X.data(), X.data(), 6, 3, 3), 1.0, 1e-12);
}

struct VectorCase {
  KernelSpec kernel;
  double h11, h22, h12, ratio;
};

TEST(SoftCka, EvalsTestVectors) {
  const auto A = matrix(5, 3, [](double i, double j) { return std::sin(0.3 * i + 0.7 * j); });
  const auto B = matrix(7, 3, [](double i, double j) { return std::sin(0.3 * i + 0.7 * j + 0.2) + 0.1 * std::cos(i); });
  const VectorCase cases[] = {
      {{CkaKernel::Linear, 0.0}, 0.57385720, 3.48121331, 0.72927511, 0.51596965},
      {{CkaKernel::Rbf, 1.0}, 0.35909425, 1.59508282, 0.32796790, 0.43334670},
  };
  for (const VectorCase& c : cases) {
    const SoftCkaTerms t = softcka_pair_terms(A.data(), 5, B.data(), 7, 3, c.kernel);
    EXPECT_NEAR(t.h11, c.h11, kVectorTol);
    EXPECT_NEAR(t.h22, c.h22, kVectorTol);
    EXPECT_NEAR(t.h12, c.h12, kVectorTol);
    EXPECT_NEAR(t.value(), c.ratio, kVectorTol);
  }
}

// A small corpus of random "sentences" [n_s, d] in two languages (float, as the engine captures them).
struct Corpus {
  int64_t d = 16;
  std::vector<std::vector<float>> lang1, lang2;
  std::vector<int64_t> n1, n2;
};

Corpus random_corpus(uint64_t seed) {
  Corpus c;
  for (int s = 0; s < 6; ++s) {
    const int64_t a = 3 + (s * 5) % 11, b = 4 + (s * 7) % 13;
    c.n1.push_back(a);
    c.n2.push_back(b);
    c.lang1.push_back(test::random_vector(static_cast<size_t>(a * c.d), seed * 100 + s));
    auto y = test::random_vector(static_cast<size_t>(b * c.d), seed * 100 + 50 + s);
    c.lang2.push_back(y);
  }
  return c;
}

template <typename T>
SoftCkaTerms corpus_terms(const Corpus& c, const KernelSpec& k, int64_t tile = kDefaultKernelTile) {
  SoftCkaTerms sum;
  for (size_t s = 0; s < c.n1.size(); ++s) {
    const std::vector<T> a(c.lang1[s].begin(), c.lang1[s].end()), b(c.lang2[s].begin(), c.lang2[s].end());
    sum += softcka_pair_terms(a.data(), c.n1[s], b.data(), c.n2[s], c.d, k, tile);
  }
  return sum;
}

// Rows ~ N(0, 1) in d = 16: squared distances ~ 32, the median heuristic gives σ ≈ 5.7. Both sides of it, a very
// narrow one (K ≈ 0 off the diagonal) and the linear kernel.
const KernelSpec kKernels[] = {{CkaKernel::Rbf, 8.0}, {CkaKernel::Rbf, 3.0}, {CkaKernel::Rbf, 0.7},
                               {CkaKernel::Linear, 0.0}};

TEST(SoftCka, IdenticalInputsGiveOne) {
  const Corpus c = random_corpus(1);
  for (const KernelSpec& k : kKernels) {
    SoftCkaTerms sum;
    for (size_t s = 0; s < c.n1.size(); ++s)
      sum += softcka_pair_terms(c.lang1[s].data(), c.n1[s], c.lang1[s].data(), c.n1[s], c.d, k);
    // K11, K22 and K12 are then the same computation on the same data: equal up to fp64 summation.
    EXPECT_NEAR(sum.value(), 1.0, 1e-12);
  }
}

TEST(SoftCka, TokenOrderDoesNotMatter) {
  const Corpus c = random_corpus(2);
  Corpus shuffled = c;
  for (size_t s = 0; s < c.n2.size(); ++s) {
    // Reverse the token order of each language-2 sentence and rotate language 1's.
    for (int64_t i = 0; i < c.n2[s]; ++i)
      std::copy_n(c.lang2[s].begin() + i * c.d, c.d, shuffled.lang2[s].begin() + (c.n2[s] - 1 - i) * c.d);
    std::rotate(shuffled.lang1[s].begin(), shuffled.lang1[s].begin() + c.d, shuffled.lang1[s].end());
  }
  for (const KernelSpec& k : kKernels) {
    // Each kernel entry is computed the same way wherever its row sits (fixed-order dot products), so only the fp64
    // summation order changes: ≤ 1e-12 relative, in either input precision.
    const SoftCkaTerms a = corpus_terms<double>(c, k), b = corpus_terms<double>(shuffled, k);
    EXPECT_NEAR(a.h12, b.h12, 1e-12 * a.h12);
    EXPECT_NEAR(a.value(), b.value(), 1e-12);
    const SoftCkaTerms af = corpus_terms<float>(c, k), bf = corpus_terms<float>(shuffled, k);
    EXPECT_NEAR(af.h12, bf.h12, 1e-12 * af.h12);
    EXPECT_NEAR(af.value(), bf.value(), 1e-12);
  }
}

TEST(SoftCka, ValueIsInUnitRange) {
  for (uint64_t seed = 3; seed < 8; ++seed) {
    const Corpus c = random_corpus(seed);
    for (const KernelSpec& k : kKernels) {
      for (double v : {corpus_terms<float>(c, k).value(), corpus_terms<double>(c, k).value()}) {
        EXPECT_GE(v, 0.0);
        EXPECT_LE(v, 1.0);
      }
    }
  }
}

TEST(SoftCka, TiledEqualsUntiled) {
  const Corpus c = random_corpus(9);
  for (const KernelSpec& k : kKernels) {
    for (int64_t tile : {1, 3, 5}) {
      // fp64: tiles change only which GEMM call makes an entry and the summation order (≤ 1e-12 relative).
      const SoftCkaTerms whole = corpus_terms<double>(c, k, 1 << 20), tiled = corpus_terms<double>(c, k, tile);
      EXPECT_NEAR(tiled.h11, whole.h11, 1e-12 * whole.h11) << tile;
      EXPECT_NEAR(tiled.h22, whole.h22, 1e-12 * whole.h22) << tile;
      EXPECT_NEAR(tiled.h12, whole.h12, 1e-12 * whole.h12) << tile;
    }
  }
}

// Accurate where K ≈ 1 everywhere (σ far above the distances), by comparison with a direct double centring of the
// formed kernel (entries as expm1, so exact to fp64 relative precision).
TEST(SoftCka, AccurateForVeryWideBandwidth) {
  const int64_t n = 9, d = 4;
  const auto A = matrix(n, d, [](double i, double j) { return std::sin(1.3 * i + 0.4 * j); });
  const double sigma = 1e4;
  std::vector<double> k(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dist = 0;
      for (int64_t t = 0; t < d; ++t) dist += std::pow(A[size_t(i * d + t)] - A[size_t(j * d + t)], 2);
      k[size_t(i * n + j)] = std::expm1(-dist / (2 * sigma * sigma));
    }
  std::vector<double> row(size_t(n), 0.0);
  double grand = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) row[size_t(i)] += k[size_t(i * n + j)] / double(n);
    grand += row[size_t(i)] / double(n);
  }
  double direct = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) direct += std::pow(k[size_t(i * n + j)] - row[size_t(i)] - row[size_t(j)] + grand, 2);
  const double got = centered_kernel_sq_norm(A.data(), n, A.data(), n, d, {CkaKernel::Rbf, sigma});
  // Centred entries ~1e-8 carry an absolute error ~1e-16 (rounding of K ≈ 1): agreement to 1e-6 relative.
  EXPECT_NEAR(got, direct, 1e-6 * direct);
  EXPECT_GT(direct, 0.0);
}

TEST(SoftCka, MedianOfPairDistances) {
  // Points 0, 1, 3 on a line: squared distances 1, 9, 4 -> median 4. Adding 10: 1, 4, 9, 49, 81, 100 -> (9+49)/2.
  const std::vector<float> x3 = {0, 1, 3}, x4 = {0, 1, 3, 10};
  EXPECT_DOUBLE_EQ(median_sq_distance_pairs(x3.data(), 3, 1), 4.0);
  EXPECT_DOUBLE_EQ(median_sq_distance_pairs(x4.data(), 4, 1), 29.0);
}

}  // namespace
}  // namespace hlm
