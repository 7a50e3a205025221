// Done markers of the study's stages. A stage writes its outputs into its own directory, then `done.json` there
// (atomically, last): {"stage", "inputs", "stamp", "finished"}. `inputs` holds the stamps of the stages it read
// (teacher → student → run → analysis), so a stage that reran makes everything downstream of it rerun, and a stage
// whose marker is missing or whose inputs changed runs again from scratch (or resumes, for training runs).
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace hlm {

inline constexpr const char* kStageMarker = "done.json";

// The stage's stamp when `dir` holds a marker whose inputs equal `inputs`; nullopt otherwise.
std::optional<std::string> stage_done_stamp(const std::filesystem::path& dir, const nlohmann::json& inputs);

// Writes the marker (atomically) and returns its new stamp (finish time in ns since the epoch, unique per call).
std::string stage_mark_done(const std::filesystem::path& dir, const std::string& stage, const nlohmann::json& inputs);

}  // namespace hlm
