// Gated delta rule decode step on the CPU (contract: gated_delta_rule_decode.h): one token per sequence through the
// token recurrence of gated_delta_rule_recurrent.cpp, with h0 = the state and hT written to a scratch copy that then
// replaces the state.
#include "ops/gated_delta_rule/gated_delta_rule_decode.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm {

template <typename T>
void gated_delta_rule_decode(T* o, T* state, const GdnDecodeInputs<T>& in, const GdnDecodeShape& shape, T scale) {
  HLM_CHECK(shape.batch >= 0, "gated_delta_rule_decode: negative batch ", shape.batch);
  if (shape.batch == 0) return;
  HLM_CHECK(o != nullptr && state != nullptr, "gated_delta_rule_decode: missing o or state");
  // One-token sequences: cu_seqlens = 0, 1, ..., B (the recurrent forward checks the rest of the contract).
  std::vector<int64_t> cu(static_cast<size_t>(shape.batch + 1));
  std::iota(cu.begin(), cu.end(), int64_t{0});
  std::vector<T> next(static_cast<size_t>(shape.state_elements()));
  const GdnInputs<T> prefill{in.q, in.k, in.v, in.g, in.beta, state, cu.data(), shape.batch};
  gated_delta_rule_recurrent_forward<T>({o, next.data()}, prefill, shape.as_prefill(), scale);
  std::copy(next.begin(), next.end(), state);
}

template void gated_delta_rule_decode<float>(float*, float*, const GdnDecodeInputs<float>&, const GdnDecodeShape&,
                                             float);
template void gated_delta_rule_decode<double>(double*, double*, const GdnDecodeInputs<double>&, const GdnDecodeShape&,
                                              double);

}  // namespace hlm
