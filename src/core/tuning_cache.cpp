// TuningCache (tuning_cache.h).
#include "core/tuning_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace hlm {

namespace {

constexpr const char* kTag = "hlm-tuning-1";

// A field as written: tabs and line breaks become spaces (they would split the line).
std::string field(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    parts.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return parts;
    start = tab + 1;
  }
}

// A non-negative decimal integer that fits an int, or nullopt.
std::optional<int> parse_choice(const std::string& s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

TuningCache::TuningCache(std::string path) : path_(std::move(path)) {}

void TuningCache::warn_locked(const std::string& what) {
  if (warned_) return;
  warned_ = true;
  std::fprintf(stderr, "warning: tuning cache %s: %s (later problems with this file are not reported)\n",
               path_.c_str(), what.c_str());
}

void TuningCache::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  std::ifstream in(path_);
  if (!in) return;  // no file yet: nothing recorded
  std::string line;
  int64_t number = 0, malformed = 0, first_bad = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::vector<std::string> parts = split_tabs(line);
    const std::optional<int> choice = parts.size() >= 4 ? parse_choice(parts[3]) : std::nullopt;
    if (parts.size() < 4 || parts[0] != kTag || !choice) {
      if (malformed++ == 0) first_bad = number;
      continue;
    }
    choices_.emplace(std::make_pair(parts[1], parts[2]), *choice);  // emplace keeps the first line's choice
  }
  if (malformed > 0)
    warn_locked(std::to_string(malformed) + " malformed line(s) skipped, the first at line " +
                std::to_string(first_bad));
}

std::optional<int> TuningCache::find(const std::string& scope, const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  const auto it = choices_.find({field(scope), field(key)});
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void TuningCache::record(const std::string& scope, const std::string& key, int choice, const std::string& note) {
  HLM_CHECK(choice >= 0, "TuningCache::record: negative choice ", choice);
  std::lock_guard<std::mutex> lock(mutex_);
  load_locked();
  if (!choices_.emplace(std::make_pair(field(scope), field(key)), choice).second) return;  // the first stays
  const std::string line = std::string(kTag) + "\t" + field(scope) + "\t" + field(key) + "\t" +
                           std::to_string(choice) + (note.empty() ? "" : "\t" + field(note)) + "\n";
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    warn_locked("cannot create its folder: " + ec.message());
    return;
  }
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    warn_locked(std::string("cannot open it for appending: ") + std::strerror(errno));
    return;
  }
  const ssize_t written = ::write(fd, line.data(), line.size());  // one write: whole lines under O_APPEND
  if (written != static_cast<ssize_t>(line.size()))
    warn_locked(written < 0 ? std::string("cannot write it: ") + std::strerror(errno) : "short write");
  ::close(fd);
}

namespace {

std::unique_ptr<TuningCache> environment_table() {
  const char* path = std::getenv("HLM_MATMUL_AUTOTUNE_CACHE");
  if (path == nullptr || *path == '\0') return nullptr;
  return std::make_unique<TuningCache>(path);
}

std::unique_ptr<TuningCache>& gemm_table() {
  static std::unique_ptr<TuningCache> table = environment_table();
  return table;
}

}  // namespace

TuningCache* gemm_tuning_cache() { return gemm_table().get(); }

void set_gemm_tuning_cache_path(const std::optional<std::string>& path) {
  gemm_table() = path ? std::make_unique<TuningCache>(*path) : environment_table();
}

}  // namespace hlm
