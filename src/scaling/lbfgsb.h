// Bound-constrained limited-memory BFGS (an L-BFGS-B variant) for the small smooth problems of the scaling fits
// (3-5 parameters). Minimises f(x) subject to lower ≤ x ≤ upper (either side may be ±inf, i.e. unbounded).
//
// Method: projected quasi-Newton with an active set. At each iterate the variables sitting on a bound whose gradient
// points outward are held fixed; the two-loop recursion (Nocedal & Wright, Alg. 7.4) over the last `memory` pairs
// (s, y) gives a direction on the free variables; a backtracking Armijo search runs along the projected path
// P(x + t·d). A pair is kept only when sᵀy > 1e-12·yᵀy (keeps the inverse-Hessian model positive definite, which a
// C¹-only objective such as a Huber loss may otherwise break). When the direction is not a descent direction the
// memory is dropped and the projected steepest descent is taken instead.
// Stops when the projected gradient's infinity norm ≤ gtol, or the relative decrease of f over an iteration
// ≤ ftol·max(|f|, |f_new|, tiny), or after max_iterations. Deterministic (no randomness, no threads).
#pragma once
#include <functional>
#include <span>
#include <vector>

namespace hlm {

// Returns f(x) and writes ∇f(x) into grad (same size as x).
using Objective = std::function<double(std::span<const double> x, std::span<double> grad)>;

struct LbfgsbOptions {
  int memory = 10;
  int max_iterations = 10000;
  double gtol = 1e-10;  // projected-gradient infinity norm
  double ftol = 1e-14;  // relative decrease per iteration
  int max_line_search = 40;
};

struct LbfgsbResult {
  std::vector<double> x;
  double f = 0.0;
  int iterations = 0;
  int evaluations = 0;
  bool converged = false;  // a tolerance was met (not only max_iterations or a failed line search)
  bool finite = true;      // f and ∇f finite at the returned x
};

// x0 is projected into the box first. lower/upper may be empty (unbounded) or have x0's size.
LbfgsbResult lbfgsb_minimize(const Objective& f, std::vector<double> x0, std::span<const double> lower,
                             std::span<const double> upper, const LbfgsbOptions& options = {});

}  // namespace hlm
