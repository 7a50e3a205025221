// The Chinchilla approach-3 fit L(N, D) = E + A/N^α + B/D^β (N parameters, D tokens; ../shared/docs/evals.md §4.1).
//
// Objective (Hoffmann et al. 2022, as replicated by Besiroglu et al. / Epoch): over points i with weights w_i
// (rescaled to mean 1),
//     J(θ) = Σ_i w_i · Huber_δ( LSE(a − α ln N_i, b − β ln D_i, e) − ln L_i ),   δ = 1e-3,
//     Huber(r) = r²/2 if |r| ≤ δ, else δ(|r| − δ/2),   A = e^a, B = e^b, E = e^e,
// i.e. the Huber loss of log residuals, with L̂ computed through a log-sum-exp for stability. θ = (e, a, α, b, β);
// the fixed-exponent variant holds α = β = given and fits θ = (e, a, b). The gradient is analytic.
// Minimised by lbfgsb_minimize from every start of a grid (in parallel over OpenMP threads); the start with the
// lowest objective wins (ties: the earlier start), then it is polished with tight tolerances.
//   grid "epoch": α, β ∈ {0, 0.5, …, 2}, e ∈ {−1, −0.5, …, 1}, a, b ∈ {0, 5, …, 25} (4500 starts; fixed: 180)
//   grid "olmo" (size s, default 4): E ∈ linspace(0, min L, s) (E = 0 starts at 1e-3·min L: e = ln E must be
//       finite), A, B ∈ linspace(1, 500, s), α, β ∈ linspace(0.1, 0.5, s) (s⁵ starts; fixed: s³)
// Bounds: "none" (Hoffmann/Epoch: unbounded), or "olmo" (OLMo-core's box, in these coordinates): E ≤ min L,
// A, B ∈ [1e-6, 1e4], α, β ∈ [0.01, 2]. Weights: "none", "sqrt_flops" (√(6ND)), "flops" (6ND).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hlm {

struct ScalingPoint {
  std::string arch;
  double N = 0, D = 0, loss = 0;  // non-embedding parameters, training tokens, final validation loss (nats/token)
};

struct ChinchillaParams {
  double E = 0, A = 0, alpha = 0, B = 0, beta = 0;
  double predict(double N, double D) const;  // E + A/N^α + B/D^β
};

enum class FitWeights { None, SqrtFlops, Flops };
FitWeights parse_fit_weights(const std::string& name);  // "none" | "sqrt_flops" | "flops"; input error otherwise
const char* fit_weights_name(FitWeights weights);

struct FitOptions {
  FitWeights weights = FitWeights::None;
  std::string grid = "epoch";        // "epoch" or "olmo"
  int grid_size = 4;                 // s of the olmo grid
  std::string bounds = "none";       // "none" or "olmo"
  std::optional<double> fixed_exponent;  // α = β = this; only E, A, B fitted
  double huber_delta = 1e-3;
  bool parallel = true;              // starts over OpenMP threads (off inside a parallel bootstrap)
};
// Checks grid, grid_size, bounds, huber_delta, fixed_exponent (input errors naming the option).
void fit_options_validate(const FitOptions& options);

struct ChinchillaFit {
  ChinchillaParams params;
  double objective = 0;   // J at the optimum (weights rescaled to mean 1)
  double r2 = 0;          // 1 − Σ(L − L̂)² / Σ(L − mean L)², unweighted, on the loss itself
  int starts = 0;         // grid size
  int starts_finite = 0;  // starts whose run ended finite (the others are skipped)
  bool ok = false;        // at least one finite start
};

// Number of free parameters (5, or 3 with a fixed exponent).
int fit_parameter_count(const FitOptions& options);

// The objective J and its gradient at θ (θ as described above; its size decides free or fixed form) over points.
// Exposed for the finite-difference test.
struct FitData {
  std::vector<double> log_n, log_d, log_loss, weight;  // weights rescaled to mean 1
};
FitData fit_data(std::span<const ScalingPoint> points, FitWeights weights);
double fit_objective(const FitData& data, std::span<const double> theta, std::optional<double> fixed_exponent,
                     double huber_delta, std::span<double> grad);

// The grid of starts θ for the options and points (min L enters the olmo grid).
std::vector<std::vector<double>> fit_starts(const FitOptions& options, double min_loss);

// Fits points (all of one architecture; at least fit_parameter_count points, else an input error).
ChinchillaFit fit_chinchilla(std::span<const ScalingPoint> points, const FitOptions& options);

double fit_r2(std::span<const ScalingPoint> points, const ChinchillaParams& params);

}  // namespace hlm
