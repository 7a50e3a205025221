// Fuzz target: a `hybridlm study --config` file: JSON parsed as cmd_study does, study_config_from_json over the
// defaults, the resolved config written back and read again (same result), and the placements resolved against the
// teacher's layer count (from the config's teacher model when it gives one, else 12).
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "core/error.h"
#include "study/study_config.h"

HLM_FUZZ_TARGET(study_config) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {
    hlm::throw_input_error("study.json: invalid JSON (", e.what(), ")");  // what cmd_study reports
  }
  const hlm::StudyConfig c = hlm::study_config_from_json(j, "study.json");
  const nlohmann::json written = hlm::study_config_to_json(c);
  const nlohmann::json again = hlm::study_config_to_json(hlm::study_config_from_json(written, "round trip"));
  if (again != written) hlm::throw_internal_error("study config round trip differs");
  int layers = 12;
  if (c.teacher_dir.empty() && c.teacher_model.is_object()) layers = hlm::study_teacher_layers(c);
  const std::vector<hlm::StudyStudent> students = hlm::study_resolve_students(c, layers);
  for (const hlm::StudyStudent& s : students)
    for (int layer : s.full_layers)
      if (layer < 0 || layer >= layers) hlm::throw_internal_error("placement layer ", layer, " outside ", layers);
}
