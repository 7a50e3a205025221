// Held-out evaluation (seed App. C.5 "Evaluation protocol"): per language, the model's cross-entropy L_LM against the
// next-token targets and, with a teacher, the forward KL D_KL(p_T ‖ p_S) at τ = 1, both in nats per token and
// averaged over ALL tokens of the language (a sum over every row of the language divided by its token count).
//   CE counts the tokens that have a target (the last token of each document piece has none, data_stream.h);
//   KL counts every token (Algorithm 1 line 24 averages it over all B·n positions).
// With a teacher the teacher's own CE comes for free (its forward is needed for the KL), so the L_LM gap
// L_S − L_T (Eq. 4's summand) is reported too.
// Aggregates: plain means over the languages of the set (the seed's averages over Λ; excluding a language such as
// Mon is the caller's choice, see compare.h).
// Memory: rows are evaluated `rows_per_pass` at a time; the LM head never materialises [N, V] (lm_head_loss.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hlm {

class Model;
struct HeldOutSet;

struct LanguageEval {
  std::string code;                  // "fra_Latn"
  std::string tier;                  // "anchor" | "high" | "mid" | "low" | "" (unknown)
  int64_t tokens = 0;                // tokens evaluated (KL denominator)
  int64_t ce_tokens = 0;             // tokens with a target (CE denominator)
  double ce = 0.0;                   // student (or model) L_LM, nats/token
  std::optional<double> kl;          // D_KL(p_T ‖ p_S), nats/token, τ = 1
  std::optional<double> teacher_ce;  // teacher L_LM, nats/token
};

struct EvalResult {
  std::vector<LanguageEval> languages;  // in the held-out set's order
  double mean_ce = 0.0;                 // means over languages
  std::optional<double> mean_kl;
  std::optional<double> mean_teacher_ce;
  std::optional<double> mean_ce_gap;    // mean of ce − teacher_ce (Eq. 4 over these languages)
};

// Evaluates `model` (and the KL to `teacher` when not null) on every language of `set`. Both models must share the
// vocabulary. Deterministic; does not change either model's weights.
EvalResult evaluate(Model& model, Model* teacher, const HeldOutSet& set, int64_t rows_per_pass = 8);

// Recomputes the means from the per-language values.
void eval_result_update_means(EvalResult& result);

// JSON form (format "hybridlm-eval", version 1), as written by `hybridlm eval --out` and in a run's test.json.
// `meta` (object or null) is stored under "meta" (split, model, teacher, step, ...).
nlohmann::json eval_result_to_json(const EvalResult& result, const nlohmann::json& meta);
EvalResult eval_result_from_json(const nlohmann::json& json, const std::string& source);

// One line per language and a mean line (for the CLI and logs).
std::string eval_result_table(const EvalResult& result);

}  // namespace hlm
