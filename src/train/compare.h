// Comparing distilled students against a baseline run (seed App. C.5, Table 3 and Table C.4):
//   δ̄_S = (1/|Λ|) Σ_λ (L^S_LM,λ − L^T_LM,λ)                          (Eq. 4: mean L_LM gap to the teacher, nats)
//   R_S = exp((1/|Λ|) Σ_λ log(D^S_KL,λ / D^B_KL,λ))                   (Eq. 5: geometric-mean KL ratio to baseline B)
// Λ = the languages of the evaluations minus `excluded` (the seed excludes Mon). Every run must be evaluated on the
// same languages with the same teacher (equal teacher CE per language): R and the gaps are only comparable within
// one teacher and one held-out set. Inputs are evaluations in eval.h's JSON form: a run directory's test.json or a
// file written by `hybridlm eval --out`.
// The table follows Table C.4: per language a D_KL row and an L_LM-gap row (one column per run, baseline first),
// then R and δ̄ rows; excluded languages are marked with † and left out of R and δ̄.
#pragma once
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "train/eval.h"

namespace hlm {

struct CompareRun {
  std::string label;   // column title (the run directory's name unless given)
  std::string source;  // where the evaluation came from
  EvalResult eval;
};

// Reads a run directory (its test.json) or an evaluation JSON file; input error naming the path otherwise.
CompareRun compare_run_load(const std::filesystem::path& path, const std::string& label);

// Eq. 4 over the languages not excluded (input error when a language lacks the teacher CE or none is left).
double compare_delta_bar(const EvalResult& run, const std::set<std::string>& excluded);
// Eq. 5 of `run` against `baseline` over the languages not excluded (input error when a KL is missing or ≤ 0, or the
// language sets differ).
double compare_relative_kl(const EvalResult& run, const EvalResult& baseline, const std::set<std::string>& excluded);

struct CompareTable {
  std::vector<std::string> labels;           // baseline first
  std::vector<std::string> languages;        // baseline's order
  std::vector<std::string> tiers;            // E/H/M/L ("" when unknown)
  std::vector<bool> excluded;                // per language
  std::vector<std::vector<double>> kl;       // [language][run]
  std::vector<std::vector<double>> ce_gap;   // [language][run]
  std::vector<double> relative_kl;           // R per run (baseline: 1)
  std::vector<double> delta_bar;             // δ̄ per run
};

// Checks that every run matches the baseline (languages, teacher CE) and builds the table. `runs` may include the
// baseline again (it is shown once, first).
CompareTable compare_runs(const CompareRun& baseline, const std::vector<CompareRun>& runs,
                          const std::set<std::string>& excluded);

std::string compare_table_csv(const CompareTable& table);       // full precision
std::string compare_table_markdown(const CompareTable& table);  // 3 decimals, as Table C.4

}  // namespace hlm
