#include "core/arena.h"

#include <algorithm>
#include <cstring>

#include "core/env_switch.h"
#include "core/host_alloc.h"

namespace hlm {

namespace {
// HLM_ARENA_POISON=on: every piece allocate() hands out is filled with 0xFF bytes (a NaN in f32, bf16 and f64) — a
// reader of scratch it never wrote then sees NaN instead of a block's lucky zeros or a previous pass's values.
bool poison_enabled() {
  static const bool on = env_switch("HLM_ARENA_POISON", false);
  return on;
}
}  // namespace

void* Arena::allocate(size_t bytes) {
  void* p = allocate_raw(bytes);
  if (poison_enabled() && bytes > 0) std::memset(p, 0xFF, bytes);
  return p;
}

void* Arena::allocate_raw(size_t bytes) {
  const size_t need = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  // Find a block from `current_` on with room; later blocks are empty after a release.
  while (current_ < blocks_.size()) {
    Block& b = blocks_[current_];
    if (b.capacity - b.used >= need) {
      void* p = b.data.get() + b.used;
      b.used += need;
      high_water_ = std::max(high_water_, bytes_in_use());
      return p;
    }
    if (current_ + 1 == blocks_.size()) break;
    ++current_;
  }
  Block b;
  b.capacity = std::max(need, block_bytes_);
  b.data = host_alloc_uninitialized(b.capacity);  // allocate() promises no contents; tensor() zeroes its own piece
  b.used = need;
  blocks_.push_back(std::move(b));
  current_ = blocks_.size() - 1;
  high_water_ = std::max(high_water_, bytes_in_use());
  return blocks_.back().data.get();
}

Tensor Arena::tensor(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = allocate_raw(bytes);
  std::memset(p, 0, bytes);
  // The block owns the memory; the tensor holds the block alive but not the arena's bookkeeping.
  return Tensor::wrap(blocks_[current_].data, p, shape, dtype);
}

void Arena::release(Mark m) {
  if (blocks_.empty()) return;
  HLM_CHECK(m.block < blocks_.size(), "arena mark from another arena");
  for (size_t i = m.block + 1; i < blocks_.size(); ++i) blocks_[i].used = 0;
  blocks_[m.block].used = m.offset;
  current_ = m.block;
}

size_t Arena::bytes_in_use() const {
  size_t n = 0;
  for (const auto& b : blocks_) n += b.used;
  return n;
}

size_t Arena::bytes_reserved() const {
  size_t n = 0;
  for (const auto& b : blocks_) n += b.capacity;
  return n;
}

}  // namespace hlm
