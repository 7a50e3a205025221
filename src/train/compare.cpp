// δ̄ (Eq. 4), R (Eq. 5) and the Table C.4 layout (compare.h).
#include "train/compare.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/checkpoint_io.h"

namespace hlm {

namespace {

namespace fs = std::filesystem;

const LanguageEval* find_language(const EvalResult& r, const std::string& code) {
  for (const LanguageEval& l : r.languages)
    if (l.code == code) return &l;
  return nullptr;
}

std::string tier_letter(const std::string& tier) {
  if (tier == "anchor") return "E";
  if (tier == "high") return "H";
  if (tier == "mid") return "M";
  if (tier == "low") return "L";
  return tier;
}

std::string fixed(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  std::string s = text;
  if (s[0] == '-') s = "−" + s.substr(1);  // typographic minus, as the seed's tables
  return s;
}

std::string full(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

}  // namespace

CompareRun compare_run_load(const fs::path& path, const std::string& label) {
  const fs::path file = fs::is_directory(path) ? path / "test.json" : path;
  HLM_CHECK_INPUT(fs::exists(file), path.string(), ": no evaluation found (expected a run directory with test.json ",
                  "or a file written by `hybridlm eval --out`)");
  CompareRun run;
  run.source = fs::weakly_canonical(file).string();
  run.eval = eval_result_from_json(json_file_read(file), file.string());
  run.label = label;
  if (run.label.empty()) {
    const fs::path p = fs::absolute(path).lexically_normal();
    run.label = (fs::is_directory(path) ? p.filename() : p.stem()).string();
    if (run.label.empty()) run.label = p.parent_path().filename().string();
  }
  return run;
}

double compare_delta_bar(const EvalResult& run, const std::set<std::string>& excluded) {
  double sum = 0.0;
  int64_t n = 0;
  for (const LanguageEval& l : run.languages) {
    if (excluded.count(l.code)) continue;
    HLM_CHECK_INPUT(l.teacher_ce.has_value(), l.code, ": no teacher CE (evaluate with a teacher)");
    sum += l.ce - *l.teacher_ce;
    ++n;
  }
  HLM_CHECK_INPUT(n > 0, "no language left to average");
  return sum / static_cast<double>(n);
}

double compare_relative_kl(const EvalResult& run, const EvalResult& baseline, const std::set<std::string>& excluded) {
  HLM_CHECK_INPUT(run.languages.size() == baseline.languages.size(), "the run has ", run.languages.size(),
                  " languages, the baseline ", baseline.languages.size());
  double sum = 0.0;
  int64_t n = 0;
  for (const LanguageEval& b : baseline.languages) {
    if (excluded.count(b.code)) continue;
    const LanguageEval* s = find_language(run, b.code);
    HLM_CHECK_INPUT(s != nullptr, b.code, ": evaluated for the baseline but not for the run");
    HLM_CHECK_INPUT(s->kl && b.kl, b.code, ": no KL (evaluate with a teacher)");
    HLM_CHECK_INPUT(*s->kl > 0.0 && *b.kl > 0.0, b.code, ": KL must be positive for the log ratio (run ", *s->kl,
                    ", baseline ", *b.kl, ")");
    sum += std::log(*s->kl / *b.kl);
    ++n;
  }
  HLM_CHECK_INPUT(n > 0, "no language left to average");
  return std::exp(sum / static_cast<double>(n));
}

CompareTable compare_runs(const CompareRun& baseline, const std::vector<CompareRun>& runs,
                          const std::set<std::string>& excluded) {
  std::vector<const CompareRun*> columns{&baseline};
  for (const CompareRun& r : runs)
    if (r.source != baseline.source) columns.push_back(&r);
  for (const std::string& code : excluded)
    HLM_CHECK_INPUT(find_language(baseline.eval, code) != nullptr, "--exclude ", code,
                    ": not a language of the baseline (", baseline.source, ")");
  CompareTable t;
  for (const LanguageEval& l : baseline.eval.languages) {
    t.languages.push_back(l.code);
    t.tiers.push_back(tier_letter(l.tier));
    t.excluded.push_back(excluded.count(l.code) > 0);
    t.kl.emplace_back();
    t.ce_gap.emplace_back();
  }
  for (const CompareRun* run : columns) {
    HLM_CHECK_INPUT(run->eval.languages.size() == baseline.eval.languages.size(), run->source, ": ",
                    run->eval.languages.size(), " languages, the baseline (", baseline.source, ") has ",
                    baseline.eval.languages.size());
    for (size_t i = 0; i < t.languages.size(); ++i) {
      const LanguageEval& b = baseline.eval.languages[i];
      const LanguageEval* l = find_language(run->eval, b.code);
      HLM_CHECK_INPUT(l != nullptr, run->source, ": lacks language ", b.code, " of the baseline");
      HLM_CHECK_INPUT(l->kl && l->teacher_ce && b.teacher_ce, run->source, ": ", b.code,
                      ": no KL / teacher CE (evaluate with a teacher)");
      const double tolerance = 1e-6 * std::abs(*b.teacher_ce) + 1e-9;  // same teacher, same tokens: equal values
      HLM_CHECK_INPUT(std::abs(*l->teacher_ce - *b.teacher_ce) <= tolerance, run->source, ": ", b.code,
                      ": teacher CE ", *l->teacher_ce, " differs from the baseline's ", *b.teacher_ce,
                      " (a different teacher or held-out set; R and the gaps only compare within one)");
      t.kl[i].push_back(*l->kl);
      t.ce_gap[i].push_back(l->ce - *l->teacher_ce);
    }
    t.labels.push_back(run->label);
    t.relative_kl.push_back(run == &baseline ? 1.0 : compare_relative_kl(run->eval, baseline.eval, excluded));
    t.delta_bar.push_back(compare_delta_bar(run->eval, excluded));
  }
  return t;
}

std::string compare_table_csv(const CompareTable& t) {
  std::string out = "language,tier,metric";
  for (const std::string& label : t.labels) out += "," + label;
  out += "\n";
  for (size_t i = 0; i < t.languages.size(); ++i) {
    const std::string lang = t.languages[i] + (t.excluded[i] ? " (excluded)" : "");
    out += lang + "," + t.tiers[i] + ",D_KL";
    for (double v : t.kl[i]) out += "," + full(v);
    out += "\n" + lang + "," + t.tiers[i] + ",L_LM gap";
    for (double v : t.ce_gap[i]) out += "," + full(v);
    out += "\n";
  }
  out += "mean,,R";
  for (double v : t.relative_kl) out += "," + full(v);
  out += "\nmean,,delta_bar";
  for (double v : t.delta_bar) out += "," + full(v);
  return out + "\n";
}

std::string compare_table_markdown(const CompareTable& t) {
  std::string out = "| Language | Tier | Metric |";
  std::string rule = "|---|---|---|";
  for (const std::string& label : t.labels) out += " " + label + " |", rule += "---:|";
  out += "\n" + rule + "\n";
  for (size_t i = 0; i < t.languages.size(); ++i) {
    out += "| " + t.languages[i] + (t.excluded[i] ? "†" : "") + " | " + t.tiers[i] + " | D_KL |";
    for (double v : t.kl[i]) out += " " + fixed(v, 3) + " |";
    out += "\n|  |  | L_LM gap |";
    for (double v : t.ce_gap[i]) out += " " + fixed(v, 3) + " |";
    out += "\n";
  }
  out += "| Mean |  | R |";
  for (double v : t.relative_kl) out += " " + fixed(v, 3) + " |";
  out += "\n|  |  | δ̄ |";
  for (double v : t.delta_bar) out += " " + fixed(v, 3) + " |";
  out += "\n";
  bool any_excluded = false;
  for (bool e : t.excluded) any_excluded = any_excluded || e;
  out += "\nD_KL: D_KL(p_T ‖ p_S), nats/token; L_LM gap: L_LM(student) − L_LM(teacher), nats/token; R (Eq. 5) "
         "relative to " + t.labels.front() + "; δ̄ (Eq. 4) the mean gap.";
  if (any_excluded) out += " † excluded from R and δ̄.";
  return out + "\n";
}

}  // namespace hlm
