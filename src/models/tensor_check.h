// Matches a checkpoint against the tensors its config.json implies (tensor table): each expected tensor is found
// under its name or alias and must have the implied shape; otherwise an input error naming the file and tensor.
// Checkpoint tensors nobody expects are returned as `unused` so callers report them.
#pragma once
#include <string>
#include <vector>

#include "models/checkpoint.h"
#include "models/tensor_table.h"

namespace hlm {

struct ResolvedTensor {
  TensorSpec spec;
  std::string stored_name;  // spec.name or the row's alias, as found in the checkpoint
  const SafetensorsEntry* entry;
};

struct ResolvedCheckpoint {
  std::vector<ResolvedTensor> tensors;  // table order
  std::vector<std::string> unused;      // sorted
};

ResolvedCheckpoint resolve_checkpoint(const ModelConfig& config, const Checkpoint& checkpoint);

}  // namespace hlm
