// The rows advance_uncomputed writes for timing (contract: skipped_rows.h).
#include "infer/skipped_rows.h"

#include "core/error.h"

namespace hlm {

std::vector<float> skipped_row_values(int64_t row_elements, uint64_t stream) {
  HLM_CHECK(row_elements > 0, "skipped_row_values: ", row_elements, " elements per row");
  std::vector<float> values(static_cast<size_t>(kSkippedRowsBlock * row_elements));
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t x = (stream << 56) ^ static_cast<uint64_t>(i);  // splitmix64 of the counter
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    values[i] = static_cast<float>(static_cast<double>(x >> 40) * 0x1p-23 - 1.0);  // 24 bits: [−1, 1)
  }
  return values;
}

}  // namespace hlm
