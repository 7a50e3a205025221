// Reads a whole JSON file. Input errors name the file: "<path>: cannot open", "<path>: not valid JSON: ...".
#pragma once
#include <filesystem>

#include <nlohmann/json.hpp>

namespace hlm {

nlohmann::json json_file_read(const std::filesystem::path& path);

}  // namespace hlm
