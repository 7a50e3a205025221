// `hybridlm study`: the seed's placement study (§6, App. C) end to end, as stages under one output directory:
//   teacher/            (a) pretrain the dense teacher (skipped when the config names an existing teacher.dir)
//   students/<label>/   (b) convert the teacher into one hybrid student per placement (models/convert.h)
//   runs/<label>/       (c, d) distill each student with identical data and seeds; validation every N tokens and the
//                       test evaluation at the end come from the trainer (train/trainer.h)
//   align/<model>/      (f) SoftCKA of the teacher and every student on the parallel set (analysis/align.h)
//   locality/<model>/   (f) attention locality of the same models (analysis/locality.h)
//   report/             (e, g) R, δ̄, Figure 6 shares, Table C.4, curves, SoftCKA, locality (study_report.h)
// study_config.json holds the resolved config; a later run into the same directory must resolve to the same config.
// Each stage directory gets a done marker after its outputs (study_stage.h); finished stages are skipped, an
// interrupted training run resumes from its newest checkpoint, and the report is rewritten whenever a stage ran.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "analysis/sentence_states.h"
#include "analysis/softcka_batch.h"
#include "study/study_config.h"
#include "train/train_device.h"

namespace hlm {

struct StudyResult {
  std::filesystem::path report;  // report/report.html
  int stages_run = 0;
  int stages_skipped = 0;
};

// The accelerators of the stages whose device is not "cpu" (the CLI passes the CUDA ones; hlm_study itself is built
// without CUDA): a TrainDevice per training stage (cli/train_device_cli.h's train_device_for), and for the align stage
// with analysis.device "cuda" the model forward and the SoftCKA kernel-norm engine (analysis/cuda/).
struct StudyDevices {
  std::function<std::unique_ptr<TrainDevice>(const std::string& device, const std::string& precision)> train;
  std::function<StatesForward(const Model& model)> states_forward;
  std::function<std::unique_ptr<KernelNormEngine>()> kernel_engine;
};

// `jobs` > 1 runs independent stages (distillations, analyses) side by side in child processes (study_tasks.h; the
// CPU only), each stage's output in <out>/logs/; the results are those of one job.
// Input errors (exit 2) for bad settings, missing inputs, an output directory made with another config, or a
// `device: cuda` training section without a factory (or with jobs > 1); internal error when a training run diverges.
StudyResult study_run(const StudyConfig& config, const std::filesystem::path& out, const StudyDevices& devices = {},
                      int jobs = 1);

}  // namespace hlm
