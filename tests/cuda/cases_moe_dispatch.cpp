// Routed-expert dispatch (src/ops/moe_dispatch): CUDA vs the CPU reference (moe_dispatch_ref.cpp).
// Cases: odd token counts, expert counts below, at and above a warp (4 .. 512), top-k from 1 to 16, with
// and without renormalisation; experts that get no token; rows of equal logits (ties go to the lower index);
// Special fill (NaN / ±Inf logits: the token's weights NaN on both); the grouped GEMMs on odd R, N, K (bf16 K % 8 != 0
// takes the element-load path, K % 8 == 0 the cp.async stages), an expert whose rows span several tiles, empty
// experts, NaN and Inf in a row.
//
// Tolerances (harness.h's fp32 rule; u = 2^-24):
//   route weights: p is exp rounded to fp32 then divided by a double sum (≤ 1u each, the GPU's tree-ordered double
//     sum agrees to ~1e-16) and the renormalisation adds a k-term fp32 sum and a division: k = 4 + k_top.
//   dispatch (counts, offsets, perm, slot) and the picked experts: exact.
//   combine: the CPU's float products and sums in the same order, but the host compiler may contract a·b + c into
//     an fma: k = 2·k_top, mag = Σ|w·y| (+ |σ·shared|).
//   swiglu: swiglu.h's expression (expf within 2 ulp): k = 10 (cases_swiglu.cpp's reasoning); bf16 output: the bits
//     of rounding the fp32 output.
//   grouped GEMM fp32: each output is an fmaf chain over k ascending, which the host loop here repeats: exact.
//   grouped GEMM bf16: products of bf16 values are exact in fp32; the tensor cores' fp32 accumulation of K terms
//     (in an order and with an internal alignment we do not control) stays within K·u·Σ|a·w|: k = K.
#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "harness.h"
#include "ops/moe_dispatch/moe_dispatch.h"
#include "ops/moe_dispatch/moe_dispatch_cuda.h"
#include "ops/moe_dispatch/moe_grouped_gemm_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct RouteCase {
  int64_t T, E, k;
  bool norm;
  Fill fill;
  float scale = 2.0f;
};

const std::vector<RouteCase> kRouteCases = {
    {1, 4, 1, false, Fill::Normal},   {37, 6, 3, true, Fill::Normal},   {129, 128, 8, true, Fill::Normal},
    {65, 60, 10, true, Fill::Normal}, {5, 256, 16, false, Fill::Normal}, {33, 128, 8, true, Fill::Zeros},
    {41, 6, 2, true, Fill::Special},  {17, 128, 8, false, Fill::Large, 1e-13f},
    {9, 512, 10, true, Fill::Normal},  // Qwen3-Next's 512 experts, top-10
};

std::string route_name(const RouteCase& c) {
  return "moe.route T=" + std::to_string(c.T) + " E=" + std::to_string(c.E) + " k=" + std::to_string(c.k) +
         (c.norm ? " norm " : " raw ") + fill_name(c.fill);
}

// k distinct experts per token (a seeded shuffle), experts >= E / 2 + 1 left empty when E > 4.
std::vector<int32_t> random_routes(int64_t T, int64_t k, int64_t E, uint32_t seed) {
  const int64_t used = E > 4 ? E / 2 + 1 : E;
  std::vector<int32_t> out;
  uint32_t s = seed;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> pool;
    for (int32_t e = 0; e < used; ++e) pool.push_back(e);
    for (int64_t j = 0; j < k; ++j) {
      s = s * 1664525u + 1013904223u;
      const size_t pick = (s >> 8) % pool.size();
      out.push_back(pool[pick]);
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }
  return out;
}

}  // namespace

