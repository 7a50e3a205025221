// Replicates of the placement study over data seeds (the seed's Table 3 "run 1 / run 2" on independently resampled
// data): each metric as mean and range over the seeds, and which differences exceed the seed-to-seed spread.
//   spread      mean, min and max over the seeds of one placement (non-finite values, e.g. a target not reached,
//               are left out; n says how many seeds counted)
//   exceeds     a difference between a placement and the baseline exceeds the seed-to-seed spread when every seed
//               agrees and the ranges do not overlap: for δ̄, the mean D_KL, the tokens to reach the target and each
//               language's D_KL, the placement's [min, max] and the baseline's are disjoint; for R (a ratio to the
//               baseline of the same seed, so the baseline's R is 1 in every seed) the range excludes 1.
// Shapes: StudySeedResult::kl / ce_gap are per language in StudyReplicates::languages order.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "study/study_curves.h"

namespace hlm {

// One data seed's results of a replicated placement (test split; R and the Figure 6 target against the baseline's
// run with the same seed).
struct StudySeedResult {
  uint64_t seed = 0;
  double relative_kl = 0.0;            // R: geometric mean over languages of D_KL / D_KL of the baseline
  double delta_bar = 0.0;              // δ̄
  double mean_kl = 0.0;                // arithmetic mean over languages of the test D_KL
  std::optional<double> reach_tokens;  // study_reach against the baseline's final validation gap of this seed
  std::optional<double> crossing_tokens;
  int64_t total_tokens = 0;
  std::vector<double> kl, ce_gap;      // per language
  std::vector<ValidationPoint> curve;
};

struct StudyReplicated {
  std::string label;
  std::string same_as;                 // the placement whose runs it shares (identical layers), else ""
  std::vector<StudySeedResult> seeds;  // in data-seed order; the first is the study's main run
};

struct StudyReplicates {
  std::vector<uint64_t> data_seeds;
  std::vector<std::string> languages;
  std::vector<bool> excluded;               // per language: left out of the aggregates
  std::vector<StudyReplicated> placements;  // the baseline first
};

struct SeedSpread {
  double mean = 0.0, min = 0.0, max = 0.0;
  int n = 0;  // finite values counted; 0: mean/min/max are NaN
};
SeedSpread seed_spread(const std::vector<double>& values);
bool spreads_disjoint(const SeedSpread& a, const SeedSpread& b);  // false when either is empty

// The metrics of a replicated placement, one value per seed (NaN where a seed has none: a target not reached).
enum class ReplicateMetric { R, DeltaBar, MeanKl, ReachShare };
inline constexpr ReplicateMetric kReplicateMetrics[] = {ReplicateMetric::R, ReplicateMetric::DeltaBar,
                                                        ReplicateMetric::MeanKl, ReplicateMetric::ReachShare};
const char* replicate_metric_key(ReplicateMetric m);   // "R", "delta_bar", "mean_kl", "reach_share"
const char* replicate_metric_title(ReplicateMetric m); // words for the report
std::vector<double> replicate_values(const StudyReplicated& p, ReplicateMetric m);

// One comparison of a placement with the baseline.
struct ReplicateFinding {
  std::string placement;
  std::string metric;    // replicate_metric_key, or "kl:<language>"
  SeedSpread spread, baseline;
  bool exceeds = false;  // see the header comment
  std::string text;      // one sentence
};
// Every aggregate metric of every non-baseline placement, then each language (not excluded) whose D_KL difference
// exceeds the spread.
std::vector<ReplicateFinding> replicate_findings(const StudyReplicates& r);

// {"data_seeds", "languages", "excluded", "placements": [{label, same_as, seeds: [...], <metric>: {mean,min,max,n}}],
//  "findings": [...]} for summary.json; and replicates.csv: placement,seed,metric,language,value.
nlohmann::json replicates_to_json(const StudyReplicates& r);
std::string replicates_csv(const StudyReplicates& r);

}  // namespace hlm
