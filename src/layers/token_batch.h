// A batch of token sequences packed end to end: ids [T] and cu_seqlens [N+1] (sequence s spans
// [cu_seqlens[s], cu_seqlens[s+1])). Positions restart at 0 in every sequence; attention never crosses sequences.
#pragma once
#include <cstdint>
#include <vector>

namespace hlm {

struct TokenBatch {
  std::vector<int32_t> ids;
  std::vector<int64_t> cu_seqlens{0};

  int64_t total_tokens() const { return static_cast<int64_t>(ids.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
  // Appends one sequence.
  void add_sequence(const std::vector<int32_t>& sequence);
  // Position of every token inside its sequence [T].
  std::vector<int32_t> positions() const;
  // Checks cu_seqlens against ids (input error when inconsistent).
  void validate() const;
};

}  // namespace hlm
