// What InferenceEngine::advance_uncomputed leaves in the K/V rows of the positions it skips, and the rows it writes
// there for timing. Measurements only (bench_generate --search-context).
//   kAsTheyAre: whatever the pool held (zeros in a fresh pool, an earlier sequence's rows in a reused block);
//   kRandom:    every attention layer's skipped K and V rows written with skipped_row_values, values of a real
//               cache's order (uniform in [−1, 1)). Why: over a fresh pool's zero rows the sampled chunks of a
//               prefill summed 7 % (Qwen3-4B shape, 38 % of its rows skipped) and 14 % (its hybrid, 82 % skipped)
//               under the whole prefill (session 47, H100; not the cuDNN plan builds, measured at ~1 %); the likely
//               cause is the tensor cores' data-dependent power, and with it the clock under the power limit. Not
//               yet measured with this fill.
#pragma once
#include <cstdint>
#include <vector>

namespace hlm {

enum class SkippedRows { kAsTheyAre, kRandom };

// Rows written under kRandom: the skipped positions take these rows in turn, repeating every kSkippedRowsBlock.
constexpr int64_t kSkippedRowsBlock = 4096;

// kSkippedRowsBlock rows of row_elements values uniform in [−1, 1), a fixed counter hash of (stream, index): stream 0
// for the K rows, 1 for the V rows. The same on every engine (the CUDA engine rounds them to its cache's type).
std::vector<float> skipped_row_values(int64_t row_elements, uint64_t stream);

}  // namespace hlm
