// Gated delta rule, CHUNKED form on tensor cores (gated_delta_rule_chunked_fwd.cu / _bwd.cu) vs the CPU references
// (the recurrence in double as ref64, in float as cpu32), forward and backward. Cases: the fp32 test's list
// (gdn_cases.h: packed sequences of lengths 0, 1, 3, 17, 64, 65, 129, 200 — partial chunks, a chunk boundary at 64,
// empty sequences —, GVA 2× and 3×, dims 7/5, 40/72, 64, 128, every gate regime, with and without h0/dhT) plus long
// sequences (1000 and 700 + 400 tokens, dk = dv = 128) where the state crosses 11-16 chunks; and a rerun for
// bit-identical gradients (no atomics). KeptForwardScratch: a forward with keep_for_backward followed by a backward
// with forward_kept gives the very bits of the plain forward and the plain (rerunning) backward, and so does the
// kept forward held in a buffer of its own (gated_delta_rule_chunked_backward_kept_cuda, kept activations' path).
// The state pass's launch rule gives these small shapes the split-key form (a warp pair per 16 state rows); run the
// suite again with HLM_GDN_STATE_SPLIT=off for the one-warp-per-16-rows form (session 25 ran both, and `on`).
//
// Tolerance: the magnitudes of the fp32 test (gdn_cases.h: SM, SD and the per-output mag) with bf16 in place of fp32
// roundings. u_b = 2^-8 is bf16's unit roundoff; every GEMM operand is rounded once to bf16 (q, k, v, R, W, U, M0,
// dO, dU, D, X, Y ...) with fp32 accumulation. Inside one chunk the longest chain of rounded operands behind an
// output is about 8 (k → K Kᵀ → R → W → U → M → o; the backward adds D, dU, X/Y), each costing ≤ 2·u_b of the terms'
// magnitude: c_b = 16. Between chunks the state and D carry those errors forward; chunk by chunk they add like a
// random walk: bound k_b = c_b·(√n_chunks + 1) in units of u_b·mag, i.e. k = k_b·2^16 in the harness's fp32 units.
// A logic error (a wrong sign, a missing term, a wrong decay) is O(1) relative to mag and fails by far; the [check]
// lines print each margin.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gdn_cases.h"
#include "harness.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunked_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;
using namespace hlm::cuda_test::gdn;

namespace {

std::vector<GdnCase> chunked_cases() {
  std::vector<GdnCase> cases = kCases;
  cases.push_back({{0, 1000}, 2, 4, 128, 128, Regime::Mixed, true});
  cases.push_back({{0, 700, 1100}, 1, 1, 128, 128, Regime::DecayNearOne, true});
  return cases;
}

// k (harness units of u = 2^-24) for the case: c_b·(√n_chunks + 1) bf16 roundings.
double chunked_k(const GdnCase& c) {
  int64_t L = 0;
  for (size_t i = 1; i < c.cu.size(); ++i) L = std::max(L, c.cu[i] - c.cu[i - 1]);
  const double n_chunks = static_cast<double>((L + 63) / 64);
  constexpr double kBf16InF32Units = 65536.0;  // u_b / u = 2^-8 / 2^-24
  return 16.0 * (std::sqrt(n_chunks) + 1.0) * kBf16InF32Units;
}

// One k for every output: the chain above does not distinguish them.
GdnTolerances chunked_tolerances(const GdnCase& c) {
  const double k = chunked_k(c);
  return {k, k, k, k, k};
}

}  // namespace

TEST(GatedDeltaRuleChunkedCuda, ForwardBf16TensorCores) {
  HLM_REQUIRE_CUDA();
  for (const GdnCase& c : chunked_cases()) {
    const GdnShape shape = make_problem(c).s;
    const int64_t n_seqs = static_cast<int64_t>(c.cu.size()) - 1;
    check_forward_case("chunked ", c, chunked_tolerances(c),
                       gated_delta_rule_chunked_forward_cuda_workspace_bytes(shape, n_seqs),
                       [](const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& s, float scale,
                          void* ws, size_t bytes) {
                         gated_delta_rule_chunked_forward_cuda(out, in, s, scale, ws, bytes, ctx().stream());
                       });
  }
}

TEST(GatedDeltaRuleChunkedCuda, BackwardBf16TensorCores) {
  HLM_REQUIRE_CUDA();
  for (const GdnCase& c : chunked_cases()) {
    const GdnShape shape = make_problem(c).s;
    const int64_t n_seqs = static_cast<int64_t>(c.cu.size()) - 1;
    check_backward_case("chunked ", c, chunked_tolerances(c),
                        gated_delta_rule_chunked_backward_cuda_workspace_bytes(shape, n_seqs),
                        [](const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                           const GdnInputs<float>& in, const GdnShape& s, float scale, void* ws, size_t bytes) {
                          gated_delta_rule_chunked_backward_cuda(grads, dout, in, s, scale, ws, bytes,
                                                                 ctx().stream());
                        });
  }
}

