#include "models/tensor_check.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <tuple>

#include "models/architecture.h"

namespace hlm {
namespace {

// `name`, or the same tensor under the architecture's text prefix; (stored name, entry), entry null if neither.
std::pair<std::string, const SafetensorsEntry*> find_prefixed(const Checkpoint& checkpoint, const ModelConfig& config,
                                                              const std::string& name) {
  if (const SafetensorsEntry* e = checkpoint.find(name)) return {name, e};
  const std::string_view prefix = architecture_spec(config.architecture).text_prefix;
  constexpr std::string_view kModel = "model.";
  if (!prefix.empty() && name.compare(0, kModel.size(), kModel) == 0) {
    std::string other = std::string(prefix) + name.substr(kModel.size());
    if (const SafetensorsEntry* e = checkpoint.find(other)) return {std::move(other), e};
  }
  return {name, nullptr};
}

// spec cut from its fused tensor, when the checkpoint holds that with the size the present parts add up to.
std::optional<ResolvedTensor> resolve_from_fused(const ModelConfig& config, const TensorSpec& spec,
                                                 const Checkpoint& checkpoint) {
  FusedPlace place = tensor_fused_place(config, spec);
  if (place.name.empty()) return std::nullopt;
  auto [stored, entry] = find_prefixed(checkpoint, config, place.name);
  if (entry == nullptr) return std::nullopt;
  if (stored == spec.name && entry->shape.numel() == spec.shape.numel()) return std::nullopt;  // not a fused tensor
  const int64_t row_elements = spec.shape.numel() / spec.shape[0];
  if (entry->shape.numel() != place.blocks * place.block_rows * row_elements ||
      entry->shape[entry->shape.rank() - 1] != spec.shape[spec.shape.rank() - 1])
    return std::nullopt;
  place.name = stored;
  ResolvedTensor t{spec, stored, entry, {stored}, 0, {}};
  t.fused = std::move(place);
  return t;
}

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
    out.push_back({specs[s], specs[s].name, entries[s - begin], names, row, {}});
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
      auto [stored, entry] = find_prefixed(checkpoint, config, spec.name);
      if (entry == nullptr) {
        const std::string alias = tensor_alias(*spec.row, spec.layer);
        if (!alias.empty()) {
          auto [alias_stored, alias_entry] = find_prefixed(checkpoint, config, alias);
          if (alias_entry != nullptr) std::tie(stored, entry) = std::pair(alias_stored, alias_entry);
        }
      }
      if (entry == nullptr || entry->shape != spec.shape) {
        if (std::optional<ResolvedTensor> cut = resolve_from_fused(config, spec, checkpoint)) {
          used.insert(cut->stored_name);
          out.tensors.push_back(std::move(*cut));
          continue;
        }
      }
      if (entry == nullptr) stored = spec.name;
      HLM_CHECK_INPUT(entry != nullptr, checkpoint.dir().string(), ": tensor '", spec.name,
                      "' is missing (config.json implies shape ", spec.shape.str(), ")");
      HLM_CHECK_INPUT(entry->shape == spec.shape, checkpoint.file_of(stored).string(), ": tensor '", stored,
                      "' has shape ", entry->shape.str(), " but config.json implies ", spec.shape.str(),
                      spec.row->fused.empty() ? "" : " (nor do its sibling parts add up to the fused tensor)");
      used.insert(stored);
      out.tensors.push_back({std::move(spec), stored, entry, {stored}, 0, {}});
    }
  }
  for (const std::string& name : checkpoint.names())
    if (!used.count(name)) out.unused.push_back(name);
  return out;
}

Tensor resolved_tensor_f32(const Checkpoint& checkpoint, const ResolvedTensor& t, FusedCache* cache) {
  if (!t.fused.name.empty()) {
    FusedCache local;
    FusedCache& c = cache != nullptr ? *cache : local;
    if (c.name != t.fused.name || !c.value.defined()) c = {t.fused.name, checkpoint.tensor_f32(t.fused.name)};
    const FusedPlace& p = t.fused;
    const int64_t row_elements = t.spec.shape.numel() / t.spec.shape[0];
    Tensor value = Tensor::zeros(t.spec.shape);
    for (int64_t b = 0; b < p.num_blocks; ++b) {
      const int64_t src_row = (p.first_block + b) * p.block_rows + p.offset;
      std::memcpy(value.f32() + b * p.rows_per_block * row_elements, c.value.f32() + src_row * row_elements,
                  static_cast<size_t>(p.rows_per_block * row_elements) * sizeof(float));
    }
    return value;
  }
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
