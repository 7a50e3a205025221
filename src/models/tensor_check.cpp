#include "models/tensor_check.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace hlm {
namespace {

bool same_trailing_dims(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank() || a.rank() == 0) return false;
  for (int d = 1; d < a.rank(); ++d)
    if (a[d] != b[d]) return false;
  return true;
}

// specs[begin, end) are the parts of one fused tensor of one layer. When each part is stored under its own name with
// the implied shape, nothing to do (returns false). When the stored parts are a different cut of the same fused
// tensor, fills `out` with re-cut entries and returns true. Anything else is left to the per-tensor checks.
bool resolve_recut(const std::vector<TensorSpec>& specs, size_t begin, size_t end, const Checkpoint& checkpoint,
                   std::vector<ResolvedTensor>& out) {
  std::vector<std::string> names;
  std::vector<const SafetensorsEntry*> entries;
  bool exact = true;
  int64_t stored_rows = 0, implied_rows = 0;
  for (size_t s = begin; s < end; ++s) {
    const SafetensorsEntry* e = checkpoint.find(specs[s].name);
    if (e == nullptr || !same_trailing_dims(e->shape, specs[s].shape)) return false;
    exact = exact && e->shape == specs[s].shape;
    names.push_back(specs[s].name);
    entries.push_back(e);
    stored_rows += e->shape[0];
    implied_rows += specs[s].shape[0];
  }
  if (exact || stored_rows != implied_rows) return false;
  int64_t row = 0;
  for (size_t s = begin; s < end; ++s) {
    out.push_back({specs[s], specs[s].name, entries[s - begin], names, row});
    row += specs[s].shape[0];
  }
  return true;
}

}  // namespace

ResolvedCheckpoint resolve_checkpoint(const ModelConfig& config, const Checkpoint& checkpoint) {
  ResolvedCheckpoint out;
  std::set<std::string> used;
  std::vector<TensorSpec> specs = expected_tensors(config);
  for (size_t i = 0; i < specs.size();) {
    // A run of parts of one fused tensor (same fused pattern, same layer) may be stored cut elsewhere.
    size_t end = i + 1;
    if (!specs[i].row->fused.empty())
      while (end < specs.size() && specs[end].row->fused == specs[i].row->fused && specs[end].layer == specs[i].layer)
        ++end;
    if (end - i > 1 && resolve_recut(specs, i, end, checkpoint, out.tensors)) {
      for (size_t s = i; s < end; ++s) used.insert(specs[s].name);
      i = end;
      continue;
    }
    for (; i < end; ++i) {
      TensorSpec& spec = specs[i];
      std::string stored = spec.name;
      const SafetensorsEntry* entry = checkpoint.find(stored);
      if (entry == nullptr) {
        const std::string alias = tensor_alias(*spec.row, spec.layer);
        if (!alias.empty() && (entry = checkpoint.find(alias)) != nullptr) stored = alias;
      }
      HLM_CHECK_INPUT(entry != nullptr, checkpoint.dir().string(), ": tensor '", spec.name,
                      "' is missing (config.json implies shape ", spec.shape.str(), ")");
      HLM_CHECK_INPUT(entry->shape == spec.shape, checkpoint.file_of(stored).string(), ": tensor '", stored,
                      "' has shape ", entry->shape.str(), " but config.json implies ", spec.shape.str(),
                      spec.row->fused.empty() ? "" : " (nor do its sibling parts add up to the fused tensor)");
      used.insert(stored);
      out.tensors.push_back({std::move(spec), stored, entry, {stored}, 0});
    }
  }
  for (const std::string& name : checkpoint.names())
    if (!used.count(name)) out.unused.push_back(name);
  return out;
}

Tensor resolved_tensor_f32(const Checkpoint& checkpoint, const ResolvedTensor& t) {
  if (!t.recut()) return checkpoint.tensor_f32(t.stored_name);
  const Shape& shape = t.spec.shape;
  const int64_t row_elements = shape.numel() / shape[0];
  Tensor value = Tensor::zeros(shape);
  float* dst = value.f32();
  const int64_t want_begin = t.first_row, want_end = t.first_row + shape[0];
  int64_t source_begin = 0;  // first row of the current source within the concatenation
  for (const std::string& name : t.sources) {
    const Tensor part = checkpoint.tensor_f32(name);
    const int64_t source_end = source_begin + part.dim(0);
    const int64_t lo = std::max(want_begin, source_begin), hi = std::min(want_end, source_end);
    if (lo < hi)
      std::memcpy(dst + (lo - want_begin) * row_elements, part.f32() + (lo - source_begin) * row_elements,
                  static_cast<size_t>((hi - lo) * row_elements) * sizeof(float));
    source_begin = source_end;
  }
  return value;
}

}  // namespace hlm
