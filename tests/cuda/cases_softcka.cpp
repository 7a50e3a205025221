// SoftCKA kernel sums: CUDA (src/ops/softcka/softcka.cu) vs the CPU reference (src/analysis/softcka.cpp).
// Each case is one batch in one launch: many jobs (h11, h22, h12 of several sentence pairs) over one packed row
// matrix, sentence lengths odd and uneven (1 .. 200 tokens: one and several 32-entry tiles, partial tiles), feature
// sizes 1 .. 1000 (partial 32-wide slices), RBF with σ far below and far above the typical distance, and linear.
//
// Reference: centered_kernel_sq_norm<double> on the same inputs widened to double (everything fp64, as the kernel).
// The fp32 CPU path (centered_kernel_sq_norm<float>, fp32 dot products) is printed for comparison, not checked
// against: its own rounding is what separates it from both fp64 results.
//
// Tolerance (both sides fp64, u = 2^-53; derived per job, the bound is printed with the worst error):
//   RBF: each D²_ij = ‖a‖² + ‖b‖² − 2a·b is a sum of d-term fp64 sums whose roundings differ between the two
//     implementations by at most δ = 2·(d + 2)·u·(‖a_i‖ + ‖b_j‖)² (norms and dot product, different orders), so
//     |ΔK| ≤ K_max·(δ/(2σ²) + 4u) (exp and scaling; K_max the job's largest entry, exact enough from the test's own
//     fp64 distances). A centred entry K − r − c + ḡ adds the rounding of three n-term means of entries ≤ K_max:
//     |Δc| ≤ 4·|ΔK| + 4·(na + nb)·u·K_max. With h = Σc², |Δh| ≤ 2·sqrt(na·nb·h)·|Δc| + na·nb·|Δc|² + na·nb·u·h
//     (the final sum's rounding).
//   Linear: entries are d-term dot products of centred features (the centring an n-term mean):
//     |Δv| ≤ 2·(d + na + nb)·u·max‖ã‖·max‖b̃‖ (+ the same sum terms as above).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "analysis/softcka.h"
#include "harness.h"
#include "ops/softcka/softcka_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

constexpr double kU64 = 0x1p-53;

struct Sentence {
  int64_t row = 0, n = 0;
};

// A batch: sentences packed in `rows` [n_rows, d]; pairs (english, other) as sentence indices.
struct Batch {
  int64_t d = 0;
  std::vector<float> rows;
  std::vector<Sentence> sentences;
};

Batch make_batch(const std::vector<int64_t>& lengths, int64_t d, uint64_t stream, float offset = 0.0f) {
  Batch b;
  b.d = d;
  int64_t total = 0;
  for (int64_t n : lengths) b.sentences.push_back({total, n}), total += n;
  b.rows = make_values(size_t(total * d), Fill::Normal, stream);
  for (float& v : b.rows) v += offset;  // a shared offset: what the linear kernel's centring must remove
  return b;
}

// h11, h22, h12 jobs of each pair (as align builds them).
std::vector<SoftckaCudaJob> pair_jobs(const Batch& b, const std::vector<std::pair<size_t, size_t>>& pairs,
                                      double sigma, int64_t& ws_total) {
  std::vector<SoftckaCudaJob> jobs;
  ws_total = 0;
  const auto add = [&](const Sentence& x, const Sentence& y) {
    jobs.push_back({x.row, x.n, y.row, y.n, ws_total, sigma});
    ws_total += softcka_cuda_workspace_doubles(x.n, y.n, b.d);
  };
  for (const auto& [e, x] : pairs) {
    add(b.sentences[e], b.sentences[e]);
    add(b.sentences[x], b.sentences[x]);
    add(b.sentences[e], b.sentences[x]);
  }
  return jobs;
}

double max_row_norm(const std::vector<double>& rows, int64_t row, int64_t n, int64_t d, bool centre) {
  std::vector<double> mean(size_t(d), 0.0);
  if (centre)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < d; ++k) mean[size_t(k)] += rows[size_t((row + i) * d + k)] / double(n);
  double best = 0;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t k = 0; k < d; ++k) {
      const double v = rows[size_t((row + i) * d + k)] - mean[size_t(k)];
      s += v * v;
    }
    best = std::max(best, std::sqrt(s));
  }
  return best;
}

// max_ij K_ij of an RBF job (errors of K are relative to K: tiny entries carry tiny absolute errors).
double max_rbf_entry(const std::vector<double>& rows, const SoftckaCudaJob& j, int64_t d) {
  double best_sq = INFINITY;
  for (int64_t i = 0; i < j.na; ++i)
    for (int64_t m = 0; m < j.nb; ++m) {
      double s = 0;
      for (int64_t k = 0; k < d; ++k) {
        const double v = rows[size_t((j.a_row + i) * d + k)] - rows[size_t((j.b_row + m) * d + k)];
        s += v * v;
      }
      best_sq = std::min(best_sq, s);
    }
  return std::exp(-best_sq / (2.0 * j.sigma * j.sigma));
}