TEST(MoeDispatchCuda, Route) {
  HLM_REQUIRE_CUDA();
  for (const RouteCase& c : kRouteCases) {
    const auto n = static_cast<size_t>(c.T * c.k);
    const auto logits = make_values(static_cast<size_t>(c.T * c.E), c.fill, 41, c.scale);
    std::vector<int32_t> e_cpu(n);
    std::vector<float> w_cpu(n), p_cpu(static_cast<size_t>(c.T * c.E));
    moe_route_ref(e_cpu.data(), w_cpu.data(), p_cpu.data(), logits.data(), c.T, c.E, c.k, c.norm);
    DeviceBuffer l = DeviceBuffer::from(logits, "logits"), e(n * 4, "expert"), w(n * 4, "weight"),
                 p(p_cpu.size() * 4, "probs");
    moe_route_cuda(e.as<int32_t>(), w.as<float>(), p.as<float>(), l.as<float>(), c.T, c.E, c.k, c.norm,
                   ctx().stream());
    const auto e_gpu = e.download<int32_t>();
    const auto w_gpu = w.download<float>(), p_gpu = p.download<float>();
    size_t mismatched = 0;  // picks of tokens whose weights are finite (a NaN row's picks are unspecified)
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < c.k; ++j) {
        const size_t i = static_cast<size_t>(t * c.k + j);
        if (std::isfinite(w_cpu[i]) && e_gpu[i] != e_cpu[i]) ++mismatched;
      }
    EXPECT_EQ(mismatched, 0u) << route_name(c) << ": picked experts";
    const auto w64 = to_f64(w_cpu), p64 = to_f64(p_cpu);
    EXPECT_TRUE(check_f32(route_name(c) + " weight", w_gpu, w_cpu, w64, abs_of(w64), {4.0 + c.k}));
    EXPECT_TRUE(check_f32(route_name(c) + " probs", p_gpu, p_cpu, p64, abs_of(p64), {4}));
    EXPECT_TRUE(buffers_ok({&e, &w, &p}, {&l})) << route_name(c);
  }
}

// The bailing router (moe_route_sigmoid_grouped_ref): Ring-mini-linear-2.0's 256 experts in 8 groups, 4 kept, top-8,
// scaling 2.5; the tiny golden's 16 in 4, 2 kept, top-3; 512 in 16, top-16; groups of 2 experts; without
// renormalisation; all-zero logits and bias (every score and group ties: the lower index wins, as on the CPU); NaN /
// ±Inf logits (Special: a NaN token's weights NaN on both); a bias large enough to flip the choices (N(0, 0.3²) vs
// sigmoids of N(0, 2²) logits). Experts exact; scores σ: exp in double rounded once (k = 4); weights: σ, a k-term fp32
// sum, + 1e−20, a division and the scaling product: k = 6 + k_top.
TEST(MoeDispatchCuda, RouteSigmoidGrouped) {
  HLM_REQUIRE_CUDA();
  struct Case {
    int64_t T, E, k, G, kept;
    bool norm;
    float scaling;
    Fill fill;
  };
  const std::vector<Case> cases = {
      {37, 256, 8, 8, 4, true, 2.5f, Fill::Normal},  {65, 16, 3, 4, 2, true, 2.5f, Fill::Normal},
      {9, 512, 16, 16, 3, true, 1.0f, Fill::Normal}, {33, 6, 2, 3, 1, false, 1.0f, Fill::Normal},
      {17, 64, 6, 8, 2, true, 2.5f, Fill::Zeros},    {41, 16, 3, 4, 2, true, 2.5f, Fill::Special},
      {1, 256, 8, 8, 4, true, 2.5f, Fill::Normal},
  };
  for (const Case& c : cases) {
    const std::string what = "moe.route_sigmoid_grouped T=" + std::to_string(c.T) + " E=" + std::to_string(c.E) +
                             " k=" + std::to_string(c.k) + " G=" + std::to_string(c.G) + " kept=" +
                             std::to_string(c.kept) + (c.norm ? " norm " : " raw ") + fill_name(c.fill);
    const auto n = static_cast<size_t>(c.T * c.k);
    const auto logits = make_values(static_cast<size_t>(c.T * c.E), c.fill, 48, 2.0f);
    const auto bias = c.fill == Fill::Zeros ? make_values(static_cast<size_t>(c.E), Fill::Zeros, 49)
                                            : make_values(static_cast<size_t>(c.E), Fill::Normal, 49, 0.3f);
    std::vector<int32_t> e_cpu(n);
    std::vector<float> w_cpu(n), s_cpu(static_cast<size_t>(c.T * c.E));
    moe_route_sigmoid_grouped_ref(e_cpu.data(), w_cpu.data(), s_cpu.data(), logits.data(), bias.data(), c.T, c.E,
                                  c.k, c.G, c.kept, c.norm, c.scaling);
    DeviceBuffer l = DeviceBuffer::from(logits, "logits"), b = DeviceBuffer::from(bias, "expert_bias"),
                 e(n * 4, "expert"), w(n * 4, "weight"), sc(s_cpu.size() * 4, "scores");
    moe_route_sigmoid_grouped_cuda(e.as<int32_t>(), w.as<float>(), sc.as<float>(), l.as<float>(), b.as<float>(), c.T,
                                   c.E, c.k, c.G, c.kept, c.norm, c.scaling, ctx().stream());
    const auto e_gpu = e.download<int32_t>();
    const auto w_gpu = w.download<float>(), s_gpu = sc.download<float>();
    size_t mismatched = 0, out_of_range = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(w_cpu[i]) && e_gpu[i] != e_cpu[i]) ++mismatched;
      if (e_gpu[i] < 0 || e_gpu[i] >= c.E) ++out_of_range;
    }
    EXPECT_EQ(mismatched, 0u) << what << ": picked experts";
    EXPECT_EQ(out_of_range, 0u) << what << ": expert ids outside [0, E)";
    const auto w64 = to_f64(w_cpu), s64 = to_f64(s_cpu);
    EXPECT_TRUE(check_f32(what + " weight", w_gpu, w_cpu, w64, abs_of(w64), {6.0 + static_cast<double>(c.k)}));
    EXPECT_TRUE(check_f32(what + " scores", s_gpu, s_cpu, s64, abs_of(s64), {4}));
    EXPECT_TRUE(buffers_ok({&e, &w, &sc}, {&l, &b})) << what;
  }
}

