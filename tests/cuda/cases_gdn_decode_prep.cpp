// Fused GDN decode preparation (src/ops/gdn_decode_prep) against the six separate launches it replaces (three
// causal_conv1d_decode_cuda with SiLU, two l2norm_forward_cuda, gdn_gate_forward_cuda) on the same inputs: q', k', v',
// g, β and the three advanced conv states bit for bit (the contract: the same per-element operations, the l2norm warp
// order). Cases: GQA and equal head counts, key dims 128 / 64 (vector order) and 37 (scalar order), value dims
// unequal to the key dims, conv kernels 4 and 2 (and 6: the 8-slot window), 1 / 3 / 17 sequences, normal, large and
// special fills (NaN/Inf stay in their rows), neg_eigval on and off; plus the in-place form the engine uses (q', k'
// written over the projections).
#include <string>
#include <vector>

#include "harness.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/gdn_decode_prep/gdn_decode_prep_cuda.h"
#include "ops/gdn_gate/gdn_gate_cuda.h"
#include "ops/l2norm/l2norm_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct PrepCase {
  int64_t N, Hk, Hv, dk, dv, K;
  bool neg_eigval;
  Fill fill;
};

std::string name(const PrepCase& c, const std::string& what) {
  return "gdn_decode_prep." + what + " N=" + std::to_string(c.N) + " Hk=" + std::to_string(c.Hk) +
         " Hv=" + std::to_string(c.Hv) + " dk=" + std::to_string(c.dk) + " dv=" + std::to_string(c.dv) +
         " K=" + std::to_string(c.K) + (c.neg_eigval ? " neg" : "") + " " + fill_name(c.fill);
}

void run_case(const PrepCase& c, bool in_place) {
  const int64_t Ck = c.Hk * c.dk, Cv = c.Hv * c.dv, Km1 = c.K - 1;
  uint64_t stream = 1;
  const auto values = [&](int64_t n, float scale = 1.0f) {
    return make_values(static_cast<size_t>(n), c.fill, stream++, scale);
  };
  const std::vector<float> q = values(c.N * Ck), k = values(c.N * Ck), v = values(c.N * Cv), a = values(c.N * c.Hv),
                           b = values(c.N * c.Hv), qw = values(Ck * c.K, 0.5f), kw = values(Ck * c.K, 0.5f),
                           vw = values(Cv * c.K, 0.5f), A_log = values(c.Hv, 0.25f), dt = values(c.Hv, 0.25f),
                           qs = values(c.N * Ck * Km1), ks = values(c.N * Ck * Km1), vs = values(c.N * Cv * Km1);
  const cudaStream_t st = ctx().stream();
  // The separate launches (the engine's decode path before the fusion).
  DeviceBuffer q1 = DeviceBuffer::from(q, "q sep"), k1 = DeviceBuffer::from(k, "k sep"),
               v1 = DeviceBuffer::from(v, "v"), a1 = DeviceBuffer::from(a, "a"), b1 = DeviceBuffer::from(b, "b"),
               qw1 = DeviceBuffer::from(qw, "q_conv"),
               kw1 = DeviceBuffer::from(kw, "k_conv"), vw1 = DeviceBuffer::from(vw, "v_conv"),
               A1 = DeviceBuffer::from(A_log, "A_log"), dt1 = DeviceBuffer::from(dt, "dt_bias"),
               qs1 = DeviceBuffer::from(qs, "q_state sep"), ks1 = DeviceBuffer::from(ks, "k_state sep"),
               vs1 = DeviceBuffer::from(vs, "v_state sep"), qc1(c.N * Ck * 4, "qc"), kc1(c.N * Ck * 4, "kc"),
               vc1(c.N * Cv * 4, "vc sep"), g1(c.N * c.Hv * 4, "g sep"), beta1(c.N * c.Hv * 4, "beta sep");
  const CausalConv1dCudaParams sk{c.N, Ck, c.K, c.N, true}, sv{c.N, Cv, c.K, c.N, true};
  float* qs1p = Km1 > 0 ? qs1.as<float>() : nullptr;
  float* ks1p = Km1 > 0 ? ks1.as<float>() : nullptr;
  float* vs1p = Km1 > 0 ? vs1.as<float>() : nullptr;
  causal_conv1d_decode_cuda(qc1.as<float>(), qs1p, q1.as<float>(), qw1.as<float>(), sk, st);
  causal_conv1d_decode_cuda(kc1.as<float>(), ks1p, k1.as<float>(), kw1.as<float>(), sk, st);
  causal_conv1d_decode_cuda(vc1.as<float>(), vs1p, v1.as<float>(), vw1.as<float>(), sv, st);
  const L2normCudaParams l2{c.N * c.Hk, c.dk};
  l2norm_forward_cuda(q1.as<float>(), qc1.as<float>(), l2, st);  // into the projections' buffers, as the engine did
  l2norm_forward_cuda(k1.as<float>(), kc1.as<float>(), l2, st);
  gdn_gate_forward_cuda(g1.as<float>(), beta1.as<float>(), a1.as<float>(), b1.as<float>(), A1.as<float>(),
                        dt1.as<float>(), {c.N, c.Hv, c.neg_eigval}, st);
  // The fused launch.
  DeviceBuffer q2 = DeviceBuffer::from(q, "q fused"), k2 = DeviceBuffer::from(k, "k fused"),
               qs2 = DeviceBuffer::from(qs, "q_state fused"), ks2 = DeviceBuffer::from(ks, "k_state fused"),
               vs2 = DeviceBuffer::from(vs, "v_state fused"), qo(c.N * Ck * 4, "q out"), ko(c.N * Ck * 4, "k out"),
               vc2(c.N * Cv * 4, "vc fused"), g2(c.N * c.Hv * 4, "g fused"), beta2(c.N * c.Hv * 4, "beta fused");
  GdnDecodePrepCudaArgs pa;
  pa.q = q2.as<float>();
  pa.k = k2.as<float>();
  pa.v = v1.as<float>();
  pa.a = a1.as<float>();
  pa.b = b1.as<float>();
  pa.q_conv = qw1.as<float>();
  pa.k_conv = kw1.as<float>();
  pa.v_conv = vw1.as<float>();
  pa.A_log = A1.as<float>();
  pa.dt_bias = dt1.as<float>();
  pa.q_state = qs2.as<float>();
  pa.k_state = ks2.as<float>();
  pa.v_state = vs2.as<float>();
  pa.q_out = in_place ? q2.as<float>() : qo.as<float>();
  pa.k_out = in_place ? k2.as<float>() : ko.as<float>();
  pa.v_out = vc2.as<float>();
  pa.g = g2.as<float>();
  pa.beta = beta2.as<float>();
  const GdnDecodePrepCudaShape shape{c.N, c.Hk, c.Hv, c.dk, c.dv, c.K, c.neg_eigval};
  ASSERT_TRUE(gdn_decode_prep_cuda_supported(shape)) << name(c, "supported");
  gdn_decode_prep_cuda(pa, shape, st);
  const std::string form = in_place ? "in place " : "";
  EXPECT_TRUE(check_exact(name(c, form + "q'"), (in_place ? q2 : qo).download<float>(), q1.download<float>()));
  EXPECT_TRUE(check_exact(name(c, form + "k'"), (in_place ? k2 : ko).download<float>(), k1.download<float>()));
  EXPECT_TRUE(check_exact(name(c, form + "v'"), vc2.download<float>(), vc1.download<float>()));
  EXPECT_TRUE(check_exact(name(c, form + "g"), g2.download<float>(), g1.download<float>()));
  EXPECT_TRUE(check_exact(name(c, form + "beta"), beta2.download<float>(), beta1.download<float>()));
  if (Km1 > 0) {
    EXPECT_TRUE(check_exact(name(c, form + "q state"), qs2.download<float>(), qs1.download<float>()));
    EXPECT_TRUE(check_exact(name(c, form + "k state"), ks2.download<float>(), ks1.download<float>()));
    EXPECT_TRUE(check_exact(name(c, form + "v state"), vs2.download<float>(), vs1.download<float>()));
  }
  EXPECT_TRUE(buffers_ok({&q2, &k2, &qs2, &ks2, &vs2, &qo, &ko, &vc2, &g2, &beta2},
                         {&v1, &a1, &b1, &qw1, &kw1, &vw1, &A1, &dt1}))
      << name(c, form + "guards");
}

}  // namespace

