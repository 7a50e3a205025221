#include "infer/kv_block_allocator.h"

#include "core/error.h"

namespace hlm {

KvBlockAllocator::KvBlockAllocator(int64_t num_blocks, int64_t block_size, int64_t max_sequences)
    : num_blocks_(num_blocks), block_size_(block_size), seqs_(static_cast<size_t>(max_sequences)) {
  HLM_CHECK(num_blocks >= 0 && block_size > 0 && max_sequences > 0, "bad KV pool: ", num_blocks, " blocks of ",
            block_size, ", ", max_sequences, " sequences");
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));  // block 0 on top
}

bool KvBlockAllocator::reserve(int seq, int64_t tokens) {
  Sequence& s = seqs_.at(static_cast<size_t>(seq));
  HLM_CHECK(!s.active, "KV sequence slot ", seq, " is already in use");
  HLM_CHECK(tokens > 0, "a sequence reserves at least one token");
  const int64_t need = blocks_for(tokens);
  if (need > unpromised_blocks()) return false;
  s = Sequence{true, 0, tokens, {}};
  promised_ += need;
  return true;
}

void KvBlockAllocator::append(int seq, int64_t n, int64_t* slots) {
  Sequence& s = seqs_.at(static_cast<size_t>(seq));
  HLM_CHECK(s.active, "KV sequence slot ", seq, " is not in use");
  HLM_CHECK(s.length + n <= s.reserved_tokens, "sequence slot ", seq, " grows past its reservation of ",
            s.reserved_tokens, " tokens");
  for (int64_t i = 0; i < n; ++i, ++s.length) {
    if (s.length % block_size_ == 0) {  // first token of a new block
      HLM_CHECK(!free_.empty() && promised_ > 0, "KV pool exhausted despite the reservation");
      s.blocks.push_back(free_.back());
      free_.pop_back();
      --promised_;
    }
    slots[i] = int64_t{s.blocks.back()} * block_size_ + s.length % block_size_;
  }
}

void KvBlockAllocator::release(int seq) {
  Sequence& s = seqs_.at(static_cast<size_t>(seq));
  HLM_CHECK(s.active, "KV sequence slot ", seq, " is not in use");
  promised_ -= blocks_for(s.reserved_tokens) - static_cast<int64_t>(s.blocks.size());
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) free_.push_back(*it);
  s = Sequence{};
}

}  // namespace hlm
