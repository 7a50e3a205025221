// Single-file and sharded (HF index) checkpoints; contracts in checkpoint.h.
#include "models/checkpoint.h"
#include "models/json_file.h"

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A shard name from the index must stay inside the model directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

bool is_shard_file_name(const std::string& name) {
  static const std::regex pattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, pattern);
}

std::string shard_file_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

void remove_if_present(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  HLM_CHECK_INPUT(!ec, path.string(), ": cannot remove stale checkpoint file: ", ec.message());
}

// Removes model-*-of-*.safetensors files in `dir` not in `keep` (collected first: no removal while iterating).
void remove_stale_shards(const fs::path& dir, const std::set<std::string>& keep) {
  std::vector<fs::path> stale;
  for (const auto& de : fs::directory_iterator(dir)) {
    const std::string name = de.path().filename().string();
    if (is_shard_file_name(name) && keep.count(name) == 0) stale.push_back(de.path());
  }
  for (const auto& path : stale) remove_if_present(path);
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
  const std::string src = dir.string();
  std::error_code ec;
  HLM_CHECK_INPUT(fs::exists(dir, ec), src, ": no such directory");
  HLM_CHECK_INPUT(fs::is_directory(dir, ec), src, ": not a directory");
  Checkpoint ck;
  ck.dir_ = dir;

  const fs::path index_path = dir / kCheckpointIndexFile;
  if (!fs::exists(index_path, ec)) {
    const fs::path single = dir / kCheckpointSingleFile;
    HLM_CHECK_INPUT(fs::exists(single, ec), src, ": no ", kCheckpointSingleFile, " or ", kCheckpointIndexFile);
    ck.files_.push_back(SafetensorsFile::open(single));
    for (const auto& e : ck.files_[0].entries()) ck.file_of_.emplace(e.name, 0);
    return ck;
  }

  const std::string isrc = index_path.string();
  const json index = json_file_read(index_path);
  HLM_CHECK_INPUT(index.is_object(), isrc, ": not a JSON object");
  HLM_CHECK_INPUT(index.contains("weight_map"), isrc, ": missing 'weight_map'");
  const json& weight_map = index["weight_map"];
  HLM_CHECK_INPUT(weight_map.is_object(), isrc, ": 'weight_map' must be an object, got ", weight_map.type_name());

  std::map<std::string, std::set<std::string>> listed;  // shard file -> tensor names the index puts there
  for (const auto& [name, shard] : weight_map.items()) {
    HLM_CHECK_INPUT(shard.is_string(), isrc, ": weight_map entry '", name, "' must be a file name string, got ",
                    shard.dump());
    const auto file = shard.get<std::string>();
    HLM_CHECK_INPUT(is_plain_file_name(file), isrc, ": weight_map entry '", name, "' names '", file,
                    "', which is not a plain file name");
    listed[file].insert(name);
  }

  for (const auto& [file, names] : listed) {
    const fs::path shard_path = dir / file;
    HLM_CHECK_INPUT(fs::is_regular_file(shard_path, ec), isrc, ": shard '", file, "' (holding tensor '", *names.begin(),
                    "') is missing");
    ck.files_.push_back(SafetensorsFile::open(shard_path));
    const size_t fi = ck.files_.size() - 1;
    const SafetensorsFile& sf = ck.files_.back();
    for (const auto& name : names) {
      HLM_CHECK_INPUT(sf.find(name) != nullptr, isrc, ": tensor '", name, "' is listed in shard '", file,
                      "' but absent from it");
      ck.file_of_.emplace(name, fi);
    }
    // A tensor the index does not place here would be silently unreachable (or shadowed by another shard).
    for (const auto& e : sf.entries())
      HLM_CHECK_INPUT(names.count(e.name) != 0, isrc, ": shard '", file, "' holds tensor '", e.name,
                      "', which the index does not map to it");
  }
  return ck;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(file_of_.size());
  for (const auto& [name, _] : file_of_) out.push_back(name);  // std::map iterates sorted
  return out;
}

const SafetensorsEntry* Checkpoint::find(std::string_view name) const {
  const auto it = file_of_.find(name);
  return it == file_of_.end() ? nullptr : files_[it->second].find(name);
}

const SafetensorsFile& Checkpoint::file_or_throw(std::string_view name) const {
  const auto it = file_of_.find(name);
  HLM_CHECK_INPUT(it != file_of_.end(), dir_.string(), ": checkpoint has no tensor '", name, "'");
  return files_[it->second];
}

Tensor Checkpoint::tensor(std::string_view name) const { return file_or_throw(name).tensor(name); }
Tensor Checkpoint::tensor_f32(std::string_view name) const { return file_or_throw(name).tensor_f32(name); }
fs::path Checkpoint::file_of(std::string_view name) const { return file_or_throw(name).path(); }

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, fi] : file_of_) total += files_[fi].find(name)->nbytes();
  return total;
}

void checkpoint_write(const fs::path& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes) {
  const std::string src = dir.string();
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors)
    HLM_CHECK_INPUT(seen.insert(name).second, src, ": duplicate tensor name '", name, "'");
  std::error_code ec;
  fs::create_directories(dir, ec);
  HLM_CHECK_INPUT(!ec && fs::is_directory(dir), src, ": cannot create directory: ", ec.message());

  if (max_shard_bytes == 0) {
    safetensors_write(dir / kCheckpointSingleFile, tensors, metadata);
    remove_if_present(dir / kCheckpointIndexFile);  // it would take precedence over the file just written
    remove_stale_shards(dir, {});
    return;
  }

  // Greedy packing in the given order: a shard closes when the next tensor would push it past the limit.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  uint64_t shard_bytes = 0, total_size = 0;
  for (const auto& item : tensors) {
    const uint64_t nbytes = item.second.nbytes();
    if (!shards.back().empty() && shard_bytes + nbytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(item);
    shard_bytes += nbytes;
    total_size += nbytes;
  }

  json weight_map = json::object();
  std::set<std::string> written;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shard_file_name(i, shards.size());
    safetensors_write(dir / file, shards[i], metadata);
    written.insert(file);
    for (const auto& [name, _] : shards[i]) weight_map[name] = file;
  }
  const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  file_write_atomic(dir / kCheckpointIndexFile, index.dump(2) + "\n");

  remove_if_present(dir / kCheckpointSingleFile);
  remove_stale_shards(dir, written);
}

}  // namespace hlm
