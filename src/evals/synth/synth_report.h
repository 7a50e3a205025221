// Reports of a synthetic sweep, in the layout of Olmo Hybrid's Tables 15–17 (rows n or m, columns the five
// architectures) and Figure 7 (accuracy vs difficulty, one line per architecture):
//   <task>.csv   long format: task,arch,difficulty,m,in_training_range,items,accuracy,moved_items,moved_accuracy,
//                paper_accuracy (one row per architecture and difficulty; paper_accuracy empty when unknown)
//   <task>.md    the wide table (ours), a "moved items" table for the pointer tasks, and the paper's column status
//   <task>.svg   accuracy vs log2(difficulty); a dotted line marks the end of the training range
//   results.md   every task's table in one page, with training figures (parameters, tokens/s, final loss)
// The paper's values: synth_paper_accuracy() holds the values we could verify. ../shared/docs/evals.md lists none
// (the paper's text was not available), so every paper cell is empty; we never fill them from memory.
#pragma once
#include <filesystem>
#include <optional>
#include <vector>

#include "evals/synth/synth_train.h"

namespace hlm {

// The paper's accuracy for (task, arch, difficulty), where verified; nullopt otherwise (at present: always).
std::optional<double> synth_paper_accuracy(SynthTask task, SynthArch arch, int64_t difficulty);

// Writes the files above into `dir` from the pairs finished so far (missing pairs are shown as "–").
void synth_write_reports(const std::filesystem::path& dir, const SynthConfig& config,
                         const std::vector<SynthPairResult>& results);

}  // namespace hlm
