// A full scaling-law analysis over several architectures (evals.md §4; Olmo Hybrid Tables 18-20):
//   per architecture the free fit (E, A, α, B, β), optionally the fixed-exponent fit (α = β shared, E, A, B refit),
//   bootstrap resamples of its points (same count, with replacement; each refit with the same grid), and from them
//   95 % percentile intervals (2.5 / 97.5, linear interpolation) of every parameter, a_opt, b_opt and R²;
//   compute-optimal N*, D*, L(N*, D*) at each FLOP budget with loss intervals and the paired difference to the
//   reference architecture (Table 19); tokens needed at each N to reach the target loss and the paired savings
//   factor D_ref / D_arch (Table 20).
// Pairing: resample b of every architecture uses the same b (its own points, drawn with counter-based random numbers
// from (seed, architecture name, b)), and derived quantities across architectures combine resample b with resample b.
// Resamples whose fit fails (no finite start) are skipped; intervals come from the values that are not NaN (the counts
// are reported; an infinite token need or savings factor counts as a value). Deterministic for a given seed, whatever the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "scaling/allocation.h"
#include "scaling/chinchilla_fit.h"

namespace hlm {

struct ScalingOptions {
  FitOptions fit;                         // weights, grid, bounds (fixed_exponent unset: see below)
  std::optional<double> fixed_exponent;   // also run the fixed-exponent variant with α = β = this
  int bootstrap = 0;                      // resamples (0: no intervals)
  uint64_t seed = 0;
  std::vector<double> flops = {1e18, 1e19, 1e20, 1e21, 1e22};         // Table 19's budgets
  std::vector<double> savings_n = {1e9, 3e9, 7e9, 13e9, 30e9};         // Table 20's model sizes
  std::optional<double> target_loss;      // default: the minimum observed loss over all points (Table 20)
  std::string reference;                  // default: "transformer" when present, else the first architecture
};
void scaling_options_validate(const ScalingOptions& options);

struct Interval {
  double low = 0, high = 0;
  int count = 0;  // values behind it, NaN excluded (0: low = high = NaN)
};
// 2.5 / 97.5 percentiles (numpy's linear interpolation) of the values that are not NaN; ±inf takes part.
Interval percentile_interval(std::vector<double> values, double lo_pct = 2.5, double hi_pct = 97.5);

struct VariantFits {
  ChinchillaFit fit;                   // on all points
  std::vector<ChinchillaFit> resamples;  // size = bootstrap; ok = false where the refit failed
};

struct ArchitectureFits {
  std::string arch;
  std::vector<ScalingPoint> points;
  VariantFits free;
  std::optional<VariantFits> fixed;
};

struct ScalingAnalysis {
  ScalingOptions options;
  std::vector<ArchitectureFits> archs;  // in order of first appearance in the points
  std::string reference;
  double target_loss = 0;
};

// Progress of long bootstraps: (architecture, resamples done, total).
using ScalingProgress = std::function<void(const std::string& arch, int done, int total)>;

// Input errors: no points, an architecture with fewer points than the fit's parameters, an unknown reference.
ScalingAnalysis run_scaling_analysis(const std::vector<ScalingPoint>& points, const ScalingOptions& options,
                                     const ScalingProgress& progress = {});

// The resample b of an architecture's points (exposed for tests of the pairing and determinism).
std::vector<ScalingPoint> bootstrap_resample(const std::vector<ScalingPoint>& points, uint64_t seed, int b);

}  // namespace hlm
