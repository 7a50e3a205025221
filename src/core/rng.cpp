#include "core/rng.h"

#include <cmath>

namespace hlm {

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

static float bits_to_unit(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return bits_to_unit(philox4x32(seed, stream, index)[0]);
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto w = philox4x32(seed, stream, index);
  const double u1 = (static_cast<double>(w[0]) + 1.0) / 4294967297.0;  // (0, 1): log is finite
  const double u2 = static_cast<double>(w[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void rng_fill_uniform(float* dst, uint64_t n, float low, float high, uint64_t seed, uint64_t stream) {
#pragma omp parallel for if (n > 65536)
  for (uint64_t i = 0; i < n; ++i) dst[i] = low + (high - low) * rng_uniform(seed, stream, i);
}

void rng_fill_normal(float* dst, uint64_t n, float mean, float stddev, uint64_t seed, uint64_t stream) {
#pragma omp parallel for if (n > 65536)
  for (uint64_t i = 0; i < n; ++i) dst[i] = mean + stddev * rng_normal(seed, stream, i);
}

uint64_t rng_stream_id(const char* name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<uint8_t>(*p)) * 0x100000001b3ull;
  return h;
}

}  // namespace hlm
