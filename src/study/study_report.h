// The study's one self-contained HTML report (inline SVG and CSS, no scripts, no external files) and the CSV/JSON
// beside it, in `dir`:
//   report.html   Table 3 (R = geometric mean of per-language D_KL ratios, δ̄, tokens to reach the baseline's final
//                 gap and the first crossing, per placement), replicates over data seeds (each metric per seed, mean
//                 and range, per language and in aggregate, and which differences exceed the seed-to-seed spread),
//                 Table C.4 (per language D_KL and L_LM gap), validation curves (mean D_KL and L_LM gap against
//                 tokens, every placement in one plot, the baseline's final gap as the target; a placement sharing
//                 another's run is drawn dashed), SoftCKA per capture point (table and plots, each labelled with its
//                 point) and per model with its full-attention layers marked, attention locality per window, the
//                 resolved config and versions;
//   summary.csv / summary.json   one row per placement: layers, layout, R, δ̄, test mean D_KL, reach and crossing
//                 tokens, share; summary.json also holds the replicates (study_replicates.h) and the teacher (directory,
//                 architecture, Granite multipliers when it has them, the students' architecture) and the data
//                 budget (per training stage: tokens planned and trained, per language, passes allowed and begun);
//   compare.csv   Table C.4 at full precision (train/compare.h); curves.csv: placement,seed,tokens,mean_kl,mean_ce_gap;
//   replicates.csv (when replicated): placement,seed,metric,language,value;
//   softcka.csv   model,layer,point,lang,softcka; locality.csv: model,layer,lang,k,share (every model).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "study/study_curves.h"
#include "study/study_replicates.h"
#include "train/compare.h"

namespace hlm {

struct StudyReportRun {
  std::string label;                 // placement name or custom_…
  std::vector<int> full_layers;
  std::string layout;                // "ARRR…"
  std::string same_as;               // the placement whose run it shares (identical layers), else ""
  std::vector<ValidationPoint> curve;
  std::optional<double> reach_tokens;     // Figure 6: first validation point from which the gap stays <= target
  std::optional<double> crossing_tokens;  // the first crossing of the target (interpolated; study_curves.h)
  int64_t total_tokens = 0;            // tokens seen at the end of the run
};

// The data budget of one training stage, from its run directory (config.json and test.json "meta", written by the
// trainer): the tokens it was planned for, the tokens it trained on (in total and per language), and the passes
// over the training documents it was allowed (--passes) and began. Runs written before passes existed read as 1 of 1
// with no per-language split.
struct StudyDataBudget {
  std::string stage;                                   // "teacher (pretrain)", "distill (<baseline>)"
  int64_t tokens_planned = 0;                          // --tokens
  int64_t tokens_trained = 0;
  int64_t passes = 1;                                  // --passes
  int64_t passes_used = 1;                             // passes begun
  bool data_exhausted = false;                         // the data ran out before the planned steps
  std::map<std::string, int64_t> tokens_by_language;   // trained tokens per language (empty: not recorded)
};
StudyDataBudget study_data_budget_read(const std::filesystem::path& run_dir, const std::string& stage);

struct StudyReportModel {
  std::string label;               // "teacher" or a student label
  int layers = 0;
  std::vector<int> full_layers;    // every layer for the teacher
  std::filesystem::path align_dir;     // holds softcka.csv + softcka_<point>.svg; empty when not run
  std::filesystem::path locality_dir;  // holds locality.csv; empty when not run
};

struct StudyReport {
  nlohmann::json config;             // resolved (study_config_to_json)
  std::string teacher;               // teacher model directory
  std::string teacher_architecture;  // the teacher's model_type (qwen3, granite)
  std::string student_architecture;  // the students' model_type (qwen3_hybrid, granite_hybrid)
  std::vector<std::pair<std::string, double>> teacher_scalars;  // Granite's four multipliers when the config has them
  CompareTable table;                // test results, baseline first
  std::vector<StudyReportRun> runs;  // same order as table.labels
  double target_gap = 0.0;           // the baseline's final validation gap
  std::vector<StudyReportModel> models;  // teacher first
  std::vector<std::string> align_points;
  std::vector<int64_t> locality_k;
  std::vector<std::pair<std::string, std::string>> versions;  // (what, value)
  StudyReplicates replicates;        // empty placements: one data seed only
  std::vector<StudyDataBudget> data_budget;  // the teacher's pretraining (when the study ran it), then the baseline's
                                             // distillation (every distillation run has the same data settings)
};

void study_write_report(const std::filesystem::path& dir, const StudyReport& report);

}  // namespace hlm
