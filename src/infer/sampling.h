// Next-token sampling from one row of logits. Greedy (argmax, the lowest id on ties) when temperature is 0 — the
// default — or when top_k is 1. Otherwise, in HF transformers' order: logits / temperature, keep the top_k largest
// (0 = all), keep the smallest set of most likely tokens whose probability sums to at least top_p (always at least
// one; 1 = all), renormalise and draw. The draw is the counter-based uniform rng_uniform(seed, stream, index)
// (core/rng.h): callers pass the request's index as `stream` and the token's index in its generation as `index`, so
// a request's tokens do not depend on what else is in the batch, on thread count or on call order.
// Probabilities are computed in double (softmax with the max subtracted); candidates are ordered by logit, ties by id.
#pragma once
#include <cstdint>
#include <span>

namespace hlm {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // in (0, 1]
  uint64_t seed = 0;
};

// Input error naming the option when a parameter is out of range (temperature < 0 or not finite, top_k < 0,
// top_p outside (0, 1]).
void sampling_check(const SamplingParams& params);

bool sampling_is_greedy(const SamplingParams& params);

// The chosen token id in [0, logits.size()).
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t stream, uint64_t index);

}  // namespace hlm
