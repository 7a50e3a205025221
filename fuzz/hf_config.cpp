// Fuzz target: config.json (the input) through load_model_config for every architecture the file may name, then what
// a loader does next with the typed config: the tensors it expects (names and shapes), the inference state sizes, and
// the serialisation round trip (written config parses back to the same JSON).
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "core/error.h"
#include "models/hf_config.h"
#include "models/state_size.h"
#include "models/tensor_table.h"

HLM_FUZZ_TARGET(hf_config) {
  const hlm::ModelConfig c = hlm::load_model_config(hlm::fuzz::write_scratch("config.json", input));
  int64_t total = 0;
  for (const hlm::TensorSpec& spec : hlm::expected_tensors(c)) total += spec.shape.rank() + spec.name.size() > 0;
  const hlm::StateSizes s = hlm::state_sizes(c, 4096, 2);
  total += s.model_elements_at_context > 0;
  const nlohmann::json written = hlm::model_config_to_json(c);
  const hlm::ModelConfig again = hlm::parse_model_config(written, "round trip of config.json");
  if (hlm::model_config_to_json(again) != written)
    hlm::throw_internal_error("config.json round trip differs: ", written.dump(), " vs ",
                              hlm::model_config_to_json(again).dump());
  hlm::fuzz::keep(static_cast<uint64_t>(total));
}
