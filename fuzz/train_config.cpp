// Fuzz target: a train_config.json (as a checkpoint holds it, or the pretrain/distill config file): the first input
// byte picks the job (pretrain, distill), the rest is the JSON, through train_config_from_json over the job's
// defaults, train_config_validate, the derived plan and the printed description, and the JSON round trip.
#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "core/error.h"
#include "train/trainer.h"

HLM_FUZZ_TARGET(train_config) {
  if (input.empty()) return;
  const hlm::TrainJob job = (static_cast<unsigned char>(input[0]) & 1) ? hlm::TrainJob::Distill : hlm::TrainJob::Pretrain;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(input.substr(1));
  } catch (const nlohmann::json::exception& e) {
    hlm::throw_input_error("train_config.json: invalid JSON (", e.what(), ")");
  }
  // The fuzzer rarely spells the two marker keys; fill them in when absent so it reaches the settings.
  if (j.is_object() && !j.contains("format")) j["format"] = "hybridlm-train-config";
  if (j.is_object() && !j.contains("job")) j["job"] = hlm::train_job_name(job);
  const hlm::TrainConfig c = hlm::train_config_from_json(j, "train_config.json");
  const nlohmann::json written = hlm::train_config_to_json(c);
  if (hlm::train_config_to_json(hlm::train_config_from_json(written, "round trip")) != written)
    hlm::throw_internal_error("train config round trip differs");
  hlm::train_config_validate(c);
  const hlm::TrainPlan plan = hlm::train_plan(c);
  hlm::fuzz::keep(static_cast<uint64_t>(hlm::train_config_describe(c).size() + static_cast<size_t>(plan.total_steps)));
}
