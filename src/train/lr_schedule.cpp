// Eq. 3 of the seed paper, implemented literally (edge cases documented in lr_schedule.h).
#include "train/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "train/adamw.h"

namespace hlm {

static void check_schedule(const LrSchedule& s) {
  HLM_CHECK_INPUT(s.total_steps >= 1, "schedule needs at least one step, got S=", s.total_steps);
  HLM_CHECK_INPUT(s.warmup_steps >= 0 && s.warmup_steps <= s.total_steps, "warmup steps must lie in [0, S=",
                  s.total_steps, "], got ", s.warmup_steps);
  HLM_CHECK_INPUT(std::isfinite(s.start_factor) && std::isfinite(s.min_lr), "schedule constants must be finite");
}

double lr_schedule_at(const LrSchedule& schedule, double peak_lr, int64_t step) {
  check_schedule(schedule);
  const int64_t S = schedule.total_steps, s_w = schedule.warmup_steps;
  HLM_CHECK_INPUT(step >= 0 && step <= S, "schedule step ", step, " is outside [0, S=", S, "]");
  const double eps = schedule.start_factor, eta_min = schedule.min_lr;
  if (step <= s_w && s_w > 0) {
    return peak_lr * (eps + (1.0 - eps) * static_cast<double>(step) / static_cast<double>(s_w));
  }
  if (step <= s_w) return peak_lr;  // s_w = 0, s = 0: no warmup; equals the cosine branch at its start
  const double progress = static_cast<double>(step - s_w) / static_cast<double>(S - s_w);
  return eta_min + (peak_lr - eta_min) / 2.0 * (1.0 + std::cos(std::numbers::pi * progress));
}

void lr_schedule_apply(AdamW& optimizer, const LrSchedule& schedule, int64_t step) {
  for (auto& group : optimizer.groups()) group.lr = lr_schedule_at(schedule, group.peak_lr, step);
}

int64_t lr_schedule_total_steps(int64_t tokens, int64_t tokens_per_step) {
  HLM_CHECK_INPUT(tokens >= 0 && tokens_per_step > 0, "bad token budget ", tokens, " / ", tokens_per_step);
  return tokens / tokens_per_step;
}

int64_t lr_schedule_warmup_steps(int64_t total_steps, double fraction) {
  HLM_CHECK_INPUT(total_steps >= 0 && fraction >= 0.0 && fraction <= 1.0, "bad warmup fraction ", fraction);
  // + 1e-9 so that products that are integers on paper (0.29 · 100 = 28.999999999999996 in binary) floor to them.
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(total_steps) + 1e-9));
}

}  // namespace hlm