TEST(GdnDecodePrepCuda, EqualsTheSeparateLaunchesBitForBit) {
  HLM_REQUIRE_CUDA();
  const std::vector<PrepCase> cases = {
      {1, 32, 32, 128, 128, 4, false, Fill::Normal},  // olmo_hybrid_7b's layer at batch 1
      {3, 16, 32, 128, 128, 4, true, Fill::Normal},   // GVA (qwen3_4b_hybrid), β = 2·sigmoid
      {17, 4, 8, 64, 96, 4, false, Fill::Large},      // dv ≠ dk
      {3, 2, 2, 37, 40, 2, false, Fill::Normal},      // scalar l2norm order (37 % 4 ≠ 0)
      {3, 3, 6, 128, 64, 6, true, Fill::Special},     // the 8-slot conv window; NaN/Inf
      {1, 2, 4, 1024, 16, 4, false, Fill::Denormal},  // the longest warp-path row
      {2, 1, 1, 16, 16, 1, false, Fill::Zeros},       // K = 1: no state
  };
  for (const PrepCase& c : cases) {
    run_case(c, false);
    run_case(c, true);
  }
}

TEST(GdnDecodePrepCuda, RefusesWhatItDoesNotCover) {
  EXPECT_FALSE(gdn_decode_prep_cuda_supported({1, 1, 1, 1025, 64, 4, false}));  // past the warp-path norm
  EXPECT_FALSE(gdn_decode_prep_cuda_supported({1, 1, 1, 128, 64, 9, false}));   // conv window > 8
  EXPECT_TRUE(gdn_decode_prep_cuda_supported({0, 1, 1, 128, 64, 4, false}));
}
