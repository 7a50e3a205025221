#include "models/json_file.h"

#include <fstream>
#include <sstream>

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

}  // namespace hlm
