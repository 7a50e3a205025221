#include "scaling/chinchilla_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "scaling/lbfgsb.h"

namespace hlm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> linspace(double lo, double hi, int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = n == 1 ? lo : lo + (hi - lo) * i / (n - 1);
  return v;
}

std::vector<double> step_range(double lo, double hi, double step) {
  std::vector<double> v;
  for (int i = 0; lo + i * step <= hi + 1e-12; ++i) v.push_back(lo + i * step);
  return v;
}

// Box of θ for the bounds option; empty spans mean unbounded.
void fit_box(const FitOptions& options, double min_loss, std::vector<double>& lo, std::vector<double>& hi) {
  lo.clear(), hi.clear();
  if (options.bounds != "olmo") return;
  const double la = std::log(1e-6), ha = std::log(1e4);
  if (options.fixed_exponent) {
    lo = {-kInf, la, la};
    hi = {std::log(min_loss), ha, ha};
  } else {
    lo = {-kInf, la, 0.01, la, 0.01};
    hi = {std::log(min_loss), ha, 2.0, ha, 2.0};
  }
}

// θ → parameters (free: e, a, α, b, β; fixed: e, a, b).
ChinchillaParams params_of(std::span<const double> theta, std::optional<double> fixed_exponent) {
  ChinchillaParams p;
  p.E = std::exp(theta[0]);
  p.A = std::exp(theta[1]);
  if (fixed_exponent) {
    p.alpha = p.beta = *fixed_exponent;
    p.B = std::exp(theta[2]);
  } else {
    p.alpha = theta[2];
    p.B = std::exp(theta[3]);
    p.beta = theta[4];
  }
  return p;
}

}  // namespace

double ChinchillaParams::predict(double N, double D) const { return E + A / std::pow(N, alpha) + B / std::pow(D, beta); }

FitWeights parse_fit_weights(const std::string& name) {
  if (name == "none") return FitWeights::None;
  if (name == "sqrt_flops") return FitWeights::SqrtFlops;
  if (name == "flops") return FitWeights::Flops;
  throw_input_error("--weights: unknown value \"", name, "\" (expected none, sqrt_flops or flops)");
}

const char* fit_weights_name(FitWeights weights) {
  switch (weights) {
    case FitWeights::None: return "none";
    case FitWeights::SqrtFlops: return "sqrt_flops";
    case FitWeights::Flops: return "flops";
  }
  return "?";
}

void fit_options_validate(const FitOptions& options) {
  HLM_CHECK_INPUT(options.grid == "epoch" || options.grid == "olmo", "--grid: unknown grid \"", options.grid,
                  "\" (expected epoch or olmo[:S])");
  HLM_CHECK_INPUT(options.grid_size >= 1 && options.grid_size <= 12, "--grid: olmo grid size must be in [1, 12], got ",
                  options.grid_size);
  HLM_CHECK_INPUT(options.bounds == "none" || options.bounds == "olmo", "--bounds: unknown value \"", options.bounds,
                  "\" (expected none or olmo)");
  HLM_CHECK_INPUT(options.huber_delta > 0 && std::isfinite(options.huber_delta), "Huber delta must be positive");
  if (options.fixed_exponent)
    HLM_CHECK_INPUT(*options.fixed_exponent > 0 && *options.fixed_exponent < 5,
                    "--fixed-exponents: the shared exponent must be in (0, 5), got ", *options.fixed_exponent);
}

int fit_parameter_count(const FitOptions& options) { return options.fixed_exponent ? 3 : 5; }

FitData fit_data(std::span<const ScalingPoint> points, FitWeights weights) {
  FitData data;
  double sum = 0;
  for (const ScalingPoint& p : points) {
    data.log_n.push_back(std::log(p.N));
    data.log_d.push_back(std::log(p.D));
    data.log_loss.push_back(std::log(p.loss));
    const double flops = 6.0 * p.N * p.D;
    const double w = weights == FitWeights::None ? 1.0 : weights == FitWeights::SqrtFlops ? std::sqrt(flops) : flops;
    data.weight.push_back(w);
    sum += w;
  }
  const double mean = sum / static_cast<double>(points.size());
  for (double& w : data.weight) w /= mean;
  return data;
}

