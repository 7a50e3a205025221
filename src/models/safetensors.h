// safetensors files: a validating, zero-copy reader (mmap) and an atomic writer.
// Format: u64 little-endian header length N, N bytes of JSON header, then the data section. The header maps each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) and may hold
// "__metadata__": {string: string}.
// Reader contract: open() validates the whole header up front (sizes, JSON types, dtypes, offsets, overlaps), so
// every later accessor only fails for an unknown name. Every error is an input error naming the file (and tensor).
// Tensors returned are read-only views into the mapping; they keep it alive after the SafetensorsFile is gone.
// Non-goals: big-endian hosts, writing in place, dtypes outside kDTypeTable (F8, BOOL, U8 are rejected by name).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hlm {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) relative to the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;  // as the reference reader: 100 MiB

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header. Throws an input error naming the file on any defect.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  // All tensors, sorted by begin offset (file order); ties (zero-size tensors) by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(std::string_view name) const;
  // The tensor in its stored dtype: a zero-copy view when its offset is aligned to the element size, else an aligned
  // copy (the format does not promise alignment). Throws an input error naming file and tensor if absent.
  Tensor tensor(std::string_view name) const;
  // The tensor as f32: zero-copy when stored as aligned F32, else converted (BF16/F16). Integer tensors are an error.
  Tensor tensor_f32(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The mapped data section (for callers that check zero-copy or hash raw bytes).
  std::span<const std::byte> data_section() const;

 private:
  struct Mapping;
  const SafetensorsEntry& entry_or_throw(std::string_view name) const;

  std::filesystem::path path_;
  std::shared_ptr<const Mapping> mapping_;
  uint64_t data_begin_ = 0;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index into entries_
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (each converted to contiguous, in its own dtype, tightly packed in the given order) and `metadata`
// into `path`. The header is padded with spaces so the data section starts 8-byte aligned. Atomic: the bytes go to
// `<path>.tmp.<pid>.<n>` in the same directory, are fsync'ed and renamed over `path`; on any failure the temp file is
// removed and `path` is untouched. Duplicate or reserved ("__metadata__") names are input errors.
// Packing is in the caller's order, so a tensor after an odd-sized one may be misaligned (and then copied on read);
// order by descending element size to keep every tensor zero-copy.
void safetensors_write(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Atomically replaces `path` with `bytes` (same temp + fsync + rename protocol as safetensors_write).
void file_write_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace hlm