TEST(MoeDispatchCuda, DispatchGatherCombine) {
  HLM_REQUIRE_CUDA();
  struct Case {
    int64_t T, k, E, H;
  };
  for (const Case& c : std::vector<Case>{{1, 1, 1, 3}, {37, 3, 6, 45}, {300, 8, 128, 64}, {129, 10, 60, 257}}) {
    const std::string name = "moe.dispatch T=" + std::to_string(c.T) + " k=" + std::to_string(c.k) +
                             " E=" + std::to_string(c.E) + " H=" + std::to_string(c.H);
    const auto n = static_cast<size_t>(c.T * c.k);
    const auto routes = random_routes(c.T, c.k, c.E, 7);
    std::vector<int32_t> counts(static_cast<size_t>(c.E)), offsets(static_cast<size_t>(c.E + 1)), perm(n), slot(n);
    moe_dispatch_ref(counts.data(), offsets.data(), perm.data(), slot.data(), routes.data(), c.T, c.k, c.E);
    DeviceBuffer r = DeviceBuffer::from(routes, "expert"), dc(counts.size() * 4, "counts"),
                 doff(offsets.size() * 4, "offsets"), dp(n * 4, "perm"), ds(n * 4, "slot");
    moe_dispatch_cuda(dc.as<int32_t>(), doff.as<int32_t>(), dp.as<int32_t>(), ds.as<int32_t>(), r.as<int32_t>(),
                      c.T, c.k, c.E, ctx().stream());
    EXPECT_EQ(dc.download<int32_t>(), counts) << name << " counts";
    EXPECT_EQ(doff.download<int32_t>(), offsets) << name << " offsets";
    EXPECT_EQ(dp.download<int32_t>(), perm) << name << " perm";
    EXPECT_EQ(ds.download<int32_t>(), slot) << name << " slot";
    EXPECT_TRUE(buffers_ok({&dc, &doff, &dp, &ds}, {&r})) << name;

    // Gather: exact copies (fp32) and their bf16 rounding.
    const auto x = make_values(static_cast<size_t>(c.T * c.H), Fill::Special, 43);
    std::vector<float> gathered(n * static_cast<size_t>(c.H));
    for (size_t row = 0; row < n; ++row)
      for (int64_t h = 0; h < c.H; ++h)
        gathered[row * c.H + h] = x[static_cast<size_t>((perm[row] / c.k) * c.H + h)];
    DeviceBuffer dx = DeviceBuffer::from(x, "x"), g(gathered.size() * 4, "gathered"), g16(gathered.size() * 2, "g16");
    moe_gather_rows_cuda(g.as<float>(), dx.as<float>(), dp.as<int32_t>(), c.T, c.k, c.H, ctx().stream());
    moe_gather_rows_bf16_cuda(g16.as<__nv_bfloat16>(), dx.as<float>(), dp.as<int32_t>(), c.T, c.k, c.H,
                              ctx().stream());
    EXPECT_TRUE(check_exact(name + " gather", g.download<float>(), gathered));
    const auto bits = g16.download<uint16_t>();
    size_t bad = 0;
    for (size_t i = 0; i < gathered.size(); ++i) {
      const bool nan = std::isnan(gathered[i]);
      bad += nan ? !std::isnan(bf16_to_f32(bits[i])) : bits[i] != f32_to_bf16(gathered[i]);
    }
    EXPECT_EQ(bad, 0u) << name << " gather bf16 (NaN stays NaN; else round to nearest even)";

    // Combine, without the shared expert, with the gated one (Qwen3.5-MoE) and with the ungated one (bailing).
    const auto y = make_values(n * static_cast<size_t>(c.H), Fill::Normal, 44);
    const auto weight = make_values(n, Fill::Normal, 45, 0.3f);
    const auto shared = make_values(static_cast<size_t>(c.T * c.H), Fill::Normal, 46);
    const auto gate = make_values(static_cast<size_t>(c.T), Fill::Normal, 47, 3.0f);
    DeviceBuffer dy = DeviceBuffer::from(y, "y"), dw = DeviceBuffer::from(weight, "weight"),
                 dsh = DeviceBuffer::from(shared, "shared"), dg = DeviceBuffer::from(gate, "shared gate");
    for (const int mode : {0, 1, 2}) {
      const bool with_shared = mode > 0, gated = mode == 1;
      std::vector<float> out(static_cast<size_t>(c.T * c.H));
      moe_combine_ref(out.data(), y.data(), weight.data(), routes.data(), slot.data(),
                      with_shared ? shared.data() : nullptr, gated ? gate.data() : nullptr, c.T, c.k, c.H);
      std::vector<double> mag(out.size(), 0.0);
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t h = 0; h < c.H; ++h) {
          double m = with_shared ? std::abs(static_cast<double>(shared[t * c.H + h])) : 0.0;
          for (int64_t j = 0; j < c.k; ++j)
            m += std::abs(static_cast<double>(weight[t * c.k + j]) * y[slot[t * c.k + j] * c.H + h]);
          mag[t * c.H + h] = m;
        }
      DeviceBuffer o(out.size() * 4, "out");
      moe_combine_cuda(o.as<float>(), dy.as<float>(), dw.as<float>(), r.as<int32_t>(), ds.as<int32_t>(),
                       with_shared ? dsh.as<float>() : nullptr, gated ? dg.as<float>() : nullptr, c.T, c.k, c.H,
                       ctx().stream());
      EXPECT_TRUE(check_f32(name + (gated ? " combine+shared" : with_shared ? " combine+ungated shared" : " combine"),
                            o.download<float>(), out, to_f64(out), mag, {2.0 * c.k + 2}));
      EXPECT_TRUE(buffers_ok({&o}, {&dy, &dw, &dsh, &dg, &r})) << name;  // slot: dispatch's output, checked above
    }
  }
}

