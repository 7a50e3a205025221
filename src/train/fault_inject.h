// Fault injection for the crash tests (tests/cli/test_cli_crash.cpp, tests/dist, docs/reliability.md). The variable
//   HYBRIDLM_FAULT=<point>@<n>:<action>
// makes the n-th pass (1-based, counted per process) through fault_point("<point>") do <action>:
//   kill   SIGKILL to the process itself: a crash at exactly that moment (nothing is flushed or cleaned up);
//   fail   an input error "injected fault at <point>" (what an I/O error there would throw);
//   hang   the calling thread stops for good without exiting (pause() in a loop; SIGTERM and SIGKILL still end
//          the process): a stuck rank, for the collective timeout of data-parallel runs (docs/distributed.md).
// Points: "checkpoint.model" (model written into the temporary directory), "checkpoint.optimizer" (optimizer state
// written), "checkpoint.filled" (every file written, before the rename), "checkpoint.renamed" (the new checkpoint in
// place, older ones not yet removed), "checkpoint.saved" (older ones removed), "train.step" (after each step's
// update), "model.saved" (final model/ in place), "train.final_evaluation" (its start, after model/), "study.stage"
// (a study stage marked done).
// Unset or naming another point, fault_point only compares a cached string. A malformed value is an input error.
#pragma once
#include <string_view>

namespace hlm {

inline constexpr const char* kFaultEnv = "HYBRIDLM_FAULT";

void fault_point(std::string_view point);

}  // namespace hlm
