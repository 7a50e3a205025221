// A whole synthetic sweep (`hybridlm synth`): every (task, architecture) of the config, resumable.
//   <out>/config.json                  resolved config (every field); a rerun with a config that differs in anything
//                                      but `tasks`/`architectures` is an input error (use another --out)
//   <out>/<task>/<arch>/model_config.json  the HF-style config of the model trained
//   <out>/<task>/<arch>/result.json    done marker: training figures and per-difficulty accuracies, written
//                                      atomically after the pair finished; a pair with a marker is skipped
//   <out>/<task>.{csv,md,svg}, results.md   reports (synth_report.h), rewritten after every pair
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "evals/synth/synth_train.h"

namespace hlm {

struct SynthRunOptions {
  std::filesystem::path out;
  SynthDevice device;  // where pairs train and evaluate (synth_train.h); default: the CPU
};

// Runs the sweep; returns every pair's result (loaded from markers for skipped pairs). Progress goes to `log`.
std::vector<SynthPairResult> synth_run(const SynthConfig& config, const SynthRunOptions& options, const SynthLog& log);

}  // namespace hlm
