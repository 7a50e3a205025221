#include "scaling/lbfgsb.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "core/error.h"

namespace hlm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Box {
  std::vector<double> lo, hi;
  double project(size_t i, double v) const { return std::clamp(v, lo[i], hi[i]); }
};

// Variables on a bound whose negative gradient points out of the box take no part in the step.
std::vector<char> free_mask(const Box& box, const std::vector<double>& x, const std::vector<double>& g) {
  std::vector<char> free(x.size(), 1);
  for (size_t i = 0; i < x.size(); ++i)
    if ((x[i] <= box.lo[i] && g[i] > 0) || (x[i] >= box.hi[i] && g[i] < 0)) free[i] = 0;
  return free;
}

double projected_gradient_norm(const Box& box, const std::vector<double>& x, const std::vector<double>& g) {
  double norm = 0.0;
  for (size_t i = 0; i < x.size(); ++i) norm = std::max(norm, std::abs(box.project(i, x[i] - g[i]) - x[i]));
  return norm;
}

double masked_dot(const std::vector<double>& a, const std::vector<double>& b, const std::vector<char>& mask) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    if (mask[i]) s += a[i] * b[i];
  return s;
}

struct Pair {
  std::vector<double> s, y;
};

// d = −H·g on the free variables by the two-loop recursion; fixed variables get 0.
std::vector<double> two_loop_direction(const std::deque<Pair>& memory, const std::vector<double>& g,
                                       const std::vector<char>& free) {
  std::vector<double> q(g.size());
  for (size_t i = 0; i < g.size(); ++i) q[i] = free[i] ? g[i] : 0.0;
  std::vector<double> alpha(memory.size()), rho(memory.size());
  for (size_t k = memory.size(); k-- > 0;) {
    const double sy = masked_dot(memory[k].s, memory[k].y, free);
    rho[k] = sy > 0 ? 1.0 / sy : 0.0;
    alpha[k] = rho[k] * masked_dot(memory[k].s, q, free);
    for (size_t i = 0; i < q.size(); ++i)
      if (free[i]) q[i] -= alpha[k] * memory[k].y[i];
  }
  if (!memory.empty()) {
    const Pair& last = memory.back();
    const double yy = masked_dot(last.y, last.y, free), sy = masked_dot(last.s, last.y, free);
    const double gamma = (yy > 0 && sy > 0) ? sy / yy : 1.0;
    for (double& v : q) v *= gamma;
  }
  for (size_t k = 0; k < memory.size(); ++k) {
    const double beta = rho[k] * masked_dot(memory[k].y, q, free);
    for (size_t i = 0; i < q.size(); ++i)
      if (free[i]) q[i] += (alpha[k] - beta) * memory[k].s[i];
  }
  for (size_t i = 0; i < q.size(); ++i) q[i] = free[i] ? -q[i] : 0.0;
  return q;
}

bool all_finite(double f, const std::vector<double>& g) {
  if (!std::isfinite(f)) return false;
  for (double v : g)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

LbfgsbResult lbfgsb_minimize(const Objective& f, std::vector<double> x0, std::span<const double> lower,
                             std::span<const double> upper, const LbfgsbOptions& options) {
  const size_t n = x0.size();
  HLM_CHECK(n > 0);
  HLM_CHECK(lower.empty() || lower.size() == n);
  HLM_CHECK(upper.empty() || upper.size() == n);
  HLM_CHECK(options.memory > 0 && options.max_line_search > 0);
  Box box{std::vector<double>(n, -kInf), std::vector<double>(n, kInf)};
  for (size_t i = 0; i < n; ++i) {
    if (!lower.empty()) box.lo[i] = lower[i];
    if (!upper.empty()) box.hi[i] = upper[i];
    HLM_CHECK(box.lo[i] <= box.hi[i], "empty box in variable ", i);
    x0[i] = box.project(i, x0[i]);
  }

  LbfgsbResult result;
  std::vector<double> x = std::move(x0), g(n), x_new(n), g_new(n);
  double fx = f(x, g);
  result.evaluations = 1;
  std::deque<Pair> memory;
  if (!all_finite(fx, g)) {
    result.x = x, result.f = fx, result.finite = false;
    return result;
  }

  for (int iter = 0; iter < options.max_iterations; ++iter) {
    if (projected_gradient_norm(box, x, g) <= options.gtol) {
      result.converged = true;
      break;
    }
    const std::vector<char> free = free_mask(box, x, g);
    std::vector<double> d = two_loop_direction(memory, g, free);
    double slope = masked_dot(g, d, free);
    if (!(slope < 0)) {  // not a descent direction: restart from steepest descent
      memory.clear();
      d = two_loop_direction(memory, g, free);
      slope = masked_dot(g, d, free);
      if (!(slope < 0)) {
        result.converged = true;  // no free variable can decrease f
        break;
      }
    }
    // First step of a fresh memory: at most unit length in the infinity norm (the gradient's scale is arbitrary).
    double t = 1.0;
    if (memory.empty()) {
      double dmax = 0.0;
      for (double v : d) dmax = std::max(dmax, std::abs(v));
      if (dmax > 1.0) t = 1.0 / dmax;
    }
    bool accepted = false;
    double f_new = 0.0;
    for (int ls = 0; ls < options.max_line_search; ++ls) {
      for (size_t i = 0; i < n; ++i) x_new[i] = box.project(i, x[i] + t * d[i]);
      f_new = f(x_new, g_new);
      ++result.evaluations;
      double decrease = 0.0;  // gᵀ(x_new − x): the projected path's first-order change
      for (size_t i = 0; i < n; ++i) decrease += g[i] * (x_new[i] - x[i]);
      if (all_finite(f_new, g_new) && f_new <= fx + 1e-4 * decrease) {
        accepted = true;
        break;
      }
      // Quadratic interpolation of f along the path, kept within [0.1, 0.5] of the step.
      double t_next = 0.5 * t;
      if (std::isfinite(f_new)) {
        const double denom = 2.0 * (f_new - fx - slope * t);
        if (denom > 0) t_next = std::clamp(-slope * t * t / denom, 0.1 * t, 0.5 * t);
      }
      t = t_next;
    }
    ++result.iterations;
    if (!accepted) {
      if (!memory.empty()) {  // the curvature model misled the search: forget it and try steepest descent
        memory.clear();
        continue;
      }
      break;  // even steepest descent makes no progress at double precision
    }
    Pair pair{std::vector<double>(n), std::vector<double>(n)};
    for (size_t i = 0; i < n; ++i) pair.s[i] = x_new[i] - x[i], pair.y[i] = g_new[i] - g[i];
    double sy = 0.0, yy = 0.0;
    for (size_t i = 0; i < n; ++i) sy += pair.s[i] * pair.y[i], yy += pair.y[i] * pair.y[i];
    if (sy > 1e-12 * yy && sy > 0) {
      memory.push_back(std::move(pair));
      if (static_cast<int>(memory.size()) > options.memory) memory.pop_front();
    }
    const double f_old = fx;
    x.swap(x_new), g.swap(g_new), fx = f_new;
    const double scale = std::max({std::abs(f_old), std::abs(fx), std::numeric_limits<double>::min()});
    if (f_old - fx <= options.ftol * scale) {
      result.converged = true;
      break;
    }
  }
  result.x = std::move(x);
  result.f = fx;
  result.finite = all_finite(fx, g);
  return result;
}

}  // namespace hlm