TEST(MoeDispatchCuda, FusedSwiglu) {
  HLM_REQUIRE_CUDA();
  for (const int64_t F : {1, 7, 768}) {
    const int64_t R = 53;
    const auto gu = make_values(static_cast<size_t>(R * 2 * F), Fill::Special, 51, 3.0f);
    std::vector<float> h(static_cast<size_t>(R * F));
    moe_swiglu_ref(h.data(), gu.data(), R, F);
    std::vector<double> ref(h.size());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t f = 0; f < F; ++f) {
        const double g = gu[r * 2 * F + f], u = gu[r * 2 * F + F + f];
        ref[r * F + f] = g / (1.0 + std::exp(-g)) * u;
      }
    DeviceBuffer dgu = DeviceBuffer::from(gu, "gu"), dh(h.size() * 4, "h"), dh16(h.size() * 2, "h16");
    moe_swiglu_cuda(dh.as<float>(), dgu.as<float>(), R, F, ctx().stream());
    moe_swiglu_bf16_cuda(dh16.as<__nv_bfloat16>(), dgu.as<float>(), R, F, ctx().stream());
    const auto gpu = dh.download<float>();
    const std::string name = "moe.swiglu R=53 F=" + std::to_string(F);
    EXPECT_TRUE(check_f32(name, gpu, h, ref, abs_of(ref), {10}));
    const auto bits = dh16.download<uint16_t>();
    size_t bad = 0;
    for (size_t i = 0; i < gpu.size(); ++i)
      bad += std::isnan(gpu[i]) ? !std::isnan(bf16_to_f32(bits[i])) : bits[i] != f32_to_bf16(gpu[i]);
    EXPECT_EQ(bad, 0u) << name << " bf16 vs rounding the fp32 output";
    EXPECT_TRUE(buffers_ok({&dh, &dh16}, {&dgu})) << name;
  }
}

