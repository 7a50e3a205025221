// Training checkpoints: one directory per checkpoint, written ATOMICALLY (filled under a temporary name in the same
// parent, then renamed), so a crash leaves either the previous checkpoint or the new one, never half of one.
//
//   <out>/checkpoint-<step, 8 digits>/
//     config.json, model.safetensors   the trained model (Model::save: `hybridlm inspect/run/eval` read it)
//     optimizer.safetensors            AdamW state: "exp_avg.<name>", "exp_avg_sq.<name>" (f32, parameter shapes);
//                                      metadata: format, version, step_count, groups (JSON)
//     trainer_state.json               step, tokens seen, schedule position (S, s_w, lr per group), skipped steps,
//                                      non-finite streak, data stream cursor, seeds
//     train_config.json                the resolved TrainConfig (trainer.h)
//     metrics.jsonl                    the run's metrics up to this step (a resumed run continues from this copy)
//     manifest.json                    written last: every other file's size and content digest (file_digest.h);
//                                      checkpoint_verify checks them before a resume, so a truncated or damaged
//                                      checkpoint is an input error naming the file, never a silent restart
//
// Only the newest checkpoint of a run is kept: older checkpoint-* directories are removed after the new one is in
// place. Files are fsync'ed before the rename; a kill at any moment leaves the newest complete checkpoint under its
// name (plus hidden .checkpoint-*.tmp-* leftovers that the next run removes). Nothing here draws random numbers: the data stream is counter-based and its cursor is the whole RNG state.
#pragma once
#include "models/json_file.h"  // json_file_read
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hlm {

class AdamW;
class Model;

inline constexpr const char* kCheckpointPrefix = "checkpoint-";
inline constexpr const char* kCheckpointOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kCheckpointStateFile = "trainer_state.json";
inline constexpr const char* kCheckpointConfigFile = "train_config.json";
inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kCheckpointManifestFile = "manifest.json";

struct TrainerState {
  int64_t step = 0;            // steps taken, skipped ones included (the schedule position s)
  int64_t tokens_seen = 0;     // training tokens consumed
  std::map<std::string, int64_t> tokens_by_language;  // tokens_seen split by the language of each row token
                                                     // (empty in checkpoints written before it existed)
  int64_t total_steps = 0;     // S
  int64_t warmup_steps = 0;    // s_w
  int64_t consecutive_bad = 0; // current non-finite streak (0 in every checkpoint the trainer writes)
  std::vector<int64_t> skipped_steps;
  std::map<std::string, double> lr;  // each AdamW group's lr at `step` (informational)
  nlohmann::json cursor;       // data stream cursor (stream_cursor_to_json)
  uint64_t data_seed = 0;
  uint64_t init_seed = 0;
  double elapsed_seconds = 0.0;  // wall time of the run so far (informational; not part of the trajectory)
};

nlohmann::json trainer_state_to_json(const TrainerState& state);
TrainerState trainer_state_from_json(const nlohmann::json& json, const std::string& source);

// Replaces directory `dir` atomically: `fill` writes into a fresh temporary directory beside it, which is then
// renamed to `dir` (an existing `dir` is swapped with it in one atomic rename, then removed). On any exception the
// temporary directory is removed and `dir` is left as it was; a kill at any moment leaves `dir` old or new, whole.
void directory_write_atomic(const std::filesystem::path& dir,
                            const std::function<void(const std::filesystem::path& tmp)>& fill);

std::string checkpoint_dir_name(int64_t step);  // "checkpoint-00000012"
// The checkpoints of a run directory, oldest first (by step).
std::vector<std::filesystem::path> checkpoint_list(const std::filesystem::path& run_dir);
// A checkpoint directory itself (holds trainer_state.json), or a run directory (its newest checkpoint). Input error
// when neither.
std::filesystem::path checkpoint_find(const std::filesystem::path& path);

// Writes <run_dir>/checkpoint-<state.step> atomically (see above) and removes the run's older checkpoints. `metrics`
// is copied in when it exists. Returns the new directory.
std::filesystem::path checkpoint_save(const std::filesystem::path& run_dir, const Model& model, const AdamW& optimizer,
                                      const TrainerState& state, const nlohmann::json& train_config,
                                      const std::filesystem::path& metrics);

struct CheckpointInfo {
  std::filesystem::path dir;
  TrainerState state;
  nlohmann::json train_config;
};
// Reads trainer_state.json and train_config.json of a checkpoint directory (weights and optimizer: see below).
CheckpointInfo checkpoint_read(const std::filesystem::path& dir);
// Checks every file of the checkpoint against its manifest.json (presence, size, digest): an input error naming the
// first file that differs. A checkpoint without a manifest (written before manifests existed) passes with a warning.
void checkpoint_verify(const std::filesystem::path& dir);
// Loads optimizer.safetensors into `optimizer`: every parameter's moments (names and shapes must match exactly) and
// the step count. Input error naming the file on any mismatch.
void checkpoint_restore_optimizer(const std::filesystem::path& dir, AdamW& optimizer);

// Model::load with every weight copied into private, writable memory (loaded weights are read-only file mappings).
Model model_load_trainable(const std::filesystem::path& dir);

}  // namespace hlm
