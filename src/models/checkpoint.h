// A model directory's weights, single-file or sharded HF style, behind one name -> tensor lookup.
// Layouts: `model.safetensors.index.json` ({"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}) wins
// when present; else `model.safetensors`. Each shard is opened (and fully validated) once.
// Contract: the index and the shards must agree exactly: a listed tensor absent from its shard, or a shard holding a
// tensor the index does not list (or lists under another shard), is an input error naming the index. Shard names must
// be plain file names inside the directory. `metadata.total_size` is not checked (HF writers disagree on its meaning).
// Tensors are zero-copy views (see SafetensorsFile) and outlive the Checkpoint.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/safetensors.h"

namespace hlm {

inline constexpr std::string_view kCheckpointSingleFile = "model.safetensors";
inline constexpr std::string_view kCheckpointIndexFile = "model.safetensors.index.json";

class Checkpoint {
 public:
  // Opens the weights of `dir`; input errors name the directory, index or shard at fault.
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  std::vector<std::string> names() const;  // sorted
  const SafetensorsEntry* find(std::string_view name) const;  // nullptr if absent
  // Both throw an input error naming the directory and tensor when absent; see SafetensorsFile for dtype rules.
  Tensor tensor(std::string_view name) const;
  Tensor tensor_f32(std::string_view name) const;
  std::filesystem::path file_of(std::string_view name) const;  // the shard holding `name`; throws if absent
  uint64_t total_bytes() const;                                // sum of tensor data bytes over all shards

 private:
  const SafetensorsFile& file_or_throw(std::string_view name) const;

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> file_of_;  // tensor name -> index into files_
};

// Writes `tensors` into `dir` (created if missing). max_shard_bytes == 0: one `model.safetensors`. Otherwise tensors
// are packed greedily, in order, into `model-0000i-of-0000N.safetensors` of at most max_shard_bytes of data each (a
// larger tensor gets a shard of its own), plus the index json; this holds even when N == 1. `metadata` goes into each
// safetensors header. Every file is written atomically; files of the other layout (or stale shards) left in `dir` are
// removed afterwards, so Checkpoint::open reads back exactly what was written.
void checkpoint_write(const std::filesystem::path& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {}, uint64_t max_shard_bytes = 0);

}  // namespace hlm
