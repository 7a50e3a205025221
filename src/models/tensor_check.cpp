#include "models/tensor_check.h"

#include <set>

namespace hlm {

ResolvedCheckpoint resolve_checkpoint(const ModelConfig& config, const Checkpoint& checkpoint) {
  ResolvedCheckpoint out;
  std::set<std::string> used;
  for (TensorSpec& spec : expected_tensors(config)) {
    std::string stored = spec.name;
    const SafetensorsEntry* entry = checkpoint.find(stored);
    if (entry == nullptr) {
      const std::string alias = tensor_alias(*spec.row, spec.layer);
      if (!alias.empty() && (entry = checkpoint.find(alias)) != nullptr) stored = alias;
    }
    HLM_CHECK_INPUT(entry != nullptr, checkpoint.dir().string(), ": tensor '", spec.name,
                    "' is missing (config.json implies shape ", spec.shape.str(), ")");
    HLM_CHECK_INPUT(entry->shape == spec.shape, checkpoint.file_of(stored).string(), ": tensor '", stored,
                    "' has shape ", entry->shape.str(), " but config.json implies ", spec.shape.str());
    used.insert(stored);
    out.tensors.push_back({std::move(spec), stored, entry});
  }
  for (const std::string& name : checkpoint.names())
    if (!used.count(name)) out.unused.push_back(name);
  return out;
}

}  // namespace hlm
