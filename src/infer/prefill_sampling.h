// A long prefill's time from a sample of its chunks (bench_generate --search-context): a prefill of `chunks` chunks
// too long to run whole in one sitting is run at a few chunk indices only (the sequence advanced past the others
// without computing them, InferenceEngine::advance_uncomputed), each sampled chunk timed at its real position and
// context length; the whole prefill's time is then the sum over every chunk, the times between two sampled indices
// interpolated linearly. A chunk's time varies smoothly with its context (the attention's work grows with it), so the
// interpolation's error is the curvature's between neighbouring samples, small with a dozen or more (the chunk times
// of session 47 rose almost linearly). Whether a sampled chunk takes the time it takes inside a whole prefill is the
// bench's to check (bench_generate's sampled_check beside every whole run: 7-14 % under in session 47, over zero K/V
// rows in the skipped positions; skipped_rows.h).
#pragma once
#include <cstdint>
#include <vector>

namespace hlm {

// The chunk indices to run, ascending, in [0, chunks): with samples = 0 the last chunk alone; else 0 and 1 (the
// first chunk runs without a cache, the second is the first over one), `samples` indices spread evenly between 1 and
// chunks − 1, and the last two (the last may be a partial chunk; the one before it is full). Every chunk when there
// are no more than samples + 4. Input error for chunks < 1 or samples < 0.
std::vector<int64_t> prefill_sample_chunks(int64_t chunks, int samples);

// The whole prefill's seconds: the sum over chunks 0 … chunks − 1 of the sampled times, linearly interpolated by
// chunk index between neighbouring samples (`index` ascending and distinct, containing 0 and chunks − 1, one time
// each; the last chunk's time is its own, not interpolated). Input error otherwise.
double prefill_seconds_from_samples(int64_t chunks, const std::vector<int64_t>& index,
                                    const std::vector<double>& seconds);

}  // namespace hlm