// The recomputing layer's path: forward(keep_for_backward) then backward(forward_kept) on one workspace must give
// exactly the plain forward's o and the plain backward's gradients (the skipped rerun computes the same bits).
TEST(GatedDeltaRuleChunkedCuda, KeptForwardScratch) {
  HLM_REQUIRE_CUDA();
  const std::vector<GdnCase> all = chunked_cases();
  for (const GdnCase& c : all) {
    const Problem p = make_problem(c);
    const DeviceProblem dev(c, p);
    const GdnInputs<float> in = dev.inputs(c, p);
    const int64_t n_seqs = static_cast<int64_t>(c.cu.size()) - 1;
    const size_t fwd_bytes = gated_delta_rule_chunked_forward_cuda_workspace_bytes(p.s, n_seqs);
    const size_t bwd_bytes = gated_delta_rule_chunked_backward_cuda_workspace_bytes(p.s, n_seqs);
    const size_t nqk = p.q.size() * 4, nv = p.v.size() * 4, ng = p.g.size() * 4, ns = c.with_state ? p.state_size() * 4 : 0;
    struct Run {
      DeviceBuffer o, hT, dq, dk, dv, dg, dbeta, dh0, ws;
    };
    const auto make_run = [&](size_t ws_bytes) {
      return Run{DeviceBuffer(nv, "o"),   DeviceBuffer(ns, "hT"), DeviceBuffer(nqk, "dq"),
                 DeviceBuffer(nqk, "dk"), DeviceBuffer(nv, "dv"), DeviceBuffer(ng, "dg"),
                 DeviceBuffer(ng, "dbeta"), DeviceBuffer(ns, "dh0"), DeviceBuffer(ws_bytes, "workspace")};
    };
    const auto outs = [&](Run& r) {
      return GdnOutputs<float>{r.o.as<float>(), c.with_state ? r.hT.as<float>() : nullptr};
    };
    const auto grads = [&](Run& r) {
      return GdnInputGrads<float>{r.dq.as<float>(), r.dk.as<float>(),    r.dv.as<float>(),
                                  r.dg.as<float>(), r.dbeta.as<float>(), c.with_state ? r.dh0.as<float>() : nullptr};
    };
    const GdnOutputGrads<float> dout{dev.d_o.as<float>(), c.with_state ? dev.d_hT.as<float>() : nullptr};
    Run plain = make_run(bwd_bytes), kept = make_run(bwd_bytes);
    DeviceBuffer fwd_ws(fwd_bytes, "forward workspace");
    gated_delta_rule_chunked_forward_cuda(outs(plain), in, p.s, p.scale, fwd_ws.as<void>(), fwd_ws.bytes(),
                                          ctx().stream());
    gated_delta_rule_chunked_backward_cuda(grads(plain), dout, in, p.s, p.scale, plain.ws.as<void>(), plain.ws.bytes(),
                                           ctx().stream());
    gated_delta_rule_chunked_forward_cuda(outs(kept), in, p.s, p.scale, kept.ws.as<void>(), kept.ws.bytes(),
                                          ctx().stream(), /*keep_for_backward=*/true);
    gated_delta_rule_chunked_backward_cuda(grads(kept), dout, in, p.s, p.scale, kept.ws.as<void>(), kept.ws.bytes(),
                                           ctx().stream(), /*forward_kept=*/true);
    // Kept activations' path: the kept forward in a buffer of exactly kept_bytes, the backward's own scratch of
    // exactly backward_scratch_bytes apart (the buffers' guard bands catch an overrun), and the backward run twice from
    // the same kept buffer (it only reads it).
    const size_t kept_bytes = gated_delta_rule_chunked_kept_bytes(p.s, n_seqs);
    const size_t scratch_bytes = gated_delta_rule_chunked_backward_scratch_bytes(p.s, n_seqs);
    // The one workspace is the kept forward, then the backward's scratch from the next 256-byte boundary: apart, the
    // two need exactly that boundary's padding less.
    EXPECT_LT(kept_bytes, bwd_bytes);
    EXPECT_EQ(bwd_bytes, (kept_bytes + 255) / 256 * 256 + scratch_bytes);
    Run apart = make_run(scratch_bytes), again = make_run(scratch_bytes);
    DeviceBuffer kept_fwd(kept_bytes, "kept forward");
    gated_delta_rule_chunked_forward_cuda(outs(apart), in, p.s, p.scale, kept_fwd.as<void>(), kept_fwd.bytes(),
                                          ctx().stream(), /*keep_for_backward=*/true);
    for (Run* r : {&apart, &again})
      gated_delta_rule_chunked_backward_kept_cuda(grads(*r), dout, in, p.s, p.scale, kept_fwd.as<void>(),
                                                  kept_fwd.bytes(), r->ws.as<void>(), r->ws.bytes(), ctx().stream());
    for (Run* r : {&kept, &apart, &again}) {
      const std::string label = (r == &kept ? "kept " : r == &apart ? "kept apart " : "kept apart, again ") + name(c, "");
      if (r != &again) {
        EXPECT_TRUE(check_exact(label + "o", r->o.download<float>(), plain.o.download<float>()));
        if (c.with_state) {
          EXPECT_TRUE(check_exact(label + "hT", r->hT.download<float>(), plain.hT.download<float>()));
        }
      }
      if (c.with_state) {
        EXPECT_TRUE(check_exact(label + "dh0", r->dh0.download<float>(), plain.dh0.download<float>()));
      }
      EXPECT_TRUE(check_exact(label + "dq", r->dq.download<float>(), plain.dq.download<float>()));
      EXPECT_TRUE(check_exact(label + "dk", r->dk.download<float>(), plain.dk.download<float>()));
      EXPECT_TRUE(check_exact(label + "dv", r->dv.download<float>(), plain.dv.download<float>()));
      EXPECT_TRUE(check_exact(label + "dg", r->dg.download<float>(), plain.dg.download<float>()));
      EXPECT_TRUE(check_exact(label + "dbeta", r->dbeta.download<float>(), plain.dbeta.download<float>()));
      EXPECT_TRUE(buffers_ok({&r->o, &r->hT, &r->dq, &r->dk, &r->dv, &r->dg, &r->dbeta, &r->dh0, &r->ws, &kept_fwd},
                             {&dev.q, &dev.k, &dev.v, &dev.g, &dev.beta, &dev.h0, &dev.d_o, &dev.d_hT, &dev.cu}))
          << label;
    }
  }
}
