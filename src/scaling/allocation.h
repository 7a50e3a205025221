// Compute-optimal allocation and data needs from a fitted L(N, D) = E + A/N^α + B/D^β (evals.md §4.3-4.4).
//   With C = 6ND: a_opt = β/(α+β), b_opt = α/(α+β), G = (αA/(βB))^{1/(α+β)},
//   N*(C) = G·(C/6)^{a_opt}, D*(C) = (C/6)/N*  (= G^{-1}(C/6)^{b_opt}; Hoffmann's form).
//   Tokens needed at fixed N for a target loss L*: D = (B / (L* − E − A/N^α))^{1/β}; +inf when the bracket ≤ 0
//   (the target is below what N parameters can reach). Savings factor = D_ref / D_arch (> 1: fewer tokens).
#pragma once
#include "scaling/chinchilla_fit.h"

namespace hlm {

double alloc_a_opt(const ChinchillaParams& p);  // β/(α+β)
double alloc_b_opt(const ChinchillaParams& p);  // α/(α+β)
double alloc_G(const ChinchillaParams& p);

struct ComputeOptimal {
  double N = 0, D = 0, loss = 0;  // N*, D*, L(N*, D*)
};
ComputeOptimal compute_optimal(const ChinchillaParams& p, double flops);

double tokens_needed(const ChinchillaParams& p, double N, double target_loss);

}  // namespace hlm
