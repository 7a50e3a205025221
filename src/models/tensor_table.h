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
  std::string_view pattern;  // "model.layers.{i}.self_attn.q_proj.weight"; {i} = layer index
  std::string_view group;    // embedding | attention | linear_attention | mlp | norm | lm_head
  bool per_layer;
  Shape (*shape)(const ModelConfig&);             // expected shape in the checkpoint
  bool (*present)(const ModelConfig&, int layer);  // whether the checkpoint must hold it (layer -1 if not per layer)
  Tensor& (*slot)(DecoderWeights&, int layer);    // where it is stored after loading
  std::string_view alias = {};                     // another name checkpoints use for it (read, never written)
  Shape (*runtime_shape)(const ModelConfig&) = nullptr;  // reshape after loading (e.g. conv [C,1,K] -> [C,K])
};

std::span<const TensorRow> tensor_table();

// Expands a pattern for a layer ("{i}" -> "3").
std::string tensor_name(const TensorRow& row, int layer);
std::string tensor_alias(const TensorRow& row, int layer);  // empty when the row has no alias

// Every (name, shape, group) the config requires, in table order, layers expanded.
struct TensorSpec {
  std::string name;
  std::string group;
  Shape shape;
  const TensorRow* row;
  int layer;  // -1 when not per layer
};
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

}  // namespace hlm
