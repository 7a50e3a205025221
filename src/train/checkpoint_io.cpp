// Training checkpoints: atomic directories, optimizer state as safetensors, trainer state as JSON (checkpoint_io.h).
#include "train/checkpoint_io.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "models/model.h"
#include "models/safetensors.h"
#include "models/tensor_table.h"
#include "train/adamw.h"
#include "train/fault_inject.h"
#include "train/file_digest.h"

namespace hlm {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kOptimizerFormat = "hybridlm-adamw";
constexpr const char* kStateFormat = "hybridlm-trainer-state";
constexpr int kVersion = 1;
constexpr const char* kManifestFormat = "hybridlm-checkpoint-manifest";

// fsync of a file or directory; best effort for directories (some file systems refuse it).
void sync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return;
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  HLM_CHECK_INPUT(rc == 0 || directory, path.string(), ": fsync failed: ", std::strerror(e));
}

// Every regular file of `dir` (not the manifest itself): name -> {bytes, digest}.
json manifest_of(const fs::path& dir) {
  json files = json::object();
  std::vector<fs::path> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename() != kCheckpointManifestFile) names.push_back(entry.path());
  std::sort(names.begin(), names.end());
  for (const fs::path& path : names) {
    const FileDigest d = file_digest(path);
    files[path.filename().string()] = {{"bytes", d.bytes}, {"digest", d.hex}};
  }
  return {{"format", kManifestFormat}, {"version", kVersion}, {"digest", "hybridlm file_digest (4x64-bit lanes)"},
          {"files", files}};
}

// Removes a path on scope exit unless released.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(fs::path path) : path_(std::move(path)) {}
  ~RemoveOnExit() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

// The step of a "checkpoint-<digits>" name, or -1.
int64_t checkpoint_step_of(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string prefix = kCheckpointPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return std::stoll(digits);
}

template <typename T>
T field(const json& j, const char* key, const std::string& source) {
  HLM_CHECK_INPUT(j.contains(key), source, ": missing '", key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw_input_error(source, ": '", key, "' has the wrong type");
  }
}

}  // namespace

json trainer_state_to_json(const TrainerState& s) {
  return {{"format", kStateFormat},
          {"version", kVersion},
          {"step", s.step},
          {"tokens_seen", s.tokens_seen},
          {"tokens_by_language", s.tokens_by_language},
          {"total_steps", s.total_steps},
          {"warmup_steps", s.warmup_steps},
          {"consecutive_bad", s.consecutive_bad},
          {"skipped_steps", s.skipped_steps},
          {"lr", s.lr},
          {"cursor", s.cursor},
          {"seeds", {{"data_seed", s.data_seed}, {"init_seed", s.init_seed}}},
          {"rng", "counter-based (Philox): the data cursor and the seeds are the whole random state"},
          {"elapsed_seconds", s.elapsed_seconds}};
}

TrainerState trainer_state_from_json(const json& j, const std::string& source) {
  HLM_CHECK_INPUT(j.is_object() && j.value("format", "") == kStateFormat, source, ": not a hybridlm trainer state");
  HLM_CHECK_INPUT(j.value("version", 0) == kVersion, source, ": unsupported trainer state version");
  TrainerState s;
  s.step = field<int64_t>(j, "step", source);
  s.tokens_seen = field<int64_t>(j, "tokens_seen", source);
  if (j.contains("tokens_by_language"))  // absent in checkpoints written before it existed
    s.tokens_by_language = field<std::map<std::string, int64_t>>(j, "tokens_by_language", source);
  s.total_steps = field<int64_t>(j, "total_steps", source);
  s.warmup_steps = field<int64_t>(j, "warmup_steps", source);
  s.consecutive_bad = field<int64_t>(j, "consecutive_bad", source);
  s.skipped_steps = field<std::vector<int64_t>>(j, "skipped_steps", source);
  s.lr = field<std::map<std::string, double>>(j, "lr", source);
  HLM_CHECK_INPUT(j.contains("cursor"), source, ": missing 'cursor'");
  s.cursor = j["cursor"];
  const json seeds = field<json>(j, "seeds", source);
  s.data_seed = field<uint64_t>(seeds, "data_seed", source);
  s.init_seed = field<uint64_t>(seeds, "init_seed", source);
  s.elapsed_seconds = j.value("elapsed_seconds", 0.0);
  HLM_CHECK_INPUT(s.step >= 0 && s.step <= s.total_steps && s.tokens_seen >= 0, source, ": inconsistent step ",
                  s.step, " of ", s.total_steps);
  return s;
}

