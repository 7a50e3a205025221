// Reports of a synthetic sweep, in the layout of Olmo Hybrid's Tables 15–17 (rows n or m, columns the five
// architectures) and Figure 7 (accuracy vs difficulty, one line per architecture):
//   <task>.csv   long format: task,arch,difficulty,m,in_training_range,items,accuracy,moved_items,moved_accuracy,
//                paper_accuracy (one row per architecture and difficulty; paper_accuracy empty where the paper has none)
//   <task>.md    the wide table, each cell "ours / paper" where the paper has the cell, else ours alone; a "moved
//                items" table for the pointer tasks (ours only: the paper does not report it)
//   <task>.svg   accuracy vs log2(difficulty): ours solid, the paper's dashed in the same colour; a dotted line
//                marks the end of the training range
//   results.md   every task's table in one page, with training figures (parameters, tokens/s, final loss)
// The paper's values (synth_paper_values.h) are shown only where they describe the same task: state tracking with 5
// variables, state-based recall with m = n (state_based_recall_m = 0), recall always.
#pragma once
#include <filesystem>
#include <optional>
#include <vector>

#include "evals/synth/synth_paper_values.h"
#include "evals/synth/synth_train.h"

namespace hlm {

// The paper's accuracy for the cell (task, arch, difficulty) of a sweep run with `config`; nullopt where the paper
// has no such cell or its task differs from the config's (rules above).
std::optional<double> synth_paper_cell(const SynthConfig& config, SynthTask task, SynthArch arch, int64_t difficulty);

// Writes the files above into `dir` from the pairs finished so far (missing pairs are shown as "–").
void synth_write_reports(const std::filesystem::path& dir, const SynthConfig& config,
                         const std::vector<SynthPairResult>& results);

}  // namespace hlm
