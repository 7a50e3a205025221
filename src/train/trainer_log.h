// What the trainer reports: metrics.jsonl records (one JSON object per line, flushed as written) and the progress
// line on stderr. Record types (every record has "type", "step" and "tokens"):
//   "step"   loss (the objective; null when non-finite), grad_norm (before clipping), lr {rec, rest}, skipped,
//            by_language {code: mean per-token CE or KL (without τ²) over the step's tokens of that language},
//            tokens_per_second, elapsed_seconds
//   "valid"  mean {ce, kl, teacher_ce, ce_gap} and per-language maps ce, kl, teacher_ce, ce_gap (nats/token)
//   "pass"   pass (1-based), passes: a later pass of the data stream starts within this step's rows (--passes)
//   "checkpoint" path;   "end" status, message, passes_used, passes
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/eval.h"

namespace hlm {

class MetricsLog {
 public:
  // Appends to `path` (created when absent).
  explicit MetricsLog(const std::filesystem::path& path);
  void write(const nlohmann::json& record);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

nlohmann::json metrics_valid_record(int64_t step, int64_t tokens, const EvalResult& eval);

struct ProgressFields {
  int64_t step = 0, total_steps = 0, tokens = 0;
  double loss = 0.0, grad_norm = 0.0, lr_rec = 0.0, lr_rest = 0.0;
  double tokens_per_second = 0.0, eta_seconds = 0.0;
  bool distill = false;
};
// "step 120/300  tokens 30.7K  kl 1.23456  lr 1.00e-03/3.00e-04  gnorm 0.512  2345 tok/s  eta 0:00:12"
std::string progress_line(const ProgressFields& f);

// "1.2K", "30.7M", "1.00B" for token counts.
std::string format_count(int64_t n);

}  // namespace hlm
