// The resumable synthetic sweep (contracts in synth_run.h).
#include "evals/synth/synth_run.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "evals/synth/synth_report.h"
#include "models/json_file.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

// The resolved config without the fields that only choose which pairs run (unordered: key order is not content).
nlohmann::json comparable(nlohmann::json j) {
  j.erase("tasks");
  j.erase("architectures");
  j.erase("log_every");
  return j;
}

}  // namespace

std::vector<SynthPairResult> synth_run(const SynthConfig& config, const SynthRunOptions& options, const SynthLog& log) {
  fs::create_directories(options.out);
  const nlohmann::ordered_json resolved = synth_config_to_json(config);
  const fs::path config_path = options.out / "config.json";
  if (fs::exists(config_path)) {
    HLM_CHECK_INPUT(comparable(json_file_read(config_path)) == comparable(nlohmann::json(resolved)), config_path.string(),
                    ": holds results of a different config (only tasks, architectures and log_every may change "
                    "between resumed runs); use another --out");
  }
  file_write_atomic(config_path, resolved.dump(2) + "\n");

  std::vector<std::pair<SynthTask, SynthArch>> pairs;
  for (const std::string& t : config.tasks)
    for (const std::string& a : config.architectures) pairs.emplace_back(synth_task_from_name(t), synth_arch_from_name(a));

  std::vector<SynthPairResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t trained = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [task, arch] = pairs[i];
    const fs::path pair_dir = options.out / synth_task_name(task) / synth_arch_spec(arch).name;
    const fs::path marker = pair_dir / "result.json";
    char head[200];
    if (fs::exists(marker)) {
      results.push_back(synth_pair_result_from_json(json_file_read(marker), marker.string()));
      std::snprintf(head, sizeof head, "[%zu/%zu] %s/%s: done (skipped; %s)", i + 1, pairs.size(),
                    synth_task_name(task), synth_arch_spec(arch).name, marker.string().c_str());
      log(head);
      continue;
    }
    fs::create_directories(pair_dir);
    file_write_atomic(pair_dir / "model_config.json",
                      synth_model_config_json(config, arch, task).dump(2) + "\n");
    std::snprintf(head, sizeof head, "[%zu/%zu] %s/%s: training %lld steps x %lld items on %s", i + 1,
                  pairs.size(), synth_task_name(task), synth_arch_spec(arch).name,
                  static_cast<long long>(config.steps), static_cast<long long>(config.batch_size),
                  options.device.name.c_str());
    log(head);
    SynthPairResult r = synth_train_and_eval(config, task, arch, log, options.device);
    file_write_atomic(marker, synth_pair_result_to_json(r).dump(2) + "\n");
    results.push_back(std::move(r));
    ++trained;
    synth_write_reports(options.out, config, results);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t left = pairs.size() - i - 1;
    std::snprintf(head, sizeof head, "[%zu/%zu] finished in %.1fs; sweep ETA %.0fs (%zu pairs left)", i + 1,
                  pairs.size(), results.back().train_seconds + results.back().eval_seconds,
                  elapsed / static_cast<double>(trained) * static_cast<double>(left), left);
    log(head);
  }
  synth_write_reports(options.out, config, results);
  return results;
}

}  // namespace hlm
