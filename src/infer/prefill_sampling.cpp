// A long prefill's time from a sample of its chunks (contract: prefill_sampling.h).
#include "infer/prefill_sampling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hlm {

std::vector<int64_t> prefill_sample_chunks(int64_t chunks, int samples) {
  HLM_CHECK_INPUT(chunks >= 1, "prefill sampling: ", chunks, " chunks (at least 1)");
  HLM_CHECK_INPUT(samples >= 0, "prefill sampling: ", samples, " samples (at least 0)");
  std::vector<int64_t> index;
  if (samples == 0) return {chunks - 1};
  if (chunks <= int64_t{samples} + 4) {
    for (int64_t c = 0; c < chunks; ++c) index.push_back(c);
    return index;
  }
  index = {0, 1, chunks - 2, chunks - 1};
  // `samples` points spread evenly over the open interval (1, chunks − 1), rounded to chunk indices.
  for (int i = 1; i <= samples; ++i)
    index.push_back(1 + std::llround(double(i) * double(chunks - 2) / double(samples + 1)));
  std::sort(index.begin(), index.end());
  index.erase(std::unique(index.begin(), index.end()), index.end());
  return index;
}

double prefill_seconds_from_samples(int64_t chunks, const std::vector<int64_t>& index,
                                    const std::vector<double>& seconds) {
  HLM_CHECK_INPUT(!index.empty() && index.size() == seconds.size(), "prefill sampling: ", index.size(),
                  " sampled chunks with ", seconds.size(), " times");
  HLM_CHECK_INPUT(index.front() == 0 && index.back() == chunks - 1, "prefill sampling: the samples must include the ",
                  "first and the last of ", chunks, " chunks");
  for (size_t i = 1; i < index.size(); ++i)
    HLM_CHECK_INPUT(index[i] > index[i - 1], "prefill sampling: chunk indices must ascend");
  double total = seconds.back();  // the last chunk, maybe partial: its own time
  for (size_t i = 0; i + 1 < index.size(); ++i) {
    // Chunks index[i] … index[i + 1] − 1: the line from (index[i], seconds[i]) to (index[i + 1], seconds[i + 1]).
    const auto a = double(index[i]), b = double(index[i + 1]);
    for (int64_t c = index[i]; c < index[i + 1]; ++c)
      total += seconds[i] + (seconds[i + 1] - seconds[i]) * (double(c) - a) / (b - a);
  }
  return total;
}

}  // namespace hlm
