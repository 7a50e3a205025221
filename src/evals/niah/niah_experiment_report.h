// Reports of the trained retrieval experiment (niah_experiment.h), all written into the output folder:
//   niah.csv, niah.md       every (arch, language, task, length) cell, the harness's CSV and Table 2 Markdown
//   accuracy.csv            arch, language, length: accuracy (%) = mean over the tasks whose cells ran
//   tasks.csv               arch, task, length: correct answers and samples summed over the languages, accuracy (%)
//   deficit.csv             every other arch against full_attention, per language and length: deficit = accuracy of
//                           full attention − accuracy of the arch, in percentage points (positive: the arch loses)
//   cost.csv                arch, length: mean seconds per sample (generate call / n, with its prefill and decode
//                           parts) and peak inference-state bytes (KV blocks + GDN states; max over the cells, with
//                           up to eval.max_batch sequences at once), over the cells that ran
//   training.csv            arch, layout, parameters, training tokens, tokens/s, seconds, test CE, evaluation
//                           seconds, cells evaluated of those planned (fewer: a partial evaluation)
//   report.md               the tables above in the seed's Table 2 layout (English, mean over the other languages),
//                           per task (correct / samples; the none word alone scores 1/tasks of the mean), the
//                           deficit next to the seed's pattern, per-language tables, cost and training tables
//   accuracy_<lang>.svg, deficit.svg, time.svg, memory.svg
// A mean over languages skips a language whose cells did not run at that length ("n/a" when none ran).
#pragma once
#include <filesystem>
#include <string>

#include "evals/niah/niah_experiment.h"

namespace hlm {

void niah_experiment_report_write(const NiahExperimentResult& result, const std::filesystem::path& out);

// Pieces, for tests.
std::string niah_experiment_accuracy_csv(const NiahExperimentResult& result);
std::string niah_experiment_deficit_csv(const NiahExperimentResult& result);
std::string niah_experiment_tasks_csv(const NiahExperimentResult& result);
std::string niah_experiment_cost_csv(const NiahExperimentResult& result);
std::string niah_experiment_report_markdown(const NiahExperimentResult& result);

}  // namespace hlm
