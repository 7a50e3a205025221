// A persistent table of tuning choices (today: the GEMM algorithm HLM_MATMUL_AUTOTUNE picks per shape,
// ops/matmul/matmul_cuda.h), so that a later process takes the choice an earlier one timed instead of timing again:
// the same choice, hence the same summation order and the same bits, in every process that reads the same file.
//
// File: text, one choice per line, tab-separated fields:
//   hlm-tuning-1 <TAB> scope <TAB> key <TAB> choice [<TAB> note]
//   scope: what the choice holds for (e.g. "gemm NVIDIA H200 sm_90 132 SMs cublasLt 120803"); key: the problem (a
//   GEMM's shape, types, layouts, alignments, workspace); choice: a non-negative integer (the index into cuBLASLt's
//   heuristic list); note: free text for a person reading the file (the candidates' timings). Tabs and line breaks
//   inside a field are written as spaces.
// Lookup: the FIRST line with the scope and key wins, so every process that reads the file takes the same choice
// even when two processes tuned the same key at once and both appended (the later line is ignored). Lines of other
// scopes are kept and skipped; a malformed line is skipped with one warning per table on stderr. The file is read
// once, on first use; lines other processes append later are not seen by this process (it keeps its own choice).
// Append: each record is one write(2) of the whole line to the file opened with O_APPEND (its folder created), so
// concurrent writers on a local file system do not interleave lines. A file or folder that cannot be created or
// written is a warning (once per table), not an error: the choice is then kept for this process only.
// Thread-safe.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace hlm {

class TuningCache {
 public:
  explicit TuningCache(std::string path);

  // The first recorded choice for (scope, key): from the file, or from an earlier record() of this process.
  std::optional<int> find(const std::string& scope, const std::string& key);
  // Keeps `choice` for (scope, key) unless one is already known (then nothing changes: the first stays), and appends
  // its line to the file. choice ≥ 0 (internal error otherwise).
  void record(const std::string& scope, const std::string& key, int choice, const std::string& note);

  const std::string& path() const { return path_; }

 private:
  void load_locked();
  void warn_locked(const std::string& what);

  std::string path_;
  std::mutex mutex_;
  bool loaded_ = false, warned_ = false;
  std::map<std::pair<std::string, std::string>, int> choices_;
};

// The process's table of GEMM algorithm choices: the file HLM_MATMUL_AUTOTUNE_CACHE names, or nullptr when the
// variable is unset or empty (choices are then kept per process only). Created on first use and kept.
TuningCache* gemm_tuning_cache();
// Replaces that table by one on `path` (tests), or, with nullopt, by the environment's again. Not while GEMMs run on
// other threads (the old table is destroyed).
void set_gemm_tuning_cache_path(const std::optional<std::string>& path);

}  // namespace hlm
