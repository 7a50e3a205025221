#include "scaling/scaling_analysis.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/rng.h"
#include "scaling/scaling_points.h"

namespace hlm {

void scaling_options_validate(const ScalingOptions& options) {
  fit_options_validate(options.fit);
  HLM_CHECK_INPUT(!options.fit.fixed_exponent, "internal: set ScalingOptions::fixed_exponent, not fit.fixed_exponent");
  if (options.fixed_exponent) {
    FitOptions fixed = options.fit;
    fixed.fixed_exponent = options.fixed_exponent;
    fit_options_validate(fixed);
  }
  HLM_CHECK_INPUT(options.bootstrap >= 0 && options.bootstrap <= 1000000, "--bootstrap must be in [0, 1e6], got ",
                  options.bootstrap);
  for (double c : options.flops)
    HLM_CHECK_INPUT(std::isfinite(c) && c > 0, "--flops: budgets must be finite positive numbers, got ", c);
  for (double n : options.savings_n)
    HLM_CHECK_INPUT(std::isfinite(n) && n > 0, "--savings-n: sizes must be finite positive numbers, got ", n);
  if (options.target_loss)
    HLM_CHECK_INPUT(std::isfinite(*options.target_loss) && *options.target_loss > 0,
                    "--target-loss must be a finite positive number, got ", *options.target_loss);
}

Interval percentile_interval(std::vector<double> values, double lo_pct, double hi_pct) {
  // NaN marks a failed or undefined resample and is dropped; ±inf (an unreachable target, an infinite savings factor)
  // is a value and takes part, as in numpy.
  std::erase_if(values, [](double v) { return std::isnan(v); });
  Interval iv;
  iv.count = static_cast<int>(values.size());
  if (values.empty()) {
    iv.low = iv.high = std::numeric_limits<double>::quiet_NaN();
    return iv;
  }
  std::sort(values.begin(), values.end());
  const auto at = [&](double pct) {
    const double pos = pct / 100.0 * static_cast<double>(values.size() - 1);
    const size_t i = static_cast<size_t>(std::floor(pos));
    const double frac = pos - static_cast<double>(i);
    if (i + 1 >= values.size() || frac == 0) return values[i];
    const double a = values[i], b = values[i + 1];
    if (std::isfinite(a) && std::isfinite(b)) return a + frac * (b - a);
    return std::isinf(b) && b > 0 ? b : a;  // an infinite neighbour: the interpolation is that infinity
  };
  iv.low = at(lo_pct);
  iv.high = at(hi_pct);
  return iv;
}

std::vector<ScalingPoint> bootstrap_resample(const std::vector<ScalingPoint>& points, uint64_t seed, int b) {
  HLM_CHECK(!points.empty());
  const uint64_t key = seed ^ rng_stream_id(points[0].arch.c_str());
  std::vector<ScalingPoint> out;
  out.reserve(points.size());
  for (size_t k = 0; k < points.size(); ++k) {
    const std::array<uint32_t, 4> w = philox4x32(key, static_cast<uint64_t>(b), k);
    const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    out.push_back(points[r % points.size()]);
  }
  return out;
}

namespace {

VariantFits fit_variant(const std::vector<ScalingPoint>& points, FitOptions fit_options, int bootstrap, uint64_t seed,
                        const std::function<void()>& on_resample) {
  VariantFits v;
  v.fit = fit_chinchilla(points, fit_options);
  v.resamples.resize(bootstrap);
  // Parallel over resamples; each refit runs its grid serially (same results, better use of the threads).
  FitOptions inner = fit_options;
  inner.parallel = false;
#pragma omp parallel for schedule(dynamic, 1)
  for (int b = 0; b < bootstrap; ++b) {
    v.resamples[b] = fit_chinchilla(bootstrap_resample(points, seed, b), inner);
    if (on_resample) {
#pragma omp critical(scaling_progress)
      on_resample();
    }
  }
  return v;
}

}  // namespace

ScalingAnalysis run_scaling_analysis(const std::vector<ScalingPoint>& points, const ScalingOptions& options,
                                     const ScalingProgress& progress) {
  scaling_options_validate(options);
  HLM_CHECK_INPUT(!points.empty(), "no scaling points");
  ScalingAnalysis analysis;
  analysis.options = options;
  const std::vector<std::string> names = scaling_architectures(points);
  // Check every architecture's point count before any (long) fit runs.
  FitOptions fixed_options = options.fit;
  fixed_options.fixed_exponent = options.fixed_exponent;
  for (const std::string& name : names) {
    const size_t n = scaling_points_of(points, name).size();
    HLM_CHECK_INPUT(n >= static_cast<size_t>(fit_parameter_count(options.fit)), "architecture \"", name, "\" has ", n,
                    " points, fewer than the ", fit_parameter_count(options.fit), " parameters of the fit");
  }
  if (!options.reference.empty()) {
    HLM_CHECK_INPUT(std::find(names.begin(), names.end(), options.reference) != names.end(), "--reference: \"",
                    options.reference, "\" is not an architecture of the points");
    analysis.reference = options.reference;
  } else {
    analysis.reference = std::find(names.begin(), names.end(), "transformer") != names.end() ? "transformer" : names[0];
  }
  if (options.target_loss) {
    analysis.target_loss = *options.target_loss;
  } else {
    analysis.target_loss = std::numeric_limits<double>::infinity();
    for (const ScalingPoint& p : points) analysis.target_loss = std::min(analysis.target_loss, p.loss);
  }

  for (const std::string& name : names) {
    ArchitectureFits a;
    a.arch = name;
    a.points = scaling_points_of(points, name);
    const int variants = options.fixed_exponent ? 2 : 1;
    int done = 0;
    const auto tick = [&] {
      ++done;
      if (progress) progress(name, done, options.bootstrap * variants);
    };
    a.free = fit_variant(a.points, options.fit, options.bootstrap, options.seed, tick);
    if (options.fixed_exponent) a.fixed = fit_variant(a.points, fixed_options, options.bootstrap, options.seed, tick);
    analysis.archs.push_back(std::move(a));
  }
  return analysis;
}

}  // namespace hlm
