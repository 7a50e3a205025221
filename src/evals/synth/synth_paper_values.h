// The published accuracies of Olmo Hybrid's synthetic study (Merrill et al., "Olmo Hybrid: From Theory to Practice
// and Back", arXiv 2604.03444, Appendix Tables 15–17), as facts to print beside ours. Source: the paper's text as
// stored in ../shared/seeds/001_67ba11cd3345c395.txt, lines 358–391 (that extraction puts each caption AFTER its
// table: rows n = 4..128 before "Table 15" are state tracking, rows m before "Table 16" recall, rows n before
// "Table 17" state-based recall with m = n).
// Columns of the paper, in order: Transformer, Linear RNN (neg. eig.), Linear RNN (pos. eig.), Hybrid (neg. eig.),
// Hybrid (pos. eig.) = our transformer, gdn_neg, gdn_pos, hybrid_neg, hybrid_pos. Every value is a multiple of
// 1/256, so the paper evaluated 256 items per cell [our inference]; its training recipe is not in the text.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "evals/synth/synth_models.h"
#include "evals/synth/synth_task.h"

namespace hlm {

struct SynthPaperRow {
  SynthTask task;
  int64_t difficulty;                // n (state tracking, state-based recall with m = n) or m (recall)
  std::array<double, 5> accuracy;    // in synth_arch_specs() order (the paper's column order)
};

// The paper's table rows (every row of Tables 15–17), one table.
std::span<const SynthPaperRow> synth_paper_rows();

// The paper's accuracy for (task, arch, difficulty); nullopt where the paper has no such cell. State-based recall
// values hold for m = n only: callers with another m (state_based_recall_m > 0) must not use them.
std::optional<double> synth_paper_accuracy(SynthTask task, SynthArch arch, int64_t difficulty);

// "Olmo Hybrid Table 15" etc.: the paper's table of `task`.
const char* synth_paper_table(SynthTask task);

}  // namespace hlm
