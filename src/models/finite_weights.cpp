// The finite-weights check of Model::load (finite_weights.h).
#include "models/finite_weights.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace hlm {
namespace {

std::atomic<bool> g_allow{false};

}  // namespace

void set_allow_nonfinite_weights(bool allow) { g_allow = allow; }
bool allow_nonfinite_weights() { return g_allow; }

void check_finite_weights(const Tensor& value, const std::string& source, const std::string& name) {
  HLM_CHECK(value.dtype() == DType::F32, "check_finite_weights: ", name, " is not f32");
  const Tensor t = value.contiguous();
  const float* p = t.f32();
  const int64_t n = t.numel();
  // Exponent bits all ones <=> NaN or ±inf; the first such element is found by a parallel min over indices.
  int64_t first = n;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, 4);
    if ((bits & 0x7F800000u) == 0x7F800000u && i < first) first = i;
  }
  if (first == n) return;
  const float v = p[first];
  const char* kind = std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf");
  const std::string what =
      str_cat(source, ": tensor '", name, "' holds ", kind, " (first at element ", first, " of ", n, ")");
  if (allow_nonfinite_weights()) {
    std::fprintf(stderr, "hybridlm: warning: %s; loaded anyway (--allow-nonfinite-weights)\n", what.c_str());
    return;
  }
  throw_input_error(what, "; the weights are damaged (pass --allow-nonfinite-weights to load them anyway)");
}

}  // namespace hlm
