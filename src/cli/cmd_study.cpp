// `hybridlm study [--config study.json] [--out DIR] [--jobs N] [--print-default-config]`: the placement study end to end
// (study/study_run.h, docs/study.md). Without --config it runs the compiled-in demo study.
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/number_checks.h"
#include "cli/subcommands.h"
#include "cli/train_device_cli.h"
#include "core/error.h"
#include "study/study_run.h"

#ifdef HLM_WITH_CUDA
#include "analysis/cuda/cuda_states_forward.h"
#include "analysis/cuda/softcka_cuda_engine.h"
#endif

namespace hlm {
namespace {

struct StudyCliOptions {
  std::string config;
  std::string out = "out/study";
  bool print_default = false;
  int jobs = 1;
};

int run_study(const StudyCliOptions& o) {
  if (o.print_default) {
    std::printf("%s\n", study_config_to_json(study_config_defaults()).dump(2).c_str());
    return 0;
  }
  StudyConfig config = study_config_defaults();
  if (!o.config.empty()) {
    std::ifstream in(o.config);
    HLM_CHECK_INPUT(in.good(), o.config, ": cannot read the study config");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw_input_error(o.config, ": not valid JSON (", e.what(), ")");
    }
    config = study_config_from_json(j, o.config);
  }
  study_config_validate(config);  // a bad setting is named before the build's device limits are checked
  StudyDevices devices;
  devices.train = [](const std::string& device, const std::string& precision) {
    return train_device_for(device, precision);
  };
#ifdef HLM_WITH_CUDA
  devices.states_forward = [](const Model& model) { return make_cuda_states_forward(model); };
  devices.kernel_engine = []() -> std::unique_ptr<KernelNormEngine> { return make_cuda_kernel_norm_engine(); };
#else
  HLM_CHECK_INPUT(config.analysis_device == "cpu",
                  "analysis.device cuda: this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
#endif
  const StudyResult r = study_run(config, o.out, devices, o.jobs);
  std::printf("study: %d stages run, %d skipped\nstudy: report at %s\n", r.stages_run, r.stages_skipped,
              r.report.string().c_str());
  return 0;
}

}  // namespace

void add_study_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<StudyCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "study", "The placement study: teacher, five placements distilled alike, R, delta-bar, SoftCKA, HTML report");
  cmd->footer(
      "Stages (each skipped when its done marker is present; an interrupted training run resumes from its newest\n"
      "checkpoint): teacher (pretrain, or teacher.dir), convert + distill per placement, align and locality per\n"
      "model, report (report/report.html, self-contained, plus CSV/JSON). Without --config the compiled-in demo\n"
      "study runs (the demo corpus of `make corpus-demo`); a config file names only the keys it changes\n"
      "(docs/study.md lists them; --print-default-config prints them all with their defaults).\n"
      "Examples:\n"
      "  hybridlm study --out out/demo-study                  # the demo study\n"
      "  hybridlm study --print-default-config > my_study.json\n"
      "  hybridlm study --config my_study.json --out runs/study1\n"
      "  hybridlm study --config configs/study-gpu.json --out runs/gpu   # pretrain/distill.device = cuda\n"
      "  OMP_NUM_THREADS=1 hybridlm study --jobs 2 --out out/demo-study   # what `make demo` runs on 2 cores");
  cmd->add_option("--config", o->config, "Study config JSON (keys over the defaults)");
  cmd->add_option("--out", o->out, "Output directory of the study")->capture_default_str();
  cmd->add_flag("--print-default-config", o->print_default, "Print the compiled-in default config and exit");
  cmd->add_option("--jobs", o->jobs,
                  "Stages run side by side once their inputs exist (distillations, SoftCKA, locality), each in a "
                  "process of its own with its output in <out>/logs/; CPU stages only; the results equal one job's. "
                  "Each process uses OMP_NUM_THREADS threads: set it to cores / jobs")
      ->capture_default_str()
      ->check(positive_number());
  cmd->callback([o, &action] { action = [o] { return run_study(*o); }; });
}

}  // namespace hlm