// The header's bound on |gpu − ref64| for one job.
double job_bound(const std::vector<double>& rows, const SoftckaCudaJob& j, int64_t d, CkaKernel kernel, double h) {
  const double cells = double(j.na * j.nb);
  const bool linear = kernel == CkaKernel::Linear;
  const double na_ = max_row_norm(rows, j.a_row, j.na, d, linear), nb_ = max_row_norm(rows, j.b_row, j.nb, d, linear);
  double dc;
  if (linear) {
    dc = 2.0 * double(d + j.na + j.nb) * kU64 * na_ * nb_;
  } else {
    const double delta = 2.0 * double(d + 2) * kU64 * (na_ + nb_) * (na_ + nb_);
    const double k_max = max_rbf_entry(rows, j, d);
    dc = k_max * (4.0 * (delta / (2.0 * j.sigma * j.sigma) + 4.0 * kU64) + 4.0 * double(j.na + j.nb) * kU64);
  }
  return 2.0 * std::sqrt(cells * h) * dc + cells * dc * dc + cells * kU64 * h;
}

struct Case {
  std::string name;
  std::vector<int64_t> lengths;
  std::vector<std::pair<size_t, size_t>> pairs;
  int64_t d;
  CkaKernel kernel;
  double sigma_scale;  // σ = scale · sqrt(2d) (the typical distance of N(0, 1) rows); unused for linear
  float offset = 0.0f;
};

const std::vector<Case> kCases = {
    {"rbf typical σ", {7, 31, 33, 1, 65, 40, 29}, {{0, 1}, {0, 2}, {3, 4}, {5, 6}, {2, 3}}, 64, CkaKernel::Rbf, 1.0},
    {"rbf small σ", {13, 37, 50, 3}, {{0, 1}, {2, 3}, {1, 2}}, 129, CkaKernel::Rbf, 0.05},
    {"rbf large σ", {13, 37, 50, 3}, {{0, 1}, {2, 3}, {1, 2}}, 129, CkaKernel::Rbf, 300.0},
    {"rbf long (several tiles)", {200, 129, 97}, {{0, 1}, {1, 2}}, 1000, CkaKernel::Rbf, 1.0},
    {"rbf d=1", {5, 9, 2}, {{0, 1}, {1, 2}}, 1, CkaKernel::Rbf, 1.0},
    {"linear", {7, 31, 33, 1, 65}, {{0, 1}, {0, 2}, {3, 4}}, 64, CkaKernel::Linear, 0.0},
    {"linear offset 30", {17, 45, 90}, {{0, 1}, {1, 2}}, 333, CkaKernel::Linear, 0.0, 30.0f},
    {"linear long", {200, 129}, {{0, 1}}, 1000, CkaKernel::Linear, 0.0},
};

SoftckaCudaKernel to_cuda(CkaKernel k) { return k == CkaKernel::Linear ? SoftckaCudaKernel::Linear : SoftckaCudaKernel::Rbf; }

// Runs a batch's jobs in one launch; returns the per-job results (checks guards and unchanged inputs).
std::vector<double> run_gpu(const Batch& b, const std::vector<SoftckaCudaJob>& jobs, int64_t ws_total, CkaKernel kernel,
                            const std::string& what) {
  DeviceBuffer rows = DeviceBuffer::from(b.rows, "rows"), d_jobs = DeviceBuffer::from(jobs, "jobs");
  DeviceBuffer out(jobs.size() * sizeof(double), "out"), ws(size_t(ws_total) * sizeof(double), "workspace");
  softcka_centered_sq_norms_cuda(out.as<double>(), rows.as<float>(), b.d, d_jobs.as<SoftckaCudaJob>(),
                                 int64_t(jobs.size()), to_cuda(kernel), ws.as<double>(), ctx().stream());
  ctx().synchronize();
  EXPECT_TRUE(buffers_ok({&out, &ws}, {&rows, &d_jobs})) << what;
  return out.download<double>();
}

}  // namespace

