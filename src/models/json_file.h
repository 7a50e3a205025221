// Reads a whole JSON file, or a JSON Lines file one value at a time. Input errors name the file (and the line):
// "<path>: cannot open", "<path>: not valid JSON: ...", "<path>:<line>: not valid JSON: ...".
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

namespace hlm {

nlohmann::json json_file_read(const std::filesystem::path& path);

// Calls row(value, line) for every non-blank line of a JSON Lines file, in order (line numbers from 1).
void jsonl_file_for_each(const std::filesystem::path& path,
                         const std::function<void(const nlohmann::json& value, int64_t line)>& row);

}  // namespace hlm
