// The one table of model tensors: HF name pattern, parameter group, expected shape and presence rule, and where the
// tensor lives in DecoderWeights. Loading, shape checks, `inspect`'s tensor table and parameter counts all derive
// from kTensorTable; nothing else lists tensor names.
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "models/decoder_weights.h"
#include "models/hf_config.h"

namespace hlm {

struct TensorRow {
  std::string_view pattern;  // "model.layers.{i}.self_attn.q_proj.weight"; {i} = layer index, {e} = expert index
  std::string_view group;    // embedding | attention | linear_attention | mlp | norm | lm_head
  bool per_layer;
  Shape (*shape)(const ModelConfig&);             // expected shape in the checkpoint
  bool (*present)(const ModelConfig&, int layer);  // whether the checkpoint must hold it (layer -1 if not per layer)
  Tensor& (*slot)(DecoderWeights&, int layer);    // where it is stored after loading (not for expert rows)
  std::string_view alias = {};                     // another name checkpoints use for it (read, never written)
  Shape (*runtime_shape)(const ModelConfig&) = nullptr;  // reshape after loading (e.g. conv [C,1,K] -> [C,K])
  // Pattern of the fused tensor this row is a dim-0 slice of; rows sharing it are consecutive, in fused order. A
  // checkpoint may cut the fused tensor at other boundaries under the same part names (transformers 5.x saves
  // olmo_hybrid's conv1d [q|k|v] as three EQUAL torch.chunk pieces, wrong when d_v != d_k): the loader then
  // concatenates the stored parts and re-cuts them at the table's sizes (tensor_check.h).
  std::string_view fused = {};
  // Rows whose pattern holds {e}: one tensor per routed expert (ModelConfig::moe), stored here instead of `slot`.
  Tensor& (*expert_slot)(DecoderWeights&, int layer, int expert) = nullptr;
};

std::span<const TensorRow> tensor_table();

// Expands a pattern for a layer ("{i}" -> "3") and, for expert rows, an expert ("{e}" -> "5").
std::string tensor_name(const TensorRow& row, int layer, int expert = -1);
std::string tensor_alias(const TensorRow& row, int layer);  // empty when the row has no alias

// Every (name, shape, group) the config requires, in table order, layers expanded.
struct TensorSpec {
  std::string name;
  std::string group;
  Shape shape;
  const TensorRow* row;
  int layer;  // -1 when not per layer
  int expert = -1;  // expert rows only
};
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

// Where a spec's tensor lives in `w` (expert rows included); the one accessor loading, saving and training use.
Tensor& tensor_slot(DecoderWeights& w, const TensorSpec& spec);

}  // namespace hlm
