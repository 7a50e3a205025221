#include "models/json_file.h"

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"

namespace hlm {

nlohmann::json json_file_read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), path.string(), ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw_input_error(path.string(), ": not valid JSON: ", e.what());
  }
}

void jsonl_file_for_each(const std::filesystem::path& path,
                         const std::function<void(const nlohmann::json& value, int64_t line)>& row) {
  std::ifstream in(path, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), path.string(), ": cannot open");
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw_input_error(path.string(), ":", n, ": not valid JSON: ", e.what());
    }
    row(value, n);
  }
}

}  // namespace hlm
