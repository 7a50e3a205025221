// Typed reads of tokenizer.json fields with input errors that name the field path, e.g.
//   "tokenizer.json: pre_tokenizer.pretokenizers[0].behavior: expected a string".
// `where` is the path of the object `j`; `key` the field read from it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace hlm {

std::string json_type(const nlohmann::json& j, const std::string& where);  // the "type" string of a component
std::string json_string(const nlohmann::json& j, const std::string& key, const std::string& where);
bool json_bool(const nlohmann::json& j, const std::string& key, const std::string& where, bool fallback);
// The field as an array (an input error when missing or not an array).
const nlohmann::json& json_array(const nlohmann::json& j, const std::string& key, const std::string& where);
// An optional string field: fallback when missing or null.
std::string json_optional_string(const nlohmann::json& j, const std::string& key, const std::string& where,
                                 const std::string& fallback);

// The "pattern" field of Split/Replace: {"String": "..."} (a literal) or {"Regex": "..."}.
struct JsonPattern {
  bool is_regex = false;
  std::string text;
};
JsonPattern json_pattern(const nlohmann::json& j, const std::string& where);

}  // namespace hlm
