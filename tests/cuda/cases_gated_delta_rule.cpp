// Gated delta rule: CUDA (src/ops/gated_delta_rule/gated_delta_rule.cu, the token recurrence with an fp32 state) vs
// the CPU references (gated_delta_rule_recurrent.cpp: the float instantiation as cpu32, the double one as ref64),
// forward and backward, f32. Cases: packed sequences of lengths 1, 17, 64, 65, 200 (state reset per sequence, lengths
// off the checkpoint segment of 32), empty sequences, Hv = Hk and Hv = 2Hk / 3Hk (GVA sums of dq, dk), dk = dv = 64,
// dk = 40 with dv = 72, dk = dv = 128 (the limit), tiny odd dims (7, 5); gates g ≈ 0 (decay ≈ 1), g ≈ −20 and the
// logsigmoid mix; β ≈ 2 with nearly parallel consecutive keys; with and without h0/dhT (hT and dh0 requested with
// them, left out without); and the backward run twice for bit-identical results (no atomics).
//
// Tolerances (fp32 rule, harness.h). Per (sequence, v-head) the test's own double recurrence records
//   SM = the largest ℓ2 norm of a state row (α M, and M after the write, h0 included) and
//   SD = the largest ℓ2 norm of a row of D = dL/dM (after the dO injection, dMa, and dhT), over the sequence.
// Chain: every token applies a map that is non-expansive on each state row (g ≤ 0, β‖k‖² ≤ 2), so rounding errors
// add up over the tokens of a sequence instead of growing. One token adds to a row, relative to SM (or SD): a dot
// product over dk (6√dk + 4, the probabilistic bound the matmul test uses), doubled by β ≤ 2, plus 8 roundings (α·M,
// v − p, β·(), the FMA write): c_step = 2·(6√dk + 4) + 8. These independent per-token roundings add like a random walk
// over the L tokens of the longest sequence (the same probabilistic argument across tokens): √L·c_step. The decay
// α = expf(g) (≤ 2 ulp = 4u) scales the whole row every token and could be biased, so it is added linearly: 4L.
// chain = √L·c_step + 4L bounds the state (or D) row error in units of u·SM (u·SD); each output adds its own final
// sum (c_dot(n) = 6√n + 4 for n terms):
//   o     = scale·M'q:              mag = scale·SM·‖q‖ (Cauchy–Schwarz)        k = chain + c_dot(dk) + 2
//   hT    = M:                      mag = SM                                   k = chain
//   dv    = β·(D k):                mag = β‖k‖·SD                              k = chain + c_dot(dk + dv) + 8
//   dq    = scale·Σ_a dO_a M'_a:    mag = scale·‖dO‖₁·SM                       (same k)
//   dk    = Σ_a D_a u_a + Ma_a dp_a: mag = Σ_a (|u_a|·SD + |dp_a|·SM) + 2·dv·β‖k‖·SM·SD  (u, dp carry M, D errors)
//   dβ    = Σ_a du_a (v_a − p_a):   mag = Σ_a (SD‖k‖·|v_a − p_a| + |du_a|·SM‖k‖)
//   dg    = Σ_a ⟨Ma_a, dMa_a⟩:       mag = Σ_a (SM·‖dMa_a‖ + ‖Ma_a‖·SD·(1 + β‖k‖²))   k = chain + c_dot(dk·dv) + 8
//   dh0   = D:                      mag = SD                                   k = chain
// dq and dk of a k-head add their v-heads' magnitudes and G more roundings. An fp32 emulation of the kernel on the
// CPU (same lane/warp sums and operation order; not committed) stayed within 2.8·u·mag on every case, at most 1.1%
// of these bounds (the largest share in the shortest chain, dk = 7); a logic error is O(1) relative. The [check]
// lines print the margin.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gdn_cases.h"
#include "harness.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gated_delta_rule_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

using namespace hlm::cuda_test::gdn;

struct Bounds {
  double o, state, grad, dg, qk;
};
Bounds bounds(const GdnCase& c) {
  int64_t L = 0;
  for (size_t i = 1; i < c.cu.size(); ++i) L = std::max(L, c.cu[i] - c.cu[i - 1]);
  const auto c_dot = [](double terms) { return 6.0 * std::sqrt(terms) + 4.0; };
  const double chain = std::sqrt(static_cast<double>(L)) * (2.0 * c_dot(static_cast<double>(c.dk)) + 8.0) +
                       4.0 * static_cast<double>(L);
  const double grad = chain + c_dot(static_cast<double>(c.dk + c.dv)) + 8.0;
  return {chain + c_dot(static_cast<double>(c.dk)) + 2.0, chain, grad,
          chain + c_dot(static_cast<double>(c.dk * c.dv)) + 8.0, grad + static_cast<double>(c.Hv / c.Hk)};
}

}  // namespace

TEST(GatedDeltaRuleCuda, ForwardF32) {
  HLM_REQUIRE_CUDA();
  for (const GdnCase& c : kCases) {
    const Bounds b = bounds(c);
    check_forward_case("", c, {b.o, b.state, b.qk, b.grad, b.dg}, 0,
                       [](const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& s, float scale,
                          void*, size_t) { gated_delta_rule_forward_cuda(out, in, s, scale, ctx().stream()); });
  }
}

TEST(GatedDeltaRuleCuda, BackwardF32) {
  HLM_REQUIRE_CUDA();
  for (const GdnCase& c : kCases) {
    const Bounds b = bounds(c);
    const GdnShape shape = make_problem(c).s;
    const int64_t n_seqs = static_cast<int64_t>(c.cu.size()) - 1;
    check_backward_case("", c, {b.o, b.state, b.qk, b.grad, b.dg},
                        gated_delta_rule_backward_cuda_workspace_bytes(shape, n_seqs),
                        [](const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                           const GdnInputs<float>& in, const GdnShape& s, float scale, void* ws, size_t bytes) {
                          gated_delta_rule_backward_cuda(grads, dout, in, s, scale, ws, bytes, ctx().stream());
                        });
  }
}
