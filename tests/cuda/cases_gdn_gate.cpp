// GDN gate: CUDA (src/ops/gdn_gate/gdn_gate.cu) vs the CPU reference (gdn_gate_ref.cpp), forward and backward, f32.
// Cases: odd token counts (1, 65, 127, 1000, 4099), several heads, β scale 1 and 2 (neg_eigval), head 0 with
// dt_bias = 25 so a + dt_bias crosses the softplus threshold 20, and every fill of a and b (large magnitudes: softplus
// is the identity or 0 and σ saturates; ±0; subnormals; NaN/±Inf).
//
// Tolerances (fp32 rule, harness.h). expf ≤ 2 ulp (≤ 4u relative), log1pf ≤ 1 ulp (2u), divisions and products
// correctly rounded (u each); a + dt_bias is the same fp32 sum as on the CPU.
//   σ(x) = 1/(1 + e^-x): 4u (expf, damped by e/(1+e) ≤ 1) + u (sum) + u (division) = 6u.
//   softplus(u) = log1p(e^u): 4u (expf; log1p's condition number x/((1+x)log1p(x)) ≤ 1) + 2u = 6u.
//   g = −e^{A_log}·softplus: 4u + 6u + u = 11u: k = 12, mag = |g|.   β = scale·σ(b): 6u (×2 is exact): k = 7.
//   da = dg·(−e^{A_log})·σ(u): 4u + 6u + 2u: k = 13.   db = dβ·scale·σ(b)·σ(−b): 6u + 6u + 2u: k = 15 (mag = |value|).
//   ddt_bias = Σ_t da, dA_log = Σ_t dg·g: terms carry ≤ 12u, the column sum P = column_sum_path_length roundings:
//       k = P + 13, mag = Σ_t |term|.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/column_sum.h"
#include "harness.h"
#include "ops/gdn_gate/gdn_gate.h"
#include "ops/gdn_gate/gdn_gate_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct GateCase {
  int64_t T, H;
  bool neg_eigval;
  Fill fill;  // of a and b
};

const std::vector<GateCase> kCases = {
    {1, 1, false, Fill::Normal},    {65, 4, false, Fill::Normal},   {1000, 16, true, Fill::Normal},
    {4099, 3, false, Fill::Normal}, {127, 3, true, Fill::Large},    {65, 2, false, Fill::Zeros},
    {127, 5, false, Fill::Denormal}, {127, 4, true, Fill::Special}, {1, 1, false, Fill::Special},
};

std::string name(const GateCase& c, const char* what) {
  return std::string("gdn_gate.") + what + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
         (c.neg_eigval ? " neg_eigval " : " ") + fill_name(c.fill);
}

struct Inputs {
  std::vector<float> a, b, A_log, dt_bias, dg, dbeta;
};
Inputs make_inputs(const GateCase& c) {
  const size_t n = static_cast<size_t>(c.T * c.H), h = static_cast<size_t>(c.H);
  Inputs in{make_values(n, c.fill, 21, 3.0f), make_values(n, c.fill, 22, 3.0f), make_values(h, Fill::Normal, 23),
            make_values(h, Fill::Normal, 24),  make_values(n, Fill::Normal, 25), make_values(n, Fill::Normal, 26)};
  if (c.H > 1) in.dt_bias[0] = 25.0f;  // head 0 mostly above the softplus threshold
  return in;
}

std::vector<double> column_abs_sum(const std::vector<double>& terms, int64_t T, int64_t H) {
  std::vector<double> out(static_cast<size_t>(H), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) out[static_cast<size_t>(h)] += std::abs(terms[static_cast<size_t>(t * H + h)]);
  return out;
}

}  // namespace

TEST(GdnGateCuda, ForwardF32) {
  HLM_REQUIRE_CUDA();
  for (const GateCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const size_t n = static_cast<size_t>(c.T * c.H);
    std::vector<float> g32(n), b32(n);
    gdn_gate_forward<float>(g32.data(), b32.data(), in.a.data(), in.b.data(), in.A_log.data(), in.dt_bias.data(),
                            c.T, c.H, c.neg_eigval);
    const auto a64 = to_f64(in.a), bb64 = to_f64(in.b), A64 = to_f64(in.A_log), dt64 = to_f64(in.dt_bias);
    std::vector<double> g64(n), beta64(n);
    gdn_gate_forward<double>(g64.data(), beta64.data(), a64.data(), bb64.data(), A64.data(), dt64.data(), c.T, c.H,
                             c.neg_eigval);
    // The double reference rounds a + dt_bias in double; the float path (HF, the kernel) in fp32. Recompute g64 from
    // the fp32 sum so ref64 describes the same function (gdn_gate.h: "rounded to T first").
    for (size_t i = 0; i < n; ++i) {
      const double u = static_cast<double>(in.a[i] + in.dt_bias[i % static_cast<size_t>(c.H)]);
      g64[i] = -std::exp(A64[i % static_cast<size_t>(c.H)]) * (u > kSoftplusThreshold ? u : std::log1p(std::exp(u)));
    }

    DeviceBuffer a = DeviceBuffer::from(in.a, "a"), b = DeviceBuffer::from(in.b, "b"),
                 A = DeviceBuffer::from(in.A_log, "A_log"), dt = DeviceBuffer::from(in.dt_bias, "dt_bias"),
                 g(n * 4, "g"), beta(n * 4, "beta");
    gdn_gate_forward_cuda(g.as<float>(), beta.as<float>(), a.as<float>(), b.as<float>(), A.as<float>(), dt.as<float>(),
                          {c.T, c.H, c.neg_eigval}, ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "fwd g"), g.download<float>(), g32, g64, abs_of(g64), {12}));
    EXPECT_TRUE(check_f32(name(c, "fwd beta"), beta.download<float>(), b32, beta64, abs_of(beta64), {7}));
    EXPECT_TRUE(buffers_ok({&g, &beta}, {&a, &b, &A, &dt})) << name(c, "fwd");
  }
}