void directory_write_atomic(const fs::path& dir, const std::function<void(const fs::path&)>& fill) {
  static std::atomic<int> counter{0};
  const fs::path target = fs::absolute(dir).lexically_normal();
  const fs::path parent = target.parent_path();
  const std::string tag = std::to_string(getpid()) + "-" + std::to_string(counter++);
  std::error_code ec;
  fs::create_directories(parent, ec);
  HLM_CHECK_INPUT(!ec, parent.string(), ": cannot create directory: ", ec.message());
  const fs::path tmp = parent / ("." + target.filename().string() + ".tmp-" + tag);
  fs::remove_all(tmp);
  RemoveOnExit tmp_guard(tmp);
  fs::create_directories(tmp);
  fill(tmp);
  for (const auto& entry : fs::directory_iterator(tmp))
    if (entry.is_regular_file()) sync_path(entry.path(), false);
  sync_path(tmp, true);
  const bool existed = fs::exists(target);
  // One atomic swap: at every moment `target` names a whole directory (old, then new); tmp then holds the old one,
  // which tmp_guard removes. File systems without RENAME_EXCHANGE (EINVAL) take the two-rename path below.
  if (existed && ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    sync_path(parent, true);
    return;
  }
  HLM_CHECK_INPUT(!existed || errno == EINVAL || errno == ENOSYS, target.string(),
                  ": cannot swap the new directory into place: ", std::strerror(errno));
  if (existed) {
    const fs::path old = parent / ("." + target.filename().string() + ".old-" + tag);
    RemoveOnExit old_guard(old);
    fs::rename(target, old, ec);
    HLM_CHECK_INPUT(!ec, target.string(), ": cannot move the existing directory aside: ", ec.message());
    fs::rename(tmp, target, ec);
    if (ec) {
      fs::rename(old, target);
      throw_input_error(target.string(), ": cannot move the new directory into place: ", ec.message());
    }
    tmp_guard.release();
  } else {
    fs::rename(tmp, target, ec);
    HLM_CHECK_INPUT(!ec, target.string(), ": cannot move the new directory into place: ", ec.message());
    tmp_guard.release();
  }
  sync_path(parent, true);
}

std::string checkpoint_dir_name(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%08lld", kCheckpointPrefix, static_cast<long long>(step));
  return name;
}

std::vector<fs::path> checkpoint_list(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const int64_t step = checkpoint_step_of(entry.path());
    if (step >= 0 && entry.is_directory()) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(path);
  return out;
}

fs::path checkpoint_find(const fs::path& path) {
  HLM_CHECK_INPUT(fs::is_directory(path), path.string(), ": not a directory");
  if (fs::exists(path / kCheckpointStateFile)) return path;
  const std::vector<fs::path> all = checkpoint_list(path);
  HLM_CHECK_INPUT(!all.empty(), path.string(), ": neither a checkpoint (no ", kCheckpointStateFile,
                  ") nor a run directory with a ", kCheckpointPrefix, "* checkpoint",
                  fs::exists(path / "config.json")
                      ? " (the run stopped before its first checkpoint: start it again into a new or emptied --out)"
                      : "");
  return all.back();
}

namespace {

// 8-bit codes in safetensors (which this project writes with F32/BF16/I32/I64 only): four codes per I32 element,
// little-endian (code 4k in the low byte of element k), the last element zero-padded.
Tensor pack_codes(const std::vector<uint8_t>& codes) {
  Tensor t = Tensor::zeros({std::max<int64_t>(1, static_cast<int64_t>((codes.size() + 3) / 4))}, DType::I32);
  std::memcpy(t.raw(), codes.data(), codes.size());  // x86-64 and the GPU hosts are little-endian
  return t;
}

std::vector<uint8_t> unpack_codes(const Tensor& t, int64_t n) {
  HLM_CHECK_INPUT(t.dtype() == DType::I32 && t.numel() == std::max<int64_t>(1, (n + 3) / 4),
                  "8-bit codes of the wrong size or type (", t.numel(), " I32 for ", n, " elements)");
  const Tensor c = t.contiguous();
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  std::memcpy(codes.data(), c.raw(), codes.size());
  return codes;
}

Tensor f32_vector_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(v.size())});
  std::memcpy(t.f32(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> f32_vector(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.f32(), c.f32() + c.numel());
}

}  // namespace