TEST(SoftckaCuda, KernelNormsMatchCpuReference) {
  HLM_REQUIRE_CUDA();
  uint64_t stream = 100;
  for (const Case& c : kCases) {
    const Batch b = make_batch(c.lengths, c.d, stream++, c.offset);
    const double sigma = c.sigma_scale * std::sqrt(2.0 * double(c.d));
    int64_t ws_total = 0;
    const std::vector<SoftckaCudaJob> jobs = pair_jobs(b, c.pairs, sigma, ws_total);
    const std::vector<double> gpu = run_gpu(b, jobs, ws_total, c.kernel, c.name);
    ASSERT_EQ(gpu.size(), jobs.size());

    const std::vector<double> rows64 = to_f64(b.rows);
    const KernelSpec spec{c.kernel, sigma};
    double worst_ratio = 0, worst_cpu32 = 0;
    SoftCkaTerms gpu_terms, ref_terms, bounds;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const SoftckaCudaJob& jb = jobs[j];
      const double ref = centered_kernel_sq_norm(rows64.data() + jb.a_row * c.d, jb.na, rows64.data() + jb.b_row * c.d,
                                                 jb.nb, c.d, spec);
      const double cpu32 = centered_kernel_sq_norm(b.rows.data() + jb.a_row * c.d, jb.na,
                                                   b.rows.data() + jb.b_row * c.d, jb.nb, c.d, spec);
      const double bound = job_bound(rows64, jb, c.d, c.kernel, ref);
      const double err = std::abs(gpu[j] - ref);
      EXPECT_LE(err, bound) << c.name << " job " << j << ": gpu " << gpu[j] << " ref " << ref;
      worst_ratio = std::max(worst_ratio, bound > 0 ? err / bound : 0.0);
      if (ref > 0) worst_cpu32 = std::max(worst_cpu32, std::abs(cpu32 - ref) / ref);
      double* g = j % 3 == 0 ? &gpu_terms.h11 : j % 3 == 1 ? &gpu_terms.h22 : &gpu_terms.h12;
      double* r = j % 3 == 0 ? &ref_terms.h11 : j % 3 == 1 ? &ref_terms.h22 : &ref_terms.h12;
      double* e = j % 3 == 0 ? &bounds.h11 : j % 3 == 1 ? &bounds.h22 : &bounds.h12;
      *g += gpu[j], *r += ref, *e += bound;
    }
    std::cout << "[check] softcka " << c.name << ": " << jobs.size() << " jobs, worst |gpu-ref64|/bound "
              << worst_ratio << "; fp32 CPU path worst rel. diff from ref64 " << worst_cpu32 << "; SoftCKA gpu "
              << gpu_terms.value() << " ref " << ref_terms.value() << "\n";
    // value = h12 / sqrt(h11·h22): relative errors add (halved under the root), plus a few roundings of the ratio.
    const double rel = bounds.h12 / ref_terms.h12 + 0.5 * (bounds.h11 / ref_terms.h11 + bounds.h22 / ref_terms.h22);
    EXPECT_NEAR(gpu_terms.value(), ref_terms.value(), std::abs(ref_terms.value()) * (rel + 8 * kU64)) << c.name;
  }
}

// Identical sentences on both sides (the same rows as A and B, and a copy of them) give SoftCKA 1: h11 = h22 = h12
// bit for bit, because every job does the same operations on the same values.
TEST(SoftckaCuda, IdenticalInputsGiveOne) {
  HLM_REQUIRE_CUDA();
  for (const CkaKernel kernel : {CkaKernel::Rbf, CkaKernel::Linear}) {
    Batch b = make_batch({37, 37}, 100, 7);
    std::copy(b.rows.begin(), b.rows.begin() + 37 * 100, b.rows.begin() + 37 * 100);  // sentence 1 = sentence 0
    int64_t ws_total = 0;
    const std::vector<SoftckaCudaJob> jobs = pair_jobs(b, {{0, 1}, {0, 0}}, std::sqrt(200.0), ws_total);
    const std::vector<double> gpu = run_gpu(b, jobs, ws_total, kernel, "identical");
    for (size_t p = 0; p < 2; ++p) {
      const SoftCkaTerms t{gpu[3 * p], gpu[3 * p + 1], gpu[3 * p + 2]};
      EXPECT_EQ(t.h11, t.h12);
      EXPECT_EQ(t.h22, t.h12);
      EXPECT_NEAR(t.value(), 1.0, 4 * kU64);  // sqrt(h·h) rounds at most twice
    }
  }
}

// Jobs split over launches give the same bits as one launch (no state carried between jobs or blocks), and a batch
// larger than the grid cap is not needed for this: every job is independent of its position.
TEST(SoftckaCuda, JobOrderDoesNotChangeResults) {
  HLM_REQUIRE_CUDA();
  const Batch b = make_batch({9, 33, 65, 1, 12}, 70, 9);
  int64_t ws_total = 0;
  std::vector<SoftckaCudaJob> jobs = pair_jobs(b, {{0, 1}, {2, 3}, {4, 2}}, 10.0, ws_total);
  const std::vector<double> forward = run_gpu(b, jobs, ws_total, CkaKernel::Rbf, "order");
  std::reverse(jobs.begin(), jobs.end());
  const std::vector<double> backward = run_gpu(b, jobs, ws_total, CkaKernel::Rbf, "order reversed");
  for (size_t j = 0; j < jobs.size(); ++j) EXPECT_EQ(forward[j], backward[jobs.size() - 1 - j]) << j;
}