TEST(GdnGateCuda, BackwardF32) {
  HLM_REQUIRE_CUDA();
  for (const GateCase& c : kCases) {
    const Inputs in = make_inputs(c);
    const size_t n = static_cast<size_t>(c.T * c.H), nh = static_cast<size_t>(c.H);
    std::vector<float> da32(n), db32(n), dA32(nh), ddt32(nh);
    gdn_gate_backward<float>(da32.data(), db32.data(), dA32.data(), ddt32.data(), in.dg.data(), in.dbeta.data(),
                             in.a.data(), in.b.data(), in.A_log.data(), in.dt_bias.data(), c.T, c.H, c.neg_eigval);
    // ref64 on the fp32 sum a + dt_bias (see ForwardF32): the double reference run on u = fl(a + dt) with dt = 0.
    std::vector<double> u64(n);
    for (size_t i = 0; i < n; ++i) u64[i] = static_cast<double>(in.a[i] + in.dt_bias[i % nh]);
    const std::vector<double> zero_dt(nh, 0.0), A64 = to_f64(in.A_log), bb64 = to_f64(in.b), dg64 = to_f64(in.dg),
                              dbeta64 = to_f64(in.dbeta);
    std::vector<double> da64(n), db64(n), dA64(nh), ddt64(nh), g64(n), beta64(n);
    gdn_gate_backward<double>(da64.data(), db64.data(), dA64.data(), ddt64.data(), dg64.data(), dbeta64.data(),
                              u64.data(), bb64.data(), A64.data(), zero_dt.data(), c.T, c.H, c.neg_eigval);
    gdn_gate_forward<double>(g64.data(), beta64.data(), u64.data(), bb64.data(), A64.data(), zero_dt.data(), c.T, c.H,
                             c.neg_eigval);
    std::vector<double> dg_g(n);
    for (size_t i = 0; i < n; ++i) dg_g[i] = dg64[i] * g64[i];
    const double P = static_cast<double>(column_sum_path_length(column_sum_plan(c.T, c.H, ~size_t{0} / 2)));

    const GdnGateCudaParams p{c.T, c.H, c.neg_eigval};
    DeviceBuffer a = DeviceBuffer::from(in.a, "a"), b = DeviceBuffer::from(in.b, "b"),
                 A = DeviceBuffer::from(in.A_log, "A_log"), dt = DeviceBuffer::from(in.dt_bias, "dt_bias"),
                 dg = DeviceBuffer::from(in.dg, "dg"), dbeta = DeviceBuffer::from(in.dbeta, "dbeta"), da(n * 4, "da"),
                 db(n * 4, "db"), dA(nh * 4, "dA_log"), ddt(nh * 4, "ddt_bias");
    DeviceBuffer ws(gdn_gate_backward_cuda_workspace_bytes(p), "workspace");
    gdn_gate_backward_cuda(da.as<float>(), db.as<float>(), dA.as<float>(), ddt.as<float>(), dg.as<float>(),
                           dbeta.as<float>(), a.as<float>(), b.as<float>(), A.as<float>(), dt.as<float>(), p,
                           ws.as<void>(), ws.bytes(), ctx().stream());
    EXPECT_TRUE(check_f32(name(c, "bwd da"), da.download<float>(), da32, da64, abs_of(da64), {13}));
    EXPECT_TRUE(check_f32(name(c, "bwd db"), db.download<float>(), db32, db64, abs_of(db64), {15}));
    EXPECT_TRUE(check_f32(name(c, "bwd ddt_bias"), ddt.download<float>(), ddt32, ddt64, column_abs_sum(da64, c.T, c.H),
                          {P + 13}));
    EXPECT_TRUE(check_f32(name(c, "bwd dA_log"), dA.download<float>(), dA32, dA64, column_abs_sum(dg_g, c.T, c.H),
                          {P + 13}));
    EXPECT_TRUE(buffers_ok({&da, &db, &dA, &ddt, &ws}, {&a, &b, &A, &dt, &dg, &dbeta})) << name(c, "bwd");
  }
}
