// A fast 256-bit content digest of a file, for checkpoint manifests (checkpoint_io.h): detects truncation and damaged
// bytes (any single changed bit changes the digest; not a cryptographic hash: it guards against accidents, not
// attackers). Four independent 64-bit lanes over 32-byte blocks (multiply, rotate, multiply), the tail and the
// length mixed in at the end; reads the file in 4 MiB pieces (several GB/s on one core).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace hlm {

struct FileDigest {
  uint64_t bytes = 0;
  std::string hex;  // 64 hex digits
};

// Input error naming the file when it cannot be read.
FileDigest file_digest(const std::filesystem::path& path);

}  // namespace hlm
