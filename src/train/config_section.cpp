#include "train/config_section.h"

namespace hlm {

using json = nlohmann::json;

void check_config_keys(const json& j, const std::set<std::string>& known, const std::string& where) {
  HLM_CHECK_INPUT(j.is_object(), where, ": must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (known.count(key)) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw_input_error(where, ": unknown key '", key, "' (known: ", list, ")");
  }
}

TrainConfig train_config_section(const TrainConfig& base, const json& section, const std::set<std::string>& owned,
                                 const std::string& owner, const std::string& where) {
  HLM_CHECK_INPUT(section.is_object(), where, ": must be an object of trainer settings");
  json merged = train_config_to_json(base);
  for (const auto& [key, value] : section.items()) {
    if (key == "lr" && base.job == TrainJob::Pretrain) {  // pretrain's one peak rate (the CLI's --lr)
      merged["lr_rec"] = merged["lr_rest"] = value;
      continue;
    }
    HLM_CHECK_INPUT(!owned.count(key), where, ".", key, ": set by ", owner, ", not allowed here");
    HLM_CHECK_INPUT(merged.contains(key) && key != "format" && key != "version" && key != "job", where,
                    ": unknown setting '", key, "'");
    merged[key] = value;
  }
  return train_config_from_json(merged, where);
}

json train_config_section_to_json(const TrainConfig& c, const std::set<std::string>& owned) {
  json j = train_config_to_json(c);
  for (const char* key : {"format", "version", "job"}) j.erase(key);
  for (const std::string& key : owned) j.erase(key);
  return j;
}

}  // namespace hlm
