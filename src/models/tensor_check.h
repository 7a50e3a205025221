// Matches a checkpoint against the tensors its config.json implies (tensor table): each expected tensor is found
// under its name or alias and must have the implied shape; otherwise an input error naming the file and tensor.
// Exception, the fused rows of the table (TensorRow::fused): when every part is present under its own name and the
// parts differ from the implied shapes only in where the fused tensor was cut (same trailing dims, same total rows),
// each part is re-cut from the dim-0 concatenation of the stored parts. And when a fused row's part is not stored
// under its name (or is, with the fused tensor's shape: the gated q_proj), it is cut from the fused tensor itself
// (TensorRow::fused_blocks, tensor_fused_place). Names are also looked up under the architecture's text_prefix
// ("model.language_model." for "model."). Checkpoint tensors nobody expects are returned as `unused` so callers
// report them.
#pragma once
#include <string>
#include <vector>

#include "models/checkpoint.h"
#include "models/tensor_table.h"

namespace hlm {

struct ResolvedTensor {
  TensorSpec spec;
  std::string stored_name;  // spec.name or the row's alias, as found in the checkpoint
  const SafetensorsEntry* entry;  // the stored tensor of that name (its dtype and stored shape)
  // Where the value comes from: rows [first_row, first_row + spec.shape[0]) of the dim-0 concatenation of `sources`
  // (just {stored_name} from row 0, unless the checkpoint cut a fused tensor elsewhere).
  std::vector<std::string> sources;
  int64_t first_row = 0;
  FusedPlace fused;  // fused.name set: the value is cut from that one stored tensor (sources = {it})
  bool recut() const { return sources.size() != 1; }
};

struct ResolvedCheckpoint {
  std::vector<ResolvedTensor> tensors;  // table order
  std::vector<std::string> unused;      // sorted
};

ResolvedCheckpoint resolve_checkpoint(const ModelConfig& config, const Checkpoint& checkpoint);

// The value of a resolved tensor as f32, in the checkpoint shape spec.shape (re-cut when needed). A fused source is
// read through `cache` (the last one read; experts cut from one stacked tensor read it once).
struct FusedCache {
  std::string name;
  Tensor value;
};
Tensor resolved_tensor_f32(const Checkpoint& checkpoint, const ResolvedTensor& t, FusedCache* cache = nullptr);

}  // namespace hlm
