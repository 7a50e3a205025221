#include "scaling/allocation.h"

#include <cmath>
#include <limits>

namespace hlm {

double alloc_a_opt(const ChinchillaParams& p) { return p.beta / (p.alpha + p.beta); }
double alloc_b_opt(const ChinchillaParams& p) { return p.alpha / (p.alpha + p.beta); }

double alloc_G(const ChinchillaParams& p) {
  return std::pow(p.alpha * p.A / (p.beta * p.B), 1.0 / (p.alpha + p.beta));
}

ComputeOptimal compute_optimal(const ChinchillaParams& p, double flops) {
  ComputeOptimal c;
  c.N = alloc_G(p) * std::pow(flops / 6.0, alloc_a_opt(p));
  c.D = flops / 6.0 / c.N;
  c.loss = p.predict(c.N, c.D);
  return c;
}

double tokens_needed(const ChinchillaParams& p, double N, double target_loss) {
  const double bracket = target_loss - p.E - p.A / std::pow(N, p.alpha);
  if (!(bracket > 0)) return std::numeric_limits<double>::infinity();
  return std::pow(p.B / bracket, 1.0 / p.beta);
}

}  // namespace hlm
