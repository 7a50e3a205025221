// Bookkeeping of a paged KV cache (host side, independent of where the blocks live): a pool of num_blocks blocks of
// block_size token slots, a free list, and per sequence slot its block table (block ids in token order), its length
// and its reservation. A sequence reserves its worst case (prompt + new tokens) when it starts, so a running sequence
// never finds the pool empty; blocks leave the free list only as tokens arrive and return when the sequence is
// released. Token p of a sequence lives at slot block_table[p / block_size] · block_size + p % block_size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hlm {

class KvBlockAllocator {
 public:
  KvBlockAllocator(int64_t num_blocks, int64_t block_size, int64_t max_sequences);

  // Starts sequence slot `seq` (unused) with room for `tokens` tokens; false (nothing changed) when the blocks not yet
  // promised to running sequences cannot cover it.
  bool reserve(int seq, int64_t tokens);
  // Appends n tokens to `seq` (within its reservation), taking blocks as needed; slots[i] ← token slot of token i.
  void append(int seq, int64_t n, int64_t* slots);
  // Returns the sequence's blocks to the free list and ends its reservation.
  void release(int seq);

  bool active(int seq) const { return seqs_.at(static_cast<size_t>(seq)).active; }
  int64_t length(int seq) const { return seqs_.at(static_cast<size_t>(seq)).length; }
  int64_t reserved_tokens(int seq) const { return seqs_.at(static_cast<size_t>(seq)).reserved_tokens; }
  const std::vector<int32_t>& block_table(int seq) const { return seqs_.at(static_cast<size_t>(seq)).blocks; }

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t max_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_in_use() const { return num_blocks_ - free_blocks(); }
  // Free blocks not promised to a running sequence's reservation.
  int64_t unpromised_blocks() const { return free_blocks() - promised_; }

 private:
  struct Sequence {
    bool active = false;
    int64_t length = 0;
    int64_t reserved_tokens = 0;
    std::vector<int32_t> blocks;
  };
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  int64_t num_blocks_, block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  int64_t promised_ = 0;       // reserved by running sequences but not yet taken
  std::vector<Sequence> seqs_;
};

}  // namespace hlm
