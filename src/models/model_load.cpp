// Model::load: config.json -> expected tensors (tensor table) -> f32 weights, with shape checks.
#include <set>

#include "models/checkpoint.h"
#include "models/model.h"
#include "models/tensor_table.h"

namespace hlm {

Model Model::load(const std::filesystem::path& dir) {
  Model m;
  m.dir_ = dir;
  HLM_CHECK_INPUT(std::filesystem::is_directory(dir), dir.string(), ": not a model directory (does not exist)");
  m.config_ = load_model_config(dir / "config.json");
  const ModelConfig& c = m.config_;
  const Checkpoint checkpoint = Checkpoint::open(dir);

  m.weights_.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  std::set<std::string> used;
  for (const TensorSpec& spec : expected_tensors(c)) {
    const SafetensorsEntry* entry = checkpoint.find(spec.name);
    HLM_CHECK_INPUT(entry != nullptr, dir.string(), ": tensor '", spec.name, "' is missing (config.json implies shape ",
                    spec.shape.str(), ")");
    HLM_CHECK_INPUT(entry->shape == spec.shape, checkpoint.file_of(spec.name).string(), ": tensor '", spec.name,
                    "' has shape ", entry->shape.str(), " but config.json implies ", spec.shape.str());
    spec.row->slot(m.weights_, spec.layer) = checkpoint.tensor_f32(spec.name);
    used.insert(spec.name);
  }
  if (c.tie_word_embeddings) m.weights_.lm_head.weight = m.weights_.embed_tokens;
  for (const std::string& name : checkpoint.names())
    if (!used.count(name)) m.unused_tensors_.push_back(name);

  m.rope_ = rope_table_build(c.rope, c.head_dim, c.max_position_embeddings);
  return m;
}

}  // namespace hlm
