// Activation arena: a bump allocator for the short-lived buffers of one forward (or forward+backward) pass.
// Allocation is O(1); `reset()` frees everything at once; `mark()`/`release(mark)` free the tail (stack order).
// Blocks are never moved, so pointers stay valid until reset/release. Memory grows in blocks of at least
// `block_bytes` and is reused across passes. Not thread-safe: one arena per pass.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace hlm {

class Arena {
 public:
  struct Mark {
    size_t block = 0;
    size_t offset = 0;
  };

  explicit Arena(size_t block_bytes = size_t{64} << 20) : block_bytes_(block_bytes) {}

  // Returns kHostAlignment-aligned, uninitialised memory (fresh blocks are not zero-filled; with HLM_ARENA_POISON=on
  // every piece is filled with 0xFF bytes, NaN in every float type, so reads of unwritten scratch show in tests).
  void* allocate(size_t bytes);
  // A contiguous tensor whose storage lives in the arena (valid until reset/release past it). Zero-filled.
  Tensor tensor(Shape shape, DType dtype = DType::F32);

  Mark mark() const { return {current_, blocks_.empty() ? 0 : blocks_[current_].used}; }
  void release(Mark m);
  void reset() { release({}); }

  size_t bytes_in_use() const;
  size_t bytes_reserved() const;
  size_t high_water() const { return high_water_; }

 private:
  void* allocate_raw(size_t bytes);
  struct Block {
    std::shared_ptr<std::byte> data;
    size_t capacity = 0;
    size_t used = 0;
  };
  size_t block_bytes_;
  std::vector<Block> blocks_;
  size_t current_ = 0;
  size_t high_water_ = 0;
};

}  // namespace hlm
