// Validation curves of distilled students and the seed's Figure 6 measure: the share of the training tokens a
// placement needs to reach the baseline's (standard periodic's) final validation L_LM gap.
//   curve      the `valid` records of a run's metrics.jsonl (docs/training.md): tokens seen, and the mean over the
//              languages not excluded of D_KL and of the L_LM gap L_S − L_T (nats/token);
//   reach      the first crossing of gap ≤ target, linearly interpolated between the two validation points around it
//              (a curve already at or below the target at its first point reaches it there); none when it never does.
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

// Training tokens at which the gap first reaches `target` (see above); nullopt when it never does.
std::optional<double> study_tokens_to_reach(const std::vector<ValidationPoint>& curve, double target);

}  // namespace hlm
