// `hybridlm niah experiment --config cfg.json --out DIR [--device cpu|cuda] [--seed N]`: the trained retrieval
// experiment of issue #21 item 4 (evals/niah/niah_experiment.h, docs/niah.md): NIAH-format training examples from
// training text, full-attention / hybrid / pure-GDN models trained with the pretrain trainer, evaluated with the
// `hybridlm niah` harness over languages × tasks × lengths; CSV, Markdown and SVG reports. Resumable.
#include <cstdint>
#include <cstdio>
#include <memory>

#include "cli/device_option.h"
#include "cli/number_checks.h"
#include "cli/subcommands.h"
#include "cli/train_device_cli.h"
#include "core/error.h"
#include "evals/niah/niah_experiment.h"
#include "models/json_file.h"
#include "models/model.h"
#include "models/safetensors.h"
#ifdef HLM_WITH_CUDA
#include "evals/niah/cuda/niah_cuda_backend.h"
#endif

namespace hlm {

CLI::App* add_niah_experiment_subcommand(CLI::App* niah, std::function<int()>& action);  // called by cmd_niah.cpp

namespace {

namespace fs = std::filesystem;

struct NiahExperimentCliOptions {
  std::string config, out, device;
  std::vector<std::string> architectures;
  int64_t seed = -1;  // -1: the config's train.init_seed and train.data_seed
  bool print_default = false, report_only = false;
};

NiahExperimentDevice experiment_device(const std::string& device) {
  NiahExperimentDevice d;
  if (device == "cpu") return d;
#ifdef HLM_WITH_CUDA
  d.make_trainer = [](const TrainConfig& c) { return train_device_for(c); };
  // The backend of `hybridlm niah --device cuda`: the weights uploaded once per model (bf16: held once, in bf16, and
  // a bf16 KV cache); each cell's engine holds its state in device memory; the default state budget is 90 % of the
  // device memory left free after the upload.
  d.make_eval = [](Model& model, const std::string& precision) { return niah_cuda_eval_backend(model, precision); };
#endif
  return d;
}

int run_experiment(const NiahExperimentCliOptions& o) {
  if (o.print_default) {
    std::printf("%s\n", niah_experiment_config_to_json(niah_experiment_defaults()).dump(2).c_str());
    return 0;
  }
  HLM_CHECK_INPUT(!o.out.empty(), "niah experiment: --out is required");
  NiahExperimentConfig config = o.config.empty()
                                    ? niah_experiment_defaults()
                                    : niah_experiment_config_from_json(json_file_read(o.config), o.config);
  if (!o.device.empty()) config.device = o.device;
  if (o.seed >= 0) config.train.init_seed = config.train.data_seed = static_cast<uint64_t>(o.seed);
  if (!o.report_only) check_device_option(config.device);  // before anything is loaded or written
  fs::create_directories(o.out);
  if (!o.config.empty()) file_write_atomic(fs::path(o.out) / "config_given.json", json_file_read(o.config).dump(2) + "\n");
  NiahExperimentRunOptions run;
  run.architectures = o.architectures;
  run.report_only = o.report_only;
  const NiahExperimentResult r = niah_experiment_run(
      config, o.out, experiment_device(config.device),
      [](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
      },
      run);
  std::printf("niah experiment: %zu architectures in the reports; wrote %s/report.md, accuracy.csv, deficit.csv, cost.csv, "
              "training.csv, niah.{csv,md} and SVG charts (resolved config: config.json)\n",
              r.archs.size(), o.out.c_str());
  return 0;
}

}  // namespace

CLI::App* add_niah_experiment_subcommand(CLI::App* niah, std::function<int()>& action) {
  auto o = std::make_shared<NiahExperimentCliOptions>();
  CLI::App* cmd = niah->add_subcommand(
      "experiment", "Train full-attention, hybrid and pure-GDN models on NIAH-format examples and evaluate them");
  cmd->footer(
      "Issue #21 item 4 (docs/niah.md, \"Trained retrieval experiment\"). Stages, each resumable:\n"
      "  data      <out>/data: a corpus of NIAH-format examples (prompt + \"<Answer> ... </Answer>\" + filler to exactly\n"
      "            train.seq_len tokens) from the TRAINING documents of each language; evaluation haystacks come from\n"
      "            the held-out documents [0, 2 x held_out_docs) only\n"
      "  train     <out>/runs/<arch>: `hybridlm pretrain` per architecture (progress with tok/s and ETA; resumes from\n"
      "            the newest checkpoint)\n"
      "  evaluate  <out>/eval/<arch>: the `hybridlm niah` harness over languages x tasks x lengths (greedy, stop at\n"
      "            </Answer>), CSV after every cell\n"
      "  report    report.md (Table 2 layout, deficit vs full attention by language and length, time and memory),\n"
      "            accuracy.csv, deficit.csv, cost.csv, training.csv, niah.csv, niah.md, accuracy_<lang>.svg,\n"
      "            deficit.svg, time.svg, memory.svg over every architecture with results so far (a partial\n"
      "            evaluation is marked); config.json is the resolved config\n"
      "Parallel: one process per architecture on the same --out (the data stage runs once, under a lock), then\n"
      "--report-only for the reports over all of them (docs/niah.md).\n"
      "Seeds: --seed N sets train.init_seed and train.data_seed (the weights and the training documents' order; the\n"
      "examples stay the config's), so one config serves several runs per architecture: one --out per seed (an --out\n"
      "holding another seed is refused). The onset of retrieval at small scale depends on the seed (docs/results.md).\n"
      "Config (JSON over the defaults of --print-default-config):\n" +
      niah_experiment_fields_text() +
      "Examples:\n"
      "  hybridlm niah experiment --print-default-config\n"
      "  hybridlm niah experiment --config configs/niah/experiment-cpu.json --out runs/niah-cpu\n"
      "  hybridlm niah experiment --config configs/niah/experiment-gpu.json --out runs/niah-gpu --device cuda\n"
      "  for a in full_attention standard_periodic reverse_periodic gdn; do\n"
      "    hybridlm niah experiment --config configs/niah/experiment-gpu.json --out runs/niah-gpu --device cuda \\\n"
      "      --architectures $a > runs/niah-$a.log 2>&1 &\n"
      "  done; wait\n"
      "  hybridlm niah experiment --config configs/niah/experiment-gpu.json --out runs/niah-gpu --report-only\n"
      "  for s in 1 2 3; do hybridlm niah experiment --config configs/niah/experiment-gpu.json --out runs/niah-s$s \\\n"
      "    --device cuda --seed $s > runs/niah-s$s.log 2>&1 & done; wait");
  cmd->add_option("--config", o->config, "Experiment config (JSON); default: the compiled-in tiny CPU config");
  cmd->add_option("--out", o->out, "Output folder (created; reused to resume)");
  cmd->add_option("--device", o->device, "cpu or cuda: replaces the config's device (training and evaluation)");
  cmd->add_option("--architectures", o->architectures,
                  "Train and evaluate only these of the config's architectures (comma-separated; default all), e.g. "
                  "one per process on the same --out")
      ->delimiter(',');
  cmd->add_option("--seed", o->seed,
                  "Replaces train.init_seed and train.data_seed (weights, training-document order); one --out per seed")
      ->check(non_negative_number());
  cmd->add_flag("--report-only", o->report_only,
                "Run no stage: rewrite the reports over every architecture with results in --out");
  cmd->add_flag("--print-default-config", o->print_default, "Print the default config (resolved form) and exit");
  cmd->callback([o, &action] { action = [o] { return run_experiment(*o); }; });
  return cmd;
}

}  // namespace hlm
