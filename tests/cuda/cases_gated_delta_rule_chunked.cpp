// Gated delta rule, CHUNKED form on tensor cores (gated_delta_rule_chunked_fwd.cu / _bwd.cu) vs the CPU references
// (the recurrence in double as ref64, in float as cpu32), forward and backward. Cases: the fp32 test's list
// (gdn_cases.h: packed sequences of lengths 0, 1, 3, 17, 64, 65, 129, 200 — partial chunks, a chunk boundary at 64,
// empty sequences —, GVA 2× and 3×, dims 7/5, 40/72, 64, 128, every gate regime, with and without h0/dhT) plus long
// sequences (1000 and 700 + 400 tokens, dk = dv = 128) where the state crosses 11-16 chunks; and a rerun for
// bit-identical gradients (no atomics).
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

std::string chunked_name(const GdnCase& c, const char* what) { return "chunked " + name(c, what); }

}  // namespace

TEST(GatedDeltaRuleChunkedCuda, ForwardBf16TensorCores) {
  HLM_REQUIRE_CUDA();
  for (const GdnCase& c : chunked_cases()) {
    const Problem p = make_problem(c);
    const Result<float> cpu = run_reference<float>(c, p);
    const Result<double> ref = run_reference<double>(c, p);
    const Mags mag = magnitudes(c, p);
    const double k = chunked_k(c);

    const DeviceProblem dev(c, p);
    DeviceBuffer o(p.v.size() * 4, "o"), hT(c.with_state ? p.state_size() * 4 : 0, "hT");
    DeviceBuffer ws(gated_delta_rule_chunked_forward_cuda_workspace_bytes(p.s, p.N), "workspace");
    gated_delta_rule_chunked_forward_cuda({o.as<float>(), c.with_state ? hT.as<float>() : nullptr},
                                          dev.inputs(c, p), p.s, p.scale, ws.as<void>(), ws.bytes(),
                                          ctx().stream());
    EXPECT_TRUE(check_f32(chunked_name(c, "fwd o"), o.download<float>(), cpu.o, ref.o, mag.o, {k}));
    if (c.with_state) {
      EXPECT_TRUE(check_f32(chunked_name(c, "fwd hT"), hT.download<float>(), cpu.hT, ref.hT, mag.hT, {k}));
    }
    EXPECT_TRUE(buffers_ok({&o, &hT, &ws}, {&dev.q, &dev.k, &dev.v, &dev.g, &dev.beta, &dev.h0, &dev.cu}))
        << chunked_name(c, "fwd");
  }
}

TEST(GatedDeltaRuleChunkedCuda, BackwardBf16TensorCores) {
  HLM_REQUIRE_CUDA();
  for (const GdnCase& c : chunked_cases()) {
    const Problem p = make_problem(c);
    const Result<float> cpu = run_reference<float>(c, p);
    const Result<double> ref = run_reference<double>(c, p);
    const Mags mag = magnitudes(c, p);
    const double k = chunked_k(c);

    const DeviceProblem dev(c, p);
    const size_t nqk = p.q.size() * 4, nv = p.v.size() * 4, ng = p.g.size() * 4;
    DeviceBuffer dq(nqk, "dq"), dk(nqk, "dk"), dv(nv, "dv"), dg(ng, "dg"), dbeta(ng, "dbeta"),
        dh0(c.with_state ? p.state_size() * 4 : 0, "dh0");
    DeviceBuffer ws(gated_delta_rule_chunked_backward_cuda_workspace_bytes(p.s, p.N), "workspace");
    const GdnInputGrads<float> grads{dq.as<float>(), dk.as<float>(),    dv.as<float>(),
                                     dg.as<float>(), dbeta.as<float>(), c.with_state ? dh0.as<float>() : nullptr};
    const GdnOutputGrads<float> dout{dev.d_o.as<float>(), c.with_state ? dev.d_hT.as<float>() : nullptr};
    gated_delta_rule_chunked_backward_cuda(grads, dout, dev.inputs(c, p), p.s, p.scale, ws.as<void>(), ws.bytes(),
                                           ctx().stream());
    const std::vector<float> dq_gpu = dq.download<float>(), dk_gpu = dk.download<float>(),
                             dg_gpu = dg.download<float>();
    EXPECT_TRUE(check_f32(chunked_name(c, "bwd dq"), dq_gpu, cpu.dq, ref.dq, mag.dq, {k}));
    EXPECT_TRUE(check_f32(chunked_name(c, "bwd dk"), dk_gpu, cpu.dk, ref.dk, mag.dk, {k}));
    EXPECT_TRUE(check_f32(chunked_name(c, "bwd dv"), dv.download<float>(), cpu.dv, ref.dv, mag.dv, {k}));
    EXPECT_TRUE(
        check_f32(chunked_name(c, "bwd dbeta"), dbeta.download<float>(), cpu.dbeta, ref.dbeta, mag.dbeta, {k}));
    EXPECT_TRUE(check_f32(chunked_name(c, "bwd dg"), dg_gpu, cpu.dg, ref.dg, mag.dg, {k}));
    if (c.with_state) {
      EXPECT_TRUE(check_f32(chunked_name(c, "bwd dh0"), dh0.download<float>(), cpu.dh0, ref.dh0, mag.dh0, {k}));
    }
    EXPECT_TRUE(buffers_ok({&dq, &dk, &dv, &dg, &dbeta, &dh0, &ws},
                           {&dev.q, &dev.k, &dev.v, &dev.g, &dev.beta, &dev.h0, &dev.d_o, &dev.d_hT, &dev.cu}))
        << chunked_name(c, "bwd");

    gated_delta_rule_chunked_backward_cuda(grads, dout, dev.inputs(c, p), p.s, p.scale, ws.as<void>(), ws.bytes(),
                                           ctx().stream());
    EXPECT_TRUE(check_exact(chunked_name(c, "bwd dq rerun"), dq.download<float>(), dq_gpu));
    EXPECT_TRUE(check_exact(chunked_name(c, "bwd dk rerun"), dk.download<float>(), dk_gpu));
    EXPECT_TRUE(check_exact(chunked_name(c, "bwd dg rerun"), dg.download<float>(), dg_gpu));
  }
}
