// metrics.jsonl records and the progress line (trainer_log.h).
#include "train/trainer_log.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace hlm {

using json = nlohmann::json;

MetricsLog::MetricsLog(const std::filesystem::path& path) : path_(path), out_(path, std::ios::app) {
  HLM_CHECK_INPUT(out_.good(), path.string(), ": cannot open for writing");
}

void MetricsLog::write(const json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  HLM_CHECK_INPUT(out_.good(), path_.string(), ": write failed");
}

json metrics_valid_record(int64_t step, int64_t tokens, const EvalResult& eval) {
  const auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json ce = json::object(), kl = json::object(), teacher = json::object(), gap = json::object();
  for (const LanguageEval& l : eval.languages) {
    ce[l.code] = l.ce;
    if (l.kl) kl[l.code] = *l.kl;
    if (l.teacher_ce) teacher[l.code] = *l.teacher_ce, gap[l.code] = l.ce - *l.teacher_ce;
  }
  json record = {{"type", "valid"},
                 {"step", step},
                 {"tokens", tokens},
                 {"mean",
                  {{"ce", eval.mean_ce},
                   {"kl", opt(eval.mean_kl)},
                   {"teacher_ce", opt(eval.mean_teacher_ce)},
                   {"ce_gap", opt(eval.mean_ce_gap)}}},
                 {"ce", ce}};
  if (eval.mean_kl) record["kl"] = kl;
  if (eval.mean_teacher_ce) record["teacher_ce"] = teacher, record["ce_gap"] = gap;
  return record;
}

std::string format_count(int64_t n) {
  char text[32];
  const double v = static_cast<double>(n);
  if (n < 1000) {
    std::snprintf(text, sizeof text, "%lld", static_cast<long long>(n));
  } else if (n < 1000000) {
    std::snprintf(text, sizeof text, "%.1fK", v / 1e3);
  } else if (n < 1000000000) {
    std::snprintf(text, sizeof text, "%.1fM", v / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.2fB", v / 1e9);
  }
  return text;
}

std::string progress_line(const ProgressFields& f) {
  const auto eta = static_cast<int64_t>(std::isfinite(f.eta_seconds) ? std::max(0.0, f.eta_seconds) : 0.0);
  char text[320];
  std::snprintf(text, sizeof text,
                "step %lld/%lld  tokens %s  %s %.5f  lr %.2e/%.2e  gnorm %.3f  %.0f tok/s  eta %lld:%02lld:%02lld",
                static_cast<long long>(f.step), static_cast<long long>(f.total_steps), format_count(f.tokens).c_str(),
                f.distill ? "kl" : "ce", f.loss, f.lr_rec, f.lr_rest, f.grad_norm, f.tokens_per_second,
                static_cast<long long>(eta / 3600), static_cast<long long>(eta / 60 % 60),
                static_cast<long long>(eta % 60));
  return text;
}

}  // namespace hlm
