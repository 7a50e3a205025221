// Validation curves of distilled students and the seed's Figure 6 measure: the share of the training tokens a
// placement needs to reach the baseline's (standard periodic's) final validation L_LM gap.
//   curve      the `valid` records of a run's metrics.jsonl (docs/training.md): tokens seen, and the mean over the
//              languages not excluded of D_KL and of the L_LM gap L_S − L_T (nats/token);
//   reach      tokens to reach the target: the first validation point from which the curve stays at or below the
//              target up to the run's end (a curve that dips below and comes back up has not reached it yet); none
//              when the last point is above the target.
//   crossing   reported beside it: where the curve first gets to the target, linearly interpolated between the two
//              validation points around it (a curve already at or below the target at its first point crosses
//              there). crossing <= reach; they differ when the curve crosses back above the target later.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hlm {

struct ValidationPoint {
  int64_t tokens = 0;
  double mean_kl = 0.0;
  double mean_ce_gap = 0.0;
};

// Input error when the file is missing, unreadable, or holds no validation record with KL and gap.
std::vector<ValidationPoint> study_read_curve(const std::filesystem::path& metrics_jsonl,
                                              const std::set<std::string>& excluded);

struct StudyReach {
  std::optional<double> reach;     // tokens of the first point from which the gap stays <= target
  std::optional<double> crossing;  // tokens of the first crossing (interpolated)
};
StudyReach study_reach(const std::vector<ValidationPoint>& curve, double target);

}  // namespace hlm
