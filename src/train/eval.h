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
// Devices: the per-pass work is one function (EvalPass) that adds a packed batch's per-token values into per-language
// sums (EvalSums); evaluate() uses the CPU's (eval_pass_sums), evaluate_with() any other, e.g. the GPU's
// (TrainDevice::evaluate_pass during pretrain/distill --device cuda, train/cuda/cuda_eval.h for `eval --device cuda`).
// Both add the values in token order into fp64, so results differ only by the per-token values themselves.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hlm {

class Model;
struct HeldOutSet;
struct PackedBatch;

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

// Running sums of the per-token evaluation values, indexed by the tokens' language ids (PackedBatch::language), in
// nats. ce and teacher_ce add 0 for a token without a target; kl (τ = 1, without τ²) adds every token. The teacher's
// vectors stay zero without a teacher.
struct EvalSums {
  std::vector<double> ce, teacher_ce, kl;
  std::vector<int64_t> ce_tokens;  // tokens with a target
  std::vector<int64_t> tokens;     // every token
  explicit EvalSums(size_t num_languages = 0)
      : ce(num_languages), teacher_ce(num_languages), kl(num_languages), ce_tokens(num_languages),
        tokens(num_languages) {}
  size_t num_languages() const { return ce.size(); }
};

// One evaluation pass: adds `batch`'s per-token values into `sums`, token by token in batch order (every language id
// must be < sums.num_languages(); internal error otherwise). Whether the teacher's values are added is the pass's
// own (a teacher is there or not).
using EvalPass = std::function<void(const PackedBatch& batch, EvalSums& sums)>;

// Helpers of a pass. eval_sums_count checks the batch (targets and language ids for every token, ids inside the sums)
// and counts its tokens per language; eval_sums_add adds per-token values [T] to `sums` by the tokens' language ids, in
// token order (the order every pass uses, so CPU and device sums differ only by the values).
void eval_sums_count(const PackedBatch& batch, EvalSums& sums);
void eval_sums_add(std::vector<double>& sums, const float* values, const PackedBatch& batch);

// The CPU pass: forward_final_hidden of `model` (and `teacher` when not null), then lm_head_cross_entropy and
// lm_head_forward_kl at τ = 1 without gradients; a target ≥ V is an input error.
void eval_pass_sums(Model& model, Model* teacher, const PackedBatch& batch, EvalSums& sums);

// Evaluates `model` (and the KL to `teacher` when not null) on every language of `set`. Both models must share the
// vocabulary. Deterministic; does not change either model's weights.
EvalResult evaluate(Model& model, Model* teacher, const HeldOutSet& set, int64_t rows_per_pass = 8);

// The same over any pass (a device's): each language's rows in passes of rows_per_pass rows, the pass's sums of all
// language ids added up per language of `set` (its rows carry that language's id). with_teacher: whether the pass
// adds the teacher's values (then kl and teacher_ce are reported).
EvalResult evaluate_with(const EvalPass& pass, bool with_teacher, const HeldOutSet& set, int64_t rows_per_pass = 8);

// Recomputes the means from the per-language values.
void eval_result_update_means(EvalResult& result);

// JSON form (format "hybridlm-eval", version 1), as written by `hybridlm eval --out` and in a run's test.json.
// `meta` (object or null) is stored under "meta" (split, model, teacher, step, ...).
nlohmann::json eval_result_to_json(const EvalResult& result, const nlohmann::json& meta);
EvalResult eval_result_from_json(const nlohmann::json& json, const std::string& source);

// One line per language and a mean line (for the CLI and logs).
std::string eval_result_table(const EvalResult& result);

}  // namespace hlm
