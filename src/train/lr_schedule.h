// Learning-rate schedule of the seed paper, Eq. 3 (Appendix C.2), per parameter group k with peak rate η̂_k:
//   η_k(s) = η̂_k · (ε + (1 − ε) · s / s_w)                                   for s ≤ s_w   (linear warmup)
//   η_k(s) = η_min + (η̂_k − η_min)/2 · (1 + cos(π (s − s_w) / (S − s_w)))    for s > s_w   (cosine decay)
// with S total steps, s_w warmup steps, ε the warmup start factor and η_min the floor (Table C.3: S = 10,172,
// s_w = 305 (3%), ε = 1e-3, η_min = 1e-5; η̂_rec = 7e-5, η̂_rest = 2e-5; both groups share the schedule).
// Step index: Eq. 3 is written for Algorithm 1's loop s = 1..S. Implemented literally, on the domain 0 ≤ s ≤ S:
//   - s = 0:   ε·η̂ (the warmup's start factor). Algorithm 1 never updates at s = 0; a trainer that counts steps from 0
//              (PyTorch LinearLR + CosineAnnealingLR in a SequentialLR) gets ε·η̂ on its first update instead of
//              η̂(ε + (1 − ε)/s_w). Pass the step the way your loop counts; lr_schedule_at does not shift it.
//   - s = s_w: exactly η̂ (the warmup branch with factor 1); the cosine branch tends to η̂ as s ↓ s_w, so η is
//              continuous there. With s_w = 0 there is no warmup: s = 0 takes the cosine branch's value η̂.
//   - s = S:   exactly η_min (cos π = −1). If S = s_w the schedule ends at η̂ without decaying.
//   - s < 0 or s > S: an input error (the formula would climb back up past S; runs never go beyond S steps).
// Non-goals: restarts, other decay shapes.
#pragma once
#include <cstdint>

namespace hlm {

class AdamW;

struct LrSchedule {
  int64_t total_steps = 0;     // S
  int64_t warmup_steps = 0;    // s_w, 0 ≤ s_w ≤ S
  double start_factor = 1e-3;  // ε
  double min_lr = 1e-5;        // η_min
};

// η(s) for a group with peak rate `peak_lr` (Eq. 3).
double lr_schedule_at(const LrSchedule& schedule, double peak_lr, int64_t step);

// Sets every optimizer group's lr to lr_schedule_at(schedule, group.peak_lr, step).
void lr_schedule_apply(AdamW& optimizer, const LrSchedule& schedule, int64_t step);

// S = ⌊N / (B·n)⌋ (Algorithm 1 line 19): 1e9 tokens, 96×1024 per step → 10,172.
int64_t lr_schedule_total_steps(int64_t tokens, int64_t tokens_per_step);
// s_w = ⌊fraction · S⌋: 3% of 10,172 → 305 (Table C.3).
int64_t lr_schedule_warmup_steps(int64_t total_steps, double fraction);

}  // namespace hlm