fs::path checkpoint_save(const fs::path& run_dir, const Model& model, const AdamW& optimizer,
                         const TrainerState& state, const json& train_config, const fs::path& metrics) {
  const fs::path dir = run_dir / checkpoint_dir_name(state.step);
  directory_write_atomic(dir, [&](const fs::path& tmp) {
    model.save(tmp);
    fault_point("checkpoint.model");
    std::vector<std::pair<std::string, Tensor>> tensors;
    const bool q8 = optimizer.config().state == AdamWStateFormat::Q8;
    for (size_t i = 0; i < optimizer.params().size(); ++i) {
      const std::string& name = optimizer.params()[i].name;
      if (q8) {  // the codes and block scales themselves: a resume continues bit for bit
        const AdamWQ8State& q = optimizer.q8_state(i);
        tensors.emplace_back("exp_avg.q8." + name, pack_codes(q.q_m));
        tensors.emplace_back("exp_avg.absmax." + name, f32_vector_tensor(q.absmax_m));
        tensors.emplace_back("exp_avg_sq.q8." + name, pack_codes(q.q_v));
        tensors.emplace_back("exp_avg_sq.absmax." + name, f32_vector_tensor(q.absmax_v));
      } else {
        tensors.emplace_back("exp_avg." + name, optimizer.exp_avg(i));
        tensors.emplace_back("exp_avg_sq." + name, optimizer.exp_avg_sq(i));
      }
    }
    json groups = json::array();
    for (const AdamWGroup& g : optimizer.groups())
      groups.push_back({{"name", g.name}, {"peak_lr", g.peak_lr}, {"weight_decay", g.weight_decay}, {"lr", g.lr}});
    safetensors_write(tmp / kCheckpointOptimizerFile, tensors,
                      {{"format", kOptimizerFormat},
                       {"version", std::to_string(kVersion)},
                       {"step_count", std::to_string(optimizer.step_count())},
                       {"state_format", adamw_state_format_name(optimizer.config().state)},
                       {"master", master_format_name(optimizer.config().master)},
                       {"groups", groups.dump()}});
    fault_point("checkpoint.optimizer");
    file_write_atomic(tmp / kCheckpointStateFile, trainer_state_to_json(state).dump(2) + "\n");
    file_write_atomic(tmp / kCheckpointConfigFile, train_config.dump(2) + "\n");
    if (fs::exists(metrics)) {
      std::error_code ec;
      fs::copy_file(metrics, tmp / kMetricsFile, ec);
      HLM_CHECK_INPUT(!ec, (tmp / kMetricsFile).string(), ": cannot copy the metrics: ", ec.message());
    }
    file_write_atomic(tmp / kCheckpointManifestFile, manifest_of(tmp).dump(2) + "\n");
    fault_point("checkpoint.filled");
  });
  fault_point("checkpoint.renamed");
  for (const fs::path& older : checkpoint_list(run_dir))
    if (checkpoint_step_of(older) < state.step) fs::remove_all(older);
  fault_point("checkpoint.saved");
  return dir;
}

CheckpointInfo checkpoint_read(const fs::path& dir) {
  CheckpointInfo info;
  info.dir = dir;
  const fs::path state_file = dir / kCheckpointStateFile;
  info.state = trainer_state_from_json(json_file_read(state_file), state_file.string());
  info.train_config = json_file_read(dir / kCheckpointConfigFile);
  HLM_CHECK_INPUT(fs::exists(dir / kCheckpointOptimizerFile), dir.string(), ": checkpoint lacks ",
                  kCheckpointOptimizerFile);
  return info;
}

void checkpoint_verify(const fs::path& dir) {
  const fs::path manifest_path = dir / kCheckpointManifestFile;
  if (!fs::exists(manifest_path)) {
    std::fprintf(stderr,
                 "hybridlm: warning: %s has no %s (written by an older hybridlm?): its files are not verified\n",
                 dir.string().c_str(), kCheckpointManifestFile);
    return;
  }
  const json manifest = json_file_read(manifest_path);
  HLM_CHECK_INPUT(manifest.is_object() && manifest.value("format", "") == kManifestFormat &&
                      manifest.contains("files") && manifest["files"].is_object(),
                  manifest_path.string(), ": not a hybridlm checkpoint manifest");
  const std::string advice = "; the checkpoint is damaged: resume from another copy or start the run over";
  for (const auto& [name, want] : manifest["files"].items()) {
    const fs::path path = dir / name;
    HLM_CHECK_INPUT(name.find('/') == std::string::npos && want.is_object() && want.contains("bytes") &&
                        want.contains("digest"),
                    manifest_path.string(), ": malformed entry '", name, "'");
    HLM_CHECK_INPUT(fs::is_regular_file(path), path.string(), ": missing (listed in ", kCheckpointManifestFile, ")",
                    advice);
    const auto bytes = want["bytes"].get<uint64_t>();
    const uint64_t size = fs::file_size(path);
    HLM_CHECK_INPUT(size == bytes, path.string(), ": ", size, " bytes, the manifest says ", bytes,
                    size < bytes ? " (truncated)" : "", advice);
    HLM_CHECK_INPUT(file_digest(path).hex == want["digest"].get<std::string>(), path.string(),
                    ": content differs from the manifest's digest", advice);
  }
}

