// Open-addressing hash table from a BPE symbol pair (two ids) to its merge (rank, merged id). The BPE merge loop
// looks pairs up several times per character, so this replaces a node-based std::unordered_map (one cache miss per
// node) with one flat array probed linearly; the table is built once and read-only afterwards (thread-safe reads).
#pragma once
#include <cstdint>
#include <vector>

namespace hlm {

struct PairMerge {
  int32_t rank, new_id;
};

class PairRankTable {
 public:
  // Sets (or overwrites) the merge of pair (a, b). a, b >= 0.
  void insert(int32_t a, int32_t b, PairMerge merge) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    Slot& s = probe(key(a, b));
    if (s.key == kEmpty) ++count_;
    s = {key(a, b), merge};
  }
  // The merge of (a, b), or nullptr.
  const PairMerge* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = const_cast<PairRankTable*>(this)->probe(key(a, b));
    return s.key == kEmpty ? nullptr : &s.merge;
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    PairMerge merge{};
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  Slot& probe(uint64_t k) {
    const size_t mask = slots_.size() - 1;
    size_t i = static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask;  // Fibonacci hashing
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask;
    return slots_[i];
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
    for (const Slot& s : old)
      if (s.key != kEmpty) probe(s.key) = s;
  }
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

}  // namespace hlm
