// Stage done markers (study_stage.h).
#include "study/study_stage.h"

#include <chrono>
#include <ctime>
#include <fstream>

#include "models/safetensors.h"
#include "train/fault_inject.h"

namespace hlm {

std::optional<std::string> stage_done_stamp(const std::filesystem::path& dir, const nlohmann::json& inputs) {
  std::ifstream in(dir / kStageMarker);
  if (!in.good()) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("inputs") != inputs) return std::nullopt;
    return j.at("stamp").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a damaged marker counts as missing: the stage runs again
  }
}

std::string stage_mark_done(const std::filesystem::path& dir, const std::string& stage, const nlohmann::json& inputs) {
  static int64_t last = 0;
  const auto now = std::chrono::system_clock::now();
  int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  if (ns <= last) ns = last + 1;  // unique even within one clock tick
  last = ns;
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  char finished[32];
  std::strftime(finished, sizeof finished, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  const std::string stamp = std::to_string(ns);
  const nlohmann::json j = {{"stage", stage}, {"inputs", inputs}, {"stamp", stamp}, {"finished", finished}};
  file_write_atomic(dir / kStageMarker, j.dump(2) + "\n");
  fault_point("study.stage");
  return stamp;
}

}  // namespace hlm