TEST(MoeGroupedGemmCuda, Fp32AndBf16) {
  HLM_REQUIRE_CUDA();
  struct Case {
    int64_t T, k, E, N, K;
    bool special;
  };
  for (const Case& c : std::vector<Case>{{37, 2, 5, 33, 45, false}, {150, 3, 8, 160, 64, true},
                                         {1, 8, 128, 96, 40, false}, {400, 2, 4, 130, 200, false}}) {
    const std::string name = "moe.grouped_gemm T=" + std::to_string(c.T) + " k=" + std::to_string(c.k) + " E=" +
                             std::to_string(c.E) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
    const int64_t R = c.T * c.k;
    const auto routes = random_routes(c.T, c.k, c.E, 9);
    std::vector<int32_t> counts(static_cast<size_t>(c.E)), offsets(static_cast<size_t>(c.E + 1)),
        perm(static_cast<size_t>(R)), slot(static_cast<size_t>(R));
    moe_dispatch_ref(counts.data(), offsets.data(), perm.data(), slot.data(), routes.data(), c.T, c.k, c.E);
    auto a = make_values(static_cast<size_t>(R * c.K), Fill::Normal, 61);
    if (c.special) {  // a NaN in row 3 and an Inf in row 10: those rows' outputs are NaN / ±Inf on both sides
      a[3 * c.K + 1] = NAN;
      a[10 * c.K + 5] = INFINITY;
    }
    const auto w = make_values(static_cast<size_t>(c.E * c.N * c.K), Fill::Normal, 62, 0.1f);
    int64_t e_of_row = 0;
    std::vector<int64_t> row_expert(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      while (r >= offsets[e_of_row + 1]) ++e_of_row;
      row_expert[r] = e_of_row;
    }
    DeviceBuffer doff = DeviceBuffer::from(offsets, "offsets");
    // fp32: the fmaf chain over k ascending, as the kernel: exact.
    {
      std::vector<float> y(static_cast<size_t>(R * c.N));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < c.N; ++n) {
          float acc = 0.0f;
          const float* wr = w.data() + (row_expert[r] * c.N + n) * c.K;
          for (int64_t q = 0; q < c.K; ++q) acc = std::fmaf(a[r * c.K + q], wr[q], acc);
          y[r * c.N + n] = acc;
        }
      DeviceBuffer da = DeviceBuffer::from(a, "a"), dw = DeviceBuffer::from(w, "w"), dy(y.size() * 4, "y");
      moe_grouped_gemm_cuda(dy.as<float>(), da.as<float>(), dw.as<float>(), doff.as<int32_t>(), c.E, R, c.N, c.K,
                            ctx().stream());
      EXPECT_TRUE(check_exact(name + " fp32", dy.download<float>(), y));
      EXPECT_TRUE(buffers_ok({&dy}, {&da, &dw, &doff})) << name;
    }
    // bf16: rounded operands, double reference, fp32 accumulation bound k = K.
    {
      const auto a16 = to_bf16(a), w16 = to_bf16(w);
      const auto ar = bf16_to_f32(a16), wr = bf16_to_f32(w16);
      std::vector<double> ref(static_cast<size_t>(R * c.N)), mag(ref.size());
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < c.N; ++n) {
          double acc = 0.0, m = 0.0;
          const float* wn = wr.data() + (row_expert[r] * c.N + n) * c.K;
          for (int64_t q = 0; q < c.K; ++q) {
            const double prod = static_cast<double>(ar[r * c.K + q]) * wn[q];
            acc += prod;
            m += std::abs(prod);
          }
          ref[r * c.N + n] = acc;
          mag[r * c.N + n] = m;
        }
      DeviceBuffer da = DeviceBuffer::from(a16, "a16"), dw = DeviceBuffer::from(w16, "w16"),
                   dy(ref.size() * 4, "y");
      moe_grouped_gemm_bf16_cuda(dy.as<float>(), da.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(),
                                 doff.as<int32_t>(), c.E, R, c.N, c.K, ctx().stream());
      EXPECT_TRUE(check_f32(name + " bf16", dy.download<float>(), to_f32(ref), ref, mag,
                            {static_cast<double>(c.K)}));
      EXPECT_TRUE(buffers_ok({&dy}, {&da, &dw, &doff})) << name;
    }
  }
}
