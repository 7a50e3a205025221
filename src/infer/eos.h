// The ids that end a generation: config.json's eos_token_id together with generation_config.json's (when the model
// directory has one), each an integer or a list of integers — HF generate stops at any of them.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

#include "models/hf_config.h"

namespace hlm {

// Sorted, without duplicates; empty when neither file names one. Input error naming the file when
// generation_config.json is malformed or its eos_token_id is not an integer or a list of integers.
std::vector<int32_t> eos_token_ids(const ModelConfig& config, const std::filesystem::path& model_dir);

}  // namespace hlm
