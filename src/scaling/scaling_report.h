// The tables and files of `hybridlm scaling fit` (layouts of Olmo Hybrid Tables 18-20):
//   parameters   per architecture and variant (free / fixed exponent): E, A, α, B, β, a_opt, b_opt, R² with
//                95 % bootstrap intervals (Table 18)
//   compute      per FLOP budget C and architecture: N*, D* (C = 6ND), L(N*, D*) with its interval, and the paired
//                difference to the reference architecture with its interval (Table 19)
//   savings      per model size N and architecture: tokens needed for the target loss, and the paired savings factor
//                D_ref / D_arch with its interval (Table 20)
// Files under the output directory: fit.json, parameters.{csv,md}, compute_optimal.{csv,md}, token_savings.{csv,md},
// fits_<arch>.svg (observed losses against D and the fitted L(N, ·) per model size, one file per architecture),
// frontier.svg (observed losses against compute and each fitted compute-optimal frontier).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scaling/scaling_analysis.h"

namespace hlm {

struct ParameterRow {
  std::string arch, variant;     // variant: "free" or "fixed"
  ChinchillaParams params;
  double a_opt = 0, b_opt = 0, r2 = 0, objective = 0;
  Interval E, A, alpha, B, beta, a_opt_ci, b_opt_ci, r2_ci;  // count 0 without a bootstrap
  int resamples_ok = 0;
};

struct ComputeRow {
  double flops = 0;
  std::string arch;
  ComputeOptimal optimum;
  Interval loss_ci;
  double delta = 0;  // loss − reference loss at the same budget (0 for the reference)
  Interval delta_ci;
};

struct SavingsRow {
  double N = 0;
  std::string arch;
  double tokens = 0;   // D needed (inf: unreachable)
  Interval tokens_ci;
  double savings = 0;  // D_ref / D_arch (NaN where both are unreachable)
  Interval savings_ci;
};

struct ScalingTables {
  std::vector<ParameterRow> parameters;
  std::vector<ComputeRow> compute;
  std::vector<SavingsRow> savings;
};

ScalingTables scaling_tables(const ScalingAnalysis& analysis);

nlohmann::json scaling_options_json(const ScalingOptions& options);
nlohmann::json scaling_fit_json(const ScalingAnalysis& analysis, const ScalingTables& tables);

std::string parameters_csv(const ScalingTables& t);
std::string parameters_markdown(const ScalingTables& t);
std::string compute_csv(const ScalingTables& t);
std::string compute_markdown(const ScalingAnalysis& analysis, const ScalingTables& t);
std::string savings_csv(const ScalingTables& t);
std::string savings_markdown(const ScalingAnalysis& analysis, const ScalingTables& t);

// Writes every file above into `out` (created); returns the paths written.
std::vector<std::filesystem::path> write_scaling_outputs(const ScalingAnalysis& analysis,
                                                         const std::filesystem::path& out);

}  // namespace hlm
