// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011): the value at (seed, stream, index) is a pure
// function, so results do not depend on thread count or call order. `stream` separates independent uses
// (e.g. one per parameter tensor); `index` is the element position.
#pragma once
#include <array>
#include <cstdint>

namespace hlm {

// Four 32-bit random words for counter (stream, index) under key `seed`.
std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index);

// Uniform in [0, 1) with 24 random bits (exactly representable in f32).
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal (Box-Muller on two words of the same counter).
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Fills dst[0..n) in parallel; element i uses counter (stream, i).
void rng_fill_uniform(float* dst, uint64_t n, float low, float high, uint64_t seed, uint64_t stream);
void rng_fill_normal(float* dst, uint64_t n, float mean, float stddev, uint64_t seed, uint64_t stream);

// Stable 64-bit stream id from a name (FNV-1a), e.g. a parameter's HF name.
uint64_t rng_stream_id(const char* name);

}  // namespace hlm
