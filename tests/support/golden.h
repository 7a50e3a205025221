// Access to the committed HF goldens (tests/golden/<case>/): opens golden.safetensors, checks its format and version,
// and turns an HF [B, T] input_ids tensor into a packed TokenBatch of B sequences.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "layers/token_batch.h"
#include "models/safetensors.h"

namespace hlm::test {

inline constexpr const char* kGoldenFormat = "hybridlm-golden";
inline constexpr const char* kGoldenVersion = "1";

inline std::filesystem::path golden_dir(const std::string& case_name) {
  return std::filesystem::path(HLM_GOLDEN_DIR) / case_name;
}

// Opens <case>/golden.safetensors; fails the test (with the regenerate hint) on a missing file or unknown version.
inline SafetensorsFile open_golden(const std::string& case_name) {
  const auto path = golden_dir(case_name) / "golden.safetensors";
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path.string() + " is missing: run tools/goldens/make_goldens.py on the GPU machine");
  SafetensorsFile file = SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  const auto format = meta.find("format");
  const auto version = meta.find("version");
  if (format == meta.end() || format->second != kGoldenFormat || version == meta.end() ||
      version->second != kGoldenVersion)
    throw std::runtime_error(path.string() + ": unknown golden format/version; regenerate with " +
                             (meta.count("regenerate") ? meta.at("regenerate") : std::string("tools/goldens")));
  return file;
}

// input_ids [B, T] (i64 or i32) -> B packed sequences.
inline TokenBatch golden_batch(const SafetensorsFile& golden) {
  const Tensor ids = golden.tensor("input_ids");
  const int64_t B = ids.dim(0), T = ids.dim(1);
  TokenBatch batch;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> seq(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      seq[t] = ids.dtype() == DType::I64 ? static_cast<int32_t>(ids.data<int64_t>()[b * T + t])
                                         : ids.data<int32_t>()[b * T + t];
    batch.add_sequence(seq);
  }
  return batch;
}

}  // namespace hlm::test
