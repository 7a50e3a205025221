#include "layers/token_batch.h"

#include "core/error.h"

namespace hlm {

void TokenBatch::add_sequence(const std::vector<int32_t>& sequence) {
  ids.insert(ids.end(), sequence.begin(), sequence.end());
  cu_seqlens.push_back(static_cast<int64_t>(ids.size()));
}

std::vector<int32_t> TokenBatch::positions() const {
  std::vector<int32_t> pos(ids.size());
  for (int64_t s = 0; s < num_sequences(); ++s)
    for (int64_t t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) pos[t] = static_cast<int32_t>(t - cu_seqlens[s]);
  return pos;
}

void TokenBatch::validate() const {
  HLM_CHECK_INPUT(cu_seqlens.size() >= 2, "token batch holds no sequence");
  HLM_CHECK_INPUT(cu_seqlens.front() == 0 && cu_seqlens.back() == total_tokens(),
                  "cu_seqlens must start at 0 and end at the token count ", total_tokens());
  for (size_t i = 1; i < cu_seqlens.size(); ++i)
    HLM_CHECK_INPUT(cu_seqlens[i] >= cu_seqlens[i - 1], "cu_seqlens must be non-decreasing");
}

}  // namespace hlm
