// Model::load: config.json -> expected tensors (tensor table) -> f32 weights, with shape and finiteness checks.
#include "models/finite_weights.h"
#include "models/model.h"
#include "models/tensor_check.h"

namespace hlm {

void check_model_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(dir, ec);
  HLM_CHECK_INPUT(std::filesystem::is_directory(dir, ec), dir.string(), ": not a model directory (",
                  exists ? "not a directory: give the folder that holds config.json" : "does not exist", ")");
}

Model Model::load(const std::filesystem::path& dir) {
  Model m;
  m.dir_ = dir;
  check_model_dir(dir);
  m.config_ = load_model_config(dir / "config.json");
  const ModelConfig& c = m.config_;
  const Checkpoint checkpoint = Checkpoint::open(dir);
  const ResolvedCheckpoint resolved = resolve_checkpoint(c, checkpoint);

  m.weights_.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  FusedCache fused;
  for (const ResolvedTensor& t : resolved.tensors) {
    Tensor value = resolved_tensor_f32(checkpoint, t, &fused);
    check_finite_weights(value, checkpoint.file_of(t.stored_name).string(), t.stored_name);
    if (tensor_zero_centred(c, t.spec)) {  // stored w: keep fl(1 + w), the factor HF's zero-centred RMSNorm uses
      Tensor shifted = Tensor::zeros(value.shape());  // (an f32 value may be a read-only view of the mapped file)
      for (int64_t j = 0; j < value.numel(); ++j) shifted.f32()[j] = 1.0f + value.f32()[j];
      value = shifted;
    }
    if (t.spec.row->runtime_shape != nullptr) value = value.reshape(t.spec.row->runtime_shape(c));
    tensor_slot(m.weights_, t.spec) = value;
  }
  if (c.tie_word_embeddings) m.weights_.lm_head.weight = m.weights_.embed_tokens;
  m.unused_tensors_ = resolved.unused;
  m.build_rope_tables();
  return m;
}

}  // namespace hlm
