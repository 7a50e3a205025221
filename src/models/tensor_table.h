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
  // A checkpoint may also hold only the fused tensor, under `fused` (Qwen3.5's in_proj_qkv and conv1d, the gated
  // q_proj, stacked experts): viewed as rows of the parts' trailing size, it is `blocks` equal blocks, each the
  // concatenation, in table order, of every present part sharing `fused` (a part's share of a block: its rows /
  // blocks; an expert row's tensor is the whole share of block e, blocks = the expert count). Null = 1 block.
  int64_t (*fused_blocks)(const ModelConfig&) = nullptr;
  // An RMSNorm weight that architectures with zero_centred_norms store as an offset from 1 (architecture.h).
  bool zero_centred = false;
  // The fused tensor of this part in architectures with gdn_grouped_projections (Qwen3-Next's in_proj_qkvz /
  // in_proj_ba), used there instead of `fused`: one block per GDN key head, parts ordered by grouped_order.
  std::string_view fused_grouped = {};
  int grouped_order = 0;
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

// Whether the checkpoint value of spec is w − 1 (zero-centred norm of an architecture that stores them so).
bool tensor_zero_centred(const ModelConfig& config, const TensorSpec& spec);

// The fused tensor spec is a part of, as found in a checkpoint: its name, the block count, the rows of one block
// and where in a block spec's rows start (all in rows of spec's trailing size). Empty name when the row is not fused.
struct FusedPlace {
  std::string name;
  int64_t blocks = 1, block_rows = 0, offset = 0;
  int64_t first_block = 0, num_blocks = 1;  // the blocks spec takes rows from (an expert takes only its own)
  int64_t rows_per_block = 0;               // spec's rows in each of them
};
FusedPlace tensor_fused_place(const ModelConfig& config, const TensorSpec& spec);

}  // namespace hlm