void checkpoint_restore_optimizer(const fs::path& dir, AdamW& optimizer) {
  const fs::path path = dir / kCheckpointOptimizerFile;
  const SafetensorsFile file = SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  HLM_CHECK_INPUT(meta.count("format") && meta.at("format") == kOptimizerFormat && meta.count("step_count"),
                  path.string(), ": not a hybridlm optimizer state");
  // Written by an older hybridlm: no state_format, fp32 moments.
  const std::string format = meta.count("state_format") ? meta.at("state_format") : "f32";
  HLM_CHECK_INPUT(format == "f32" || format == "q8", path.string(), ": unknown optimizer state format '", format,
                  "' (this hybridlm reads f32 and q8)");
  const bool file_q8 = format == "q8", want_q8 = optimizer.config().state == AdamWStateFormat::Q8;
  const size_t per_param = file_q8 ? 4 : 2;
  HLM_CHECK_INPUT(file.entries().size() == per_param * optimizer.params().size(), path.string(), ": holds ",
                  file.entries().size(), " tensors, the optimizer expects ", per_param * optimizer.params().size(),
                  " (a different model?)");
  if (file_q8 != want_q8)  // a checkpoint of another memory plan: converted, said once
    std::fprintf(stderr, "hybridlm: note: %s holds %s AdamW moments, this run keeps %s: %s\n", path.string().c_str(),
                 format.c_str(), adamw_state_format_name(optimizer.config().state),
                 file_q8 ? "dequantized exactly (the resumed steps continue from the same values in fp32)"
                         : "quantized block-wise (8-bit; the first resumed step differs from an fp32 resume by the "
                           "quantization error)");
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    const std::string& name = optimizer.params()[i].name;
    try {
      if (file_q8) {
        const int64_t n = optimizer.params()[i].param.numel();
        AdamWQ8State q;
        q.q_m = unpack_codes(file.tensor("exp_avg.q8." + name), n);
        q.q_v = unpack_codes(file.tensor("exp_avg_sq.q8." + name), n);
        q.absmax_m = f32_vector(file.tensor_f32("exp_avg.absmax." + name));
        q.absmax_v = f32_vector(file.tensor_f32("exp_avg_sq.absmax." + name));
        HLM_CHECK_INPUT(q.absmax_m.size() == static_cast<size_t>(q8_blocks(n)) &&
                            q.absmax_v.size() == static_cast<size_t>(q8_blocks(n)),
                        "block scales of the wrong size");
        if (want_q8) {
          optimizer.set_q8_state(i, std::move(q));
        } else {
          Tensor m = Tensor::zeros(optimizer.params()[i].param.shape()), v = Tensor::zeros(m.shape());
          q8_dequantize(q8_codebook_signed(), q.q_m.data(), q.absmax_m.data(), n, m.f32());
          q8_dequantize(q8_codebook_unsigned(), q.q_v.data(), q.absmax_v.data(), n, v.f32());
          optimizer.set_state(i, m, v);
        }
      } else {
        const Tensor m = file.tensor_f32("exp_avg." + name), v = file.tensor_f32("exp_avg_sq." + name);
        optimizer.set_state(i, m, v);
      }
    } catch (Error& e) {
      e.add_context(path.string(), ": ", name);
      throw;
    }
  }
  optimizer.set_step_count(std::stoll(meta.at("step_count")));
}

Model model_load_trainable(const fs::path& dir) {
  Model model = Model::load(dir);
  const ModelConfig& config = model.config();
  DecoderWeights& w = model.mutable_weights();
  for (const TensorSpec& spec : expected_tensors(config)) {
    Tensor& slot = tensor_slot(w, spec);  // per-expert tensors (MoE) are addressed through the spec, not the row
    slot = slot.clone();
  }
  if (config.tie_word_embeddings) w.lm_head.weight = w.embed_tokens;
  return model;
}

}  // namespace hlm
