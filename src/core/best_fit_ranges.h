// Best-fit bookkeeping of address ranges cut out of larger segments: the large-block half of the CUDA caching
// allocator (backend/cuda/cuda_allocator.h), kept free of CUDA so that it is tested on every machine.
//
// A segment is one range obtained from the driver (one cudaMalloc); it is cut into blocks, each free or taken,
// that tile it without gaps. take(bytes) hands out the smallest free block of at least `bytes` (ties: the lowest
// address); when the block exceeds the request by at least split_min bytes the request is cut from its front and the
// rest stays free, else the whole block is handed out (the caller counts its whole size). give_back(addr) frees a
// taken block and merges it with free neighbours of the same segment, so a segment whose blocks are all free is one
// free block again and release_free_segments() can hand it back to the driver. Addresses are plain integers here;
// nothing is dereferenced. Not thread-safe (the allocator holds its mutex).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace hlm {

class BestFitRanges {
 public:
  struct Taken {
    uintptr_t addr = 0;
    size_t bytes = 0;  // >= the request: the request, or the whole free block when the rest was under split_min
  };

  explicit BestFitRanges(size_t split_min) : split_min_(split_min) {}

  // A new segment [base, base + bytes), all free. It must not overlap a segment already held.
  void add_segment(uintptr_t base, size_t bytes);
  // The best-fitting free block for `bytes` (> 0), cut as the header says; nullopt when no free block is that large.
  std::optional<Taken> take(size_t bytes);
  // Frees the taken block starting at `addr`; returns its size. An address that is not a taken block's start is an
  // internal error (hlm::Error).
  size_t give_back(uintptr_t addr);
  // True when `addr` is the start of a block taken from here.
  bool is_taken(uintptr_t addr) const;
  // Removes every segment that is entirely free and returns them (base, bytes) for the driver to free.
  std::vector<std::pair<uintptr_t, size_t>> release_free_segments();

  size_t segment_bytes() const { return segment_bytes_; }  // all segments held
  size_t free_bytes() const { return free_bytes_; }
  size_t segments() const { return segments_.size(); }
  size_t largest_free() const { return free_.empty() ? 0 : free_.rbegin()->first; }

 private:
  struct Block {
    size_t bytes = 0;
    uintptr_t segment = 0;  // base of the segment it belongs to
    bool free = true;
  };
  using Blocks = std::map<uintptr_t, Block>;  // by address: neighbours are adjacent entries of the same segment
  void mark_free(Blocks::iterator it);
  void unmark_free(Blocks::iterator it);

  size_t split_min_;
  Blocks blocks_;
  std::set<std::pair<size_t, uintptr_t>> free_;  // (bytes, addr) of the free blocks: best fit by lower_bound
  std::map<uintptr_t, size_t> segments_;         // base -> bytes
  size_t segment_bytes_ = 0, free_bytes_ = 0;
};

}  // namespace hlm
