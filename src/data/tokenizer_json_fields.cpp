#include "data/tokenizer_json_fields.h"

#include "core/error.h"

namespace hlm {

std::string json_type(const nlohmann::json& j, const std::string& where) {
  HLM_CHECK_INPUT(j.is_object(), where, ": expected an object, got ", j.type_name());
  return json_string(j, "type", where);
}

std::string json_string(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  HLM_CHECK_INPUT(it != j.end(), where, ": missing field \"", key, "\"");
  HLM_CHECK_INPUT(it->is_string(), where, ".", key, ": expected a string, got ", it->type_name());
  return it->get<std::string>();
}

bool json_bool(const nlohmann::json& j, const std::string& key, const std::string& where, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  HLM_CHECK_INPUT(it->is_boolean(), where, ".", key, ": expected true or false, got ", it->dump());
  return it->get<bool>();
}

const nlohmann::json& json_array(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  HLM_CHECK_INPUT(it != j.end(), where, ": missing field \"", key, "\"");
  HLM_CHECK_INPUT(it->is_array(), where, ".", key, ": expected an array, got ", it->type_name());
  return *it;
}

std::string json_optional_string(const nlohmann::json& j, const std::string& key, const std::string& where,
                                 const std::string& fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  HLM_CHECK_INPUT(it->is_string(), where, ".", key, ": expected a string or null, got ", it->type_name());
  return it->get<std::string>();
}

JsonPattern json_pattern(const nlohmann::json& j, const std::string& where) {
  const auto it = j.find("pattern");
  HLM_CHECK_INPUT(it != j.end(), where, ": missing field \"pattern\"");
  HLM_CHECK_INPUT(it->is_object() && it->size() == 1, where,
                  ".pattern: expected {\"String\": ...} or {\"Regex\": ...}, got ", it->dump());
  JsonPattern p;
  if (it->contains("String")) {
    p.text = json_string(*it, "String", where + ".pattern");
  } else if (it->contains("Regex")) {
    p.is_regex = true;
    p.text = json_string(*it, "Regex", where + ".pattern");
  } else {
    throw_input_error(where, ".pattern: expected {\"String\": ...} or {\"Regex\": ...}, got ", it->dump());
  }
  return p;
}

}  // namespace hlm
