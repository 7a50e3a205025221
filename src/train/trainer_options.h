// The one table of TrainConfig settings: JSON key, long option, field, which commands offer it, whether it decides
// the training trajectory, and help text. config.json / train_config.json, the CLI of `pretrain` and `distill`, and
// the resume rules all derive from it.
// Resume rule: a setting that decides the trajectory ("fixed") must equal the checkpoint's value when it is given
// again on the command line; every other setting given (out, cadence, logging, stop) replaces the saved one; settings
// not given keep the checkpoint's values.
#pragma once
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "train/trainer.h"

namespace hlm {

using TrainField = std::variant<std::string TrainConfig::*, int64_t TrainConfig::*, uint64_t TrainConfig::*,
                                double TrainConfig::*>;

inline constexpr unsigned kTrainJobPretrain = 1u, kTrainJobDistill = 2u, kTrainJobBoth = 3u;

struct TrainOption {
  const char* key;     // JSON key ("batch_rows")
  const char* option;  // long option ("--batch")
  TrainField field;
  unsigned jobs;       // commands that offer the option
  bool fixed;          // decides the trajectory: cannot change on resume
  bool cli_only;       // an alias on the command line, not a JSON key (pretrain's --lr)
  bool required;       // must be given for a fresh run (not with --resume)
  const char* help;
};

std::span<const TrainOption> train_options();
unsigned train_job_bit(TrainJob job);

// Settings whose values differ between a and b among the fixed ones ("--batch: 96 vs 64"), for resume checks.
std::vector<std::string> train_config_fixed_differences(const TrainConfig& a, const TrainConfig& b);

// The command-line step before train_run: `parsed` holds defaults overwritten by the options in `given` (JSON keys).
// Fresh run: checks the required options and returns `parsed` (pretrain: lr_rec = lr_rest = --lr). Resume: reads
// the checkpoint's train_config.json and applies the resume rule above (input error listing every conflict).
TrainConfig train_config_resolve(TrainJob job, const TrainConfig& parsed, const std::vector<std::string>& given);

// Prints the resolved settings, runs the job (on `device` when config.device is not "cpu"; see train_run) and turns
// its result into an exit code (0 done or stopped as asked, 1 diverged), printing where the outputs are.
int train_command_run(const TrainConfig& config, TrainDevice* device = nullptr);

// Help footer shared by pretrain and distill (files written, resume rules).
std::string train_command_footer();

}  // namespace hlm
