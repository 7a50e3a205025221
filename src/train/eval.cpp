// Held-out evaluation and its JSON form (contracts in eval.h).
#include "train/eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "data/data_stream.h"
#include "models/model.h"
#include "train/trainer_batch.h"

namespace hlm {

namespace {

constexpr const char* kEvalFormat = "hybridlm-eval";
constexpr int kEvalVersion = 1;

// One language's rows in passes of rows_per_pass rows; the sums of every language id add up to this language's.
LanguageEval evaluate_language(const EvalPass& pass, bool with_teacher, const std::string& code,
                               const PackedBatch& rows, int64_t rows_per_pass, size_t num_languages) {
  EvalSums sums(num_languages);
  for (int64_t r = 0; r < rows.rows; r += rows_per_pass)
    pass(packed_batch_rows(rows, r, std::min(rows.rows, r + rows_per_pass)), sums);
  LanguageEval out;
  out.code = code;
  double ce_sum = 0.0, kl_sum = 0.0, teacher_ce_sum = 0.0;
  for (size_t l = 0; l < num_languages; ++l) {  // one id is non-zero for a held-out set: x + 0 = x exactly
    ce_sum += sums.ce[l];
    kl_sum += sums.kl[l];
    teacher_ce_sum += sums.teacher_ce[l];
    out.ce_tokens += sums.ce_tokens[l];
    out.tokens += sums.tokens[l];
  }
  HLM_CHECK_INPUT(out.tokens > 0 && out.ce_tokens > 0, "held-out set of ", code,
                  " has no tokens to evaluate (too few held-out documents for one row?)");
  out.ce = ce_sum / static_cast<double>(out.ce_tokens);
  if (with_teacher) {
    out.teacher_ce = teacher_ce_sum / static_cast<double>(out.ce_tokens);
    out.kl = kl_sum / static_cast<double>(out.tokens);
  }
  return out;
}

std::optional<double> optional_number(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  HLM_CHECK_INPUT(j[key].is_number(), source, ": '", key, "' is not a number");
  return j[key].get<double>();
}

}  // namespace

void eval_sums_count(const PackedBatch& batch, EvalSums& sums) {
  const auto N = static_cast<size_t>(batch.batch.total_tokens());
  HLM_CHECK(batch.targets.size() == N && batch.language.size() == N, "evaluation pass: ", N, " tokens but ",
            batch.targets.size(), " targets and ", batch.language.size(), " language ids");
  for (int16_t lang : batch.language)
    HLM_CHECK(lang >= 0 && static_cast<size_t>(lang) < sums.num_languages(), "evaluation pass: token language ",
              lang, " outside the ", sums.num_languages(), " of the sums");
  for (size_t t = 0; t < N; ++t) {
    const auto lang = static_cast<size_t>(batch.language[t]);
    ++sums.tokens[lang];
    if (batch.targets[t] >= 0) ++sums.ce_tokens[lang];
  }
}

void eval_sums_add(std::vector<double>& sums, const float* values, const PackedBatch& batch) {
  for (size_t t = 0; t < batch.language.size(); ++t) sums[static_cast<size_t>(batch.language[t])] += values[t];
}

void eval_pass_sums(Model& model, Model* teacher, const PackedBatch& part, EvalSums& sums) {
  eval_sums_count(part, sums);
  const int64_t N = part.batch.total_tokens();
  std::vector<float> values(static_cast<size_t>(N));
  const Tensor hidden = forward_final_hidden(model, part.batch);
  lm_head_cross_entropy(values.data(), hidden.f32(), N, lm_head_of(model), part.targets.data(),
                        static_cast<const float*>(nullptr), static_cast<const LmHeadGrad<float>*>(nullptr));
  eval_sums_add(sums.ce, values.data(), part);  // 0 for tokens without a target
  if (teacher == nullptr) return;
  const Tensor teacher_hidden = forward_final_hidden(*teacher, part.batch);
  lm_head_cross_entropy(values.data(), teacher_hidden.f32(), N, lm_head_of(*teacher), part.targets.data(),
                        static_cast<const float*>(nullptr), static_cast<const LmHeadGrad<float>*>(nullptr));
  eval_sums_add(sums.teacher_ce, values.data(), part);
  lm_head_forward_kl(values.data(), teacher_hidden.f32(), lm_head_of(*teacher), hidden.f32(), lm_head_of(model), N,
                     1.0, static_cast<const float*>(nullptr), static_cast<const LmHeadGrad<float>*>(nullptr));
  eval_sums_add(sums.kl, values.data(), part);
}

EvalResult evaluate(Model& model, Model* teacher, const HeldOutSet& set, int64_t rows_per_pass) {
  if (teacher != nullptr) {
    HLM_CHECK_INPUT(teacher->config().vocab_size == model.config().vocab_size, "teacher vocabulary (",
                    teacher->config().vocab_size, ") differs from the model's (", model.config().vocab_size, ")");
  }
  return evaluate_with([&](const PackedBatch& part, EvalSums& sums) { eval_pass_sums(model, teacher, part, sums); },
                       teacher != nullptr, set, rows_per_pass);
}

EvalResult evaluate_with(const EvalPass& pass, bool with_teacher, const HeldOutSet& set, int64_t rows_per_pass) {
  HLM_CHECK(rows_per_pass > 0, "rows_per_pass must be positive");
  HLM_CHECK(set.languages.size() == set.per_language.size(), "held-out set: languages and rows differ");
  size_t num_languages = set.languages.size();
  for (const PackedBatch& rows : set.per_language)
    for (int16_t lang : rows.language)
      if (lang >= 0) num_languages = std::max(num_languages, static_cast<size_t>(lang) + 1);
  EvalResult result;
  for (size_t i = 0; i < set.languages.size(); ++i)
    result.languages.push_back(evaluate_language(pass, with_teacher, set.languages[i], set.per_language[i],
                                                 rows_per_pass, num_languages));
  eval_result_update_means(result);
  return result;
}

void eval_result_update_means(EvalResult& r) {
  r.mean_ce = 0.0;
  r.mean_kl.reset();
  r.mean_teacher_ce.reset();
  r.mean_ce_gap.reset();
  if (r.languages.empty()) return;
  const double n = static_cast<double>(r.languages.size());
  bool all_kl = true, all_teacher = true;
  double kl = 0.0, teacher = 0.0, gap = 0.0;
  for (const LanguageEval& l : r.languages) {
    r.mean_ce += l.ce / n;
    all_kl = all_kl && l.kl.has_value();
    all_teacher = all_teacher && l.teacher_ce.has_value();
    if (l.kl) kl += *l.kl / n;
    if (l.teacher_ce) teacher += *l.teacher_ce / n, gap += (l.ce - *l.teacher_ce) / n;
  }
  if (all_kl) r.mean_kl = kl;
  if (all_teacher) r.mean_teacher_ce = teacher, r.mean_ce_gap = gap;
}

nlohmann::json eval_result_to_json(const EvalResult& r, const nlohmann::json& meta) {
  using nlohmann::json;
  const auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json languages = json::array();
  for (const LanguageEval& l : r.languages) {
    languages.push_back({{"code", l.code},
                         {"tier", l.tier},
                         {"tokens", l.tokens},
                         {"ce_tokens", l.ce_tokens},
                         {"ce", l.ce},
                         {"kl", opt(l.kl)},
                         {"teacher_ce", opt(l.teacher_ce)},
                         {"ce_gap", l.teacher_ce ? json(l.ce - *l.teacher_ce) : json(nullptr)}});
  }
  return {{"format", kEvalFormat},
          {"version", kEvalVersion},
          {"unit", "nats/token"},
          {"meta", meta},
          {"languages", languages},
          {"mean",
           {{"ce", r.mean_ce}, {"kl", opt(r.mean_kl)}, {"teacher_ce", opt(r.mean_teacher_ce)},
            {"ce_gap", opt(r.mean_ce_gap)}}}};
}

EvalResult eval_result_from_json(const nlohmann::json& j, const std::string& source) {
  HLM_CHECK_INPUT(j.is_object() && j.value("format", "") == kEvalFormat, source,
                  ": not a hybridlm evaluation (expected \"format\": \"", kEvalFormat, "\")");
  HLM_CHECK_INPUT(j.value("version", 0) == kEvalVersion, source, ": unsupported evaluation version");
  HLM_CHECK_INPUT(j.contains("languages") && j["languages"].is_array(), source, ": 'languages' is not a list");
  EvalResult r;
  for (const nlohmann::json& l : j["languages"]) {
    HLM_CHECK_INPUT(l.is_object() && l.contains("code") && l["code"].is_string() && l.contains("ce") &&
                        l["ce"].is_number(),
                    source, ": a language entry lacks 'code' or 'ce'");
    LanguageEval e;
    e.code = l["code"].get<std::string>();
    e.tier = l.value("tier", "");
    e.tokens = l.value("tokens", int64_t{0});
    e.ce_tokens = l.value("ce_tokens", int64_t{0});
    e.ce = l["ce"].get<double>();
    e.kl = optional_number(l, "kl", source);
    e.teacher_ce = optional_number(l, "teacher_ce", source);
    r.languages.push_back(std::move(e));
  }
  eval_result_update_means(r);
  return r;
}

std::string eval_result_table(const EvalResult& r) {
  std::string out;
  char line[256];
  const bool teacher = r.mean_kl.has_value();
  std::snprintf(line, sizeof line, "%-12s %-6s %9s %9s%s\n", "language", "tier", "tokens", "ce",
                teacher ? "        kl  teacher_ce    ce_gap" : "");
  out += line;
  const auto row = [&](const std::string& code, const std::string& tier, const std::string& tokens, double ce,
                       std::optional<double> kl, std::optional<double> tce) {
    std::snprintf(line, sizeof line, "%-12s %-6s %9s %9.5f", code.c_str(), tier.c_str(), tokens.c_str(), ce);
    out += line;
    if (kl && tce) {
      std::snprintf(line, sizeof line, " %9.5f %11.5f %9.5f", *kl, *tce, ce - *tce);
      out += line;
    }
    out += "\n";
  };
  for (const LanguageEval& l : r.languages) row(l.code, l.tier, std::to_string(l.tokens), l.ce, l.kl, l.teacher_ce);
  row("mean", "", "", r.mean_ce, r.mean_kl, r.mean_teacher_ce);
  return out;
}

}  // namespace hlm
