#include "infer/eos.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/json_file.h"

namespace hlm {

std::vector<int32_t> eos_token_ids(const ModelConfig& config, const std::filesystem::path& model_dir) {
  std::vector<int32_t> ids;
  for (const int64_t id : config.eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  const std::filesystem::path path = model_dir / "generation_config.json";
  if (!model_dir.empty() && std::filesystem::exists(path)) {
    const nlohmann::json json = json_file_read(path);
    HLM_CHECK_INPUT(json.is_object(), path.string(), ": expected a JSON object");
    if (json.contains("eos_token_id") && !json["eos_token_id"].is_null()) {
      const nlohmann::json& eos = json["eos_token_id"];
      const auto add = [&](const nlohmann::json& v) {
        HLM_CHECK_INPUT(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
                        path.string(), ": eos_token_id must be a non-negative integer or a list of them, got ",
                        v.dump());
        ids.push_back(v.get<int32_t>());
      };
      if (eos.is_array()) {
        for (const auto& v : eos) add(v);
      } else {
        add(eos);
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace hlm