double fit_objective(const FitData& data, std::span<const double> theta, std::optional<double> fixed_exponent,
                     double huber_delta, std::span<double> grad) {
  const bool fixed = fixed_exponent.has_value();
  const double e = theta[0], a = theta[1];
  const double alpha = fixed ? *fixed_exponent : theta[2];
  const double b = fixed ? theta[2] : theta[3];
  const double beta = fixed ? *fixed_exponent : theta[4];
  double j = 0, ge = 0, ga = 0, galpha = 0, gb = 0, gbeta = 0;
  for (size_t i = 0; i < data.log_n.size(); ++i) {
    const double u1 = a - alpha * data.log_n[i], u2 = b - beta * data.log_d[i], u3 = e;
    // Log-sum-exp around the largest term (its exponential is 1: two exp calls per point instead of three).
    double m, x1, x2, x3;
    if (u1 >= u2 && u1 >= u3) {
      m = u1, x1 = 1, x2 = std::exp(u2 - m), x3 = std::exp(u3 - m);
    } else if (u2 >= u3) {
      m = u2, x2 = 1, x1 = std::exp(u1 - m), x3 = std::exp(u3 - m);
    } else {
      m = u3, x3 = 1, x1 = std::exp(u1 - m), x2 = std::exp(u2 - m);
    }
    const double sum = x1 + x2 + x3;
    const double r = m + std::log(sum) - data.log_loss[i];
    const double w = data.weight[i];
    double dr;  // w · Huber'(r)
    if (std::abs(r) <= huber_delta) {
      j += w * 0.5 * r * r;
      dr = w * r;
    } else {
      j += w * huber_delta * (std::abs(r) - 0.5 * huber_delta);
      dr = w * huber_delta * (r > 0 ? 1.0 : -1.0);
    }
    const double p1 = x1 / sum, p2 = x2 / sum, p3 = x3 / sum;  // ∂LSE/∂u_k
    ge += dr * p3;
    ga += dr * p1;
    galpha -= dr * p1 * data.log_n[i];
    gb += dr * p2;
    gbeta -= dr * p2 * data.log_d[i];
  }
  if (!grad.empty()) {
    grad[0] = ge, grad[1] = ga;
    if (fixed) {
      grad[2] = gb;
    } else {
      grad[2] = galpha, grad[3] = gb, grad[4] = gbeta;
    }
  }
  return j;
}

std::vector<std::vector<double>> fit_starts(const FitOptions& options, double min_loss) {
  std::vector<double> es, as, bs, alphas, betas;
  if (options.grid == "epoch") {
    es = step_range(-1, 1, 0.5);
    as = bs = step_range(0, 25, 5);
    alphas = betas = step_range(0, 2, 0.5);
  } else {
    for (double E : linspace(0, min_loss, options.grid_size)) es.push_back(std::log(std::max(E, 1e-3 * min_loss)));
    for (double A : linspace(1, 500, options.grid_size)) as.push_back(std::log(A));
    bs = as;
    alphas = betas = linspace(0.1, 0.5, options.grid_size);
  }
  std::vector<std::vector<double>> starts;
  for (double e : es)
    for (double a : as)
      for (double b : bs) {
        if (options.fixed_exponent) {
          starts.push_back({e, a, b});
          continue;
        }
        for (double alpha : alphas)
          for (double beta : betas) starts.push_back({e, a, alpha, b, beta});
      }
  return starts;
}

double fit_r2(std::span<const ScalingPoint> points, const ChinchillaParams& params) {
  double mean = 0;
  for (const ScalingPoint& p : points) mean += p.loss;
  mean /= static_cast<double>(points.size());
  double ss_res = 0, ss_tot = 0;
  for (const ScalingPoint& p : points) {
    const double r = p.loss - params.predict(p.N, p.D);
    ss_res += r * r;
    ss_tot += (p.loss - mean) * (p.loss - mean);
  }
  return ss_tot > 0 ? 1.0 - ss_res / ss_tot : (ss_res == 0 ? 1.0 : -kInf);
}

ChinchillaFit fit_chinchilla(std::span<const ScalingPoint> points, const FitOptions& options) {
  fit_options_validate(options);
  const int k = fit_parameter_count(options);
  HLM_CHECK_INPUT(static_cast<int>(points.size()) >= k, "architecture \"", points.empty() ? "" : points[0].arch,
                  "\" has ", points.size(), " points, fewer than the ", k, " parameters of the fit");
  const FitData data = fit_data(points, options.weights);
  double min_loss = kInf;
  for (const ScalingPoint& p : points) min_loss = std::min(min_loss, p.loss);
  std::vector<double> lo, hi;
  fit_box(options, min_loss, lo, hi);
  const Objective objective = [&](std::span<const double> theta, std::span<double> grad) {
    return fit_objective(data, theta, options.fixed_exponent, options.huber_delta, grad);
  };

  const std::vector<std::vector<double>> starts = fit_starts(options, min_loss);
  std::vector<LbfgsbResult> runs(starts.size());
  // Per start: moderate tolerances (most starts end in the same basin); the winner is polished below.
  LbfgsbOptions coarse;
  coarse.gtol = 1e-9;
  coarse.ftol = 1e-10;
  coarse.max_iterations = 2000;
  const int64_t n_starts = static_cast<int64_t>(starts.size());
#pragma omp parallel for schedule(dynamic, 8) if (options.parallel)
  for (int64_t s = 0; s < n_starts; ++s) runs[s] = lbfgsb_minimize(objective, starts[s], lo, hi, coarse);

  ChinchillaFit fit;
  fit.starts = static_cast<int>(starts.size());
  int64_t best = -1;
  for (int64_t s = 0; s < n_starts; ++s) {
    if (!runs[s].finite) continue;
    ++fit.starts_finite;
    if (best < 0 || runs[s].f < runs[best].f) best = s;
  }
  if (best < 0) return fit;  // every start failed: ok = false
  LbfgsbOptions tight;
  tight.gtol = 1e-13;
  tight.ftol = 1e-16;
  LbfgsbResult polished = lbfgsb_minimize(objective, runs[best].x, lo, hi, tight);
  const LbfgsbResult& chosen = (polished.finite && polished.f <= runs[best].f) ? polished : runs[best];
  fit.params = params_of(chosen.x, options.fixed_exponent);
  fit.objective = chosen.f;
  fit.r2 = fit_r2(points, fit.params);
  fit.ok = true;
  return fit;
}

}  // namespace hlm
