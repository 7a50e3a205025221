// Gated delta rule decode step: CUDA (src/ops/gated_delta_rule/gated_delta_rule_decode.cu, fp32 state updated in
// place) vs the CPU reference (gated_delta_rule_decode.cpp: the float instantiation as cpu32, the double one as
// ref64). Cases: the scalar path (dk = 7 with dv = 33, dk = 40 with dv = 72, and dk = 128 with misaligned state/q/k
// pointers), the vector path (dk = 64, 128, 256; dv = 5, 33, 40, 128: full and partial row tiles), B = 1, 5 and 16,
// Hv = Hk and GVA (Hv = 2Hk, 3Hk), several steps in a row on the same state buffer, a state of large values (~1e15),
// NaN and +Inf in one sequence's inputs (confined to that sequence's o and state, NaN/Inf parity with the CPU), a rerun
// for bit-identical results, and guards/unchanged inputs after every step.
//
// Several steps: each step s starts from the state the GPU left after step s − 1 (downloaded), and the references run
// one step from that same state, so every step is checked with the one-step bound below (the state chain itself is the
// GPU's; the CPU test tests/ops/test_gated_delta_rule_decode.cpp covers decode-vs-prefill drift).
//
// Tolerances (fp32 rule, harness.h). Per (sequence, v-head, row a), from the inputs of the step, in double:
//   α = e^g, r_d = α·M_ad, P = Σ_d |r_d k_d|, U = |β|·(|v_a| + P)   (the abs-value computation of u = β (v_a − p))
//   state (a, d): mag = |r_d| + U·|k_d|;   o_a: mag = scale · Σ_d mag(a, d)·|q_d|
// Chain of fp32 roundings (worst case, first order): r = expf(g)·M: expf ≤ 2 ulp = 4u plus the product, 5; p = Σ r k:
// a sum whose longest addition chain is at most dk + 5 on both paths (vector: 16 FMAs + log2(dk/16) tree levels;
// scalar: ⌈dk/32⌉ FMAs + 5 levels), so c_dot = dk + 5 in units of u·P; v − p and β·(): 2; the FMA write: 1. State:
// k = 5 + c_dot + 2 + 1 = dk + 13. Output: the state error carried through the q-sum, plus c_dot for the sum itself
// and 1 for the scale: k = 2·dk + 19. A logic error (wrong row, column, head, missing decay) is O(1) relative; these
// bounds are ≤ 3e-5 relative at dk = 256. The [check] lines print the margin.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"
#include "ops/gated_delta_rule/gated_delta_rule_decode.h"
#include "ops/gated_delta_rule/gated_delta_rule_decode_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct DecodeCase {
  int64_t B, Hk, Hv, dk, dv;
  int steps;
  Fill state_fill;  // Normal (·0.5) or Large
  bool misaligned;  // state, q, k one float past a 16-byte boundary: the scalar path even for dk = 128
  bool poison;      // NaN in v of sequence 1, +Inf in k of sequence 3 (B ≥ 4)
};

const std::vector<DecodeCase> kCases = {
    {1, 1, 1, 7, 33, 3, Fill::Normal, false, false},      // scalar, B = 1, odd dims
    {5, 2, 4, 7, 33, 3, Fill::Normal, false, false},      // scalar, GVA 2
    {5, 1, 2, 40, 72, 2, Fill::Normal, false, false},     // scalar, dk % 4 == 0 but no vector instance
    {3, 1, 1, 128, 16, 2, Fill::Normal, true, false},     // scalar because misaligned
    {1, 1, 1, 128, 128, 3, Fill::Normal, false, false},   // vector, B = 1
    {5, 1, 3, 128, 33, 3, Fill::Normal, false, false},    // vector, partial tile (33 of 64 rows), GVA 3
    {5, 2, 2, 64, 5, 3, Fill::Normal, false, false},      // vector dk = 64, tiny dv
    {2, 1, 2, 256, 40, 2, Fill::Normal, false, false},    // vector dk = 256
    {16, 4, 8, 128, 128, 2, Fill::Normal, false, false},  // vector, several tiles and pairs
    {5, 2, 4, 128, 128, 2, Fill::Large, false, false},    // large state values, vector
    {5, 2, 4, 7, 33, 2, Fill::Large, false, false},       // large state values, scalar
    {5, 1, 2, 128, 33, 2, Fill::Normal, false, true},     // NaN / Inf confined, vector
    {5, 1, 2, 7, 33, 2, Fill::Normal, false, true},       // NaN / Inf confined, scalar
};

std::string name(const DecodeCase& c, int step, const char* what) {
  return "gated_delta_rule_decode." + std::string(what) + " B=" + std::to_string(c.B) + " Hk=" + std::to_string(c.Hk) +
         " Hv=" + std::to_string(c.Hv) + " dk=" + std::to_string(c.dk) + " dv=" + std::to_string(c.dv) + " " +
         fill_name(c.state_fill) + (c.misaligned ? " misaligned" : "") + (c.poison ? " nan/inf" : "") +
         " step=" + std::to_string(step);
}

void l2_normalise_rows(std::vector<float>& x, int64_t width) {
  for (size_t r = 0; r < x.size() / static_cast<size_t>(width); ++r) {
    double ss = 0.0;
    for (int64_t d = 0; d < width; ++d) ss += static_cast<double>(x[r * width + d]) * x[r * width + d];
    for (int64_t d = 0; d < width; ++d) x[r * width + d] = static_cast<float>(x[r * width + d] / std::sqrt(ss + 1e-6));
  }
}

// Inputs of one step.
struct StepInputs {
  std::vector<float> q, k, v, g, beta;
};

StepInputs make_inputs(const DecodeCase& c, int step) {
  const uint64_t base = 100 + 10 * static_cast<uint64_t>(step);
  const size_t nqk = static_cast<size_t>(c.B * c.Hk * c.dk), ng = static_cast<size_t>(c.B * c.Hv);
  StepInputs in;
  in.q = make_values(nqk, Fill::Normal, base + 1);
  in.k = make_values(nqk, Fill::Normal, base + 2);
  l2_normalise_rows(in.q, c.dk);
  l2_normalise_rows(in.k, c.dk);
  in.v = make_values(static_cast<size_t>(c.B * c.Hv * c.dv), Fill::Normal, base + 3);
  const std::vector<float> x = make_values(ng, Fill::Normal, base + 4, 2.0f),
                           b = make_values(ng, Fill::Normal, base + 5);
  in.g.resize(ng);
  in.beta.resize(ng);
  for (size_t i = 0; i < ng; ++i) {
    const double xi = x[i];
    in.g[i] = static_cast<float>(xi < -20 ? xi : -std::log1p(std::exp(-xi)));  // logsigmoid
    in.beta[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(b[i]))));
  }
  if (c.poison) {
    in.v[static_cast<size_t>((1 * c.Hv + 0) * c.dv + c.dv / 2)] = std::numeric_limits<float>::quiet_NaN();
    in.k[static_cast<size_t>((3 * c.Hk + 0) * c.dk + c.dk / 3)] = std::numeric_limits<float>::infinity();
  }
  return in;
}

// The magnitudes of the header comment for o and the state after one step from `state`.
void magnitudes(const DecodeCase& c, const StepInputs& in, const std::vector<float>& state, float scale,
                std::vector<double>& mag_o, std::vector<double>& mag_state) {
  const int64_t G = c.Hv / c.Hk;
  mag_o.assign(static_cast<size_t>(c.B * c.Hv * c.dv), 0.0);
  mag_state.assign(state.size(), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hv; ++h) {
      const int64_t pair = b * c.Hv + h;
      const float* k = &in.k[static_cast<size_t>((b * c.Hk + h / G) * c.dk)];
      const float* q = &in.q[static_cast<size_t>((b * c.Hk + h / G) * c.dk)];
      const double alpha = std::exp(static_cast<double>(in.g[pair])), beta = std::abs(in.beta[pair]);
      for (int64_t a = 0; a < c.dv; ++a) {
        const size_t row = static_cast<size_t>((pair * c.dv + a) * c.dk);
        double P = 0.0;
        for (int64_t d = 0; d < c.dk; ++d) P += std::abs(alpha * state[row + d] * k[d]);
        const double U = beta * (std::abs(static_cast<double>(in.v[pair * c.dv + a])) + P);
        double o = 0.0;
        for (int64_t d = 0; d < c.dk; ++d) {
          const double m = std::abs(alpha * state[row + d]) + U * std::abs(static_cast<double>(k[d]));
          mag_state[row + d] = m;
          o += m * std::abs(static_cast<double>(q[d]));
        }
        mag_o[static_cast<size_t>(pair * c.dv + a)] = std::abs(static_cast<double>(scale)) * o;
      }
    }
}

// A device buffer whose data may start one float past its 16-byte-aligned body (the misaligned cases).
struct DevVec {
  DeviceBuffer buf;
  size_t off = 0;
  DevVec(const std::vector<float>& host, bool misaligned, const std::string& what) : off(misaligned ? 1 : 0) {
    std::vector<float> padded(off, 0.0f);
    padded.insert(padded.end(), host.begin(), host.end());
    buf = DeviceBuffer::from(padded, what);
  }
  float* ptr() const { return buf.as<float>() + off; }
  std::vector<float> get() const {
    std::vector<float> all = buf.download<float>();
    return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(off), all.end());
  }
};

// Runs every step of a case on the GPU (checking each against the references when `check` is set); returns the final
// o and state.
std::pair<std::vector<float>, std::vector<float>> run_case(const DecodeCase& c, bool check) {
  const GdnDecodeShape shape{c.B, c.Hk, c.Hv, c.dk, c.dv};
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.dk)));
  const double k_state = static_cast<double>(c.dk) + 13.0, k_o = 2.0 * static_cast<double>(c.dk) + 19.0;
  const std::vector<float> state0 = make_values(static_cast<size_t>(shape.state_elements()), c.state_fill, 90,
                                                c.state_fill == Fill::Large ? 1.0f : 0.5f);
  DevVec state(state0, c.misaligned, "state");
  std::vector<float> o_gpu;
  for (int step = 0; step < c.steps; ++step) {
    const StepInputs in = make_inputs(c, step);
    const std::vector<float> before = state.get();
    const DevVec q(in.q, c.misaligned, "q"), k(in.k, c.misaligned, "k"), v(in.v, false, "v"), g(in.g, false, "g"),
        beta(in.beta, false, "beta");
    DeviceBuffer o(in.v.size() * sizeof(float), "o");
    const GdnDecodeInputs<float> dev_in{q.ptr(), k.ptr(), v.ptr(), g.ptr(), beta.ptr()};
    EXPECT_EQ(gated_delta_rule_decode_cuda_vectorized(state.ptr(), dev_in, shape),
              !c.misaligned && (c.dk == 64 || c.dk == 128 || c.dk == 256))
        << name(c, step, "path");
    gated_delta_rule_decode_cuda(o.as<float>(), state.ptr(), dev_in, shape, scale, ctx().stream());
    o_gpu = o.download<float>();
    if (!check) continue;

    std::vector<float> o32(in.v.size()), state32 = before;
    gated_delta_rule_decode<float>(o32.data(), state32.data(),
                                   {in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data()}, shape, scale);
    const auto w = [](const std::vector<float>& x) { return to_f64(x); };
    const std::vector<double> q64 = w(in.q), k64 = w(in.k), v64 = w(in.v), g64 = w(in.g), b64 = w(in.beta);
    std::vector<double> o64(in.v.size()), state64 = w(before);
    gated_delta_rule_decode<double>(o64.data(), state64.data(),
                                    {q64.data(), k64.data(), v64.data(), g64.data(), b64.data()}, shape,
                                    static_cast<double>(scale));
    std::vector<double> mag_o, mag_state;
    magnitudes(c, in, before, scale, mag_o, mag_state);
    EXPECT_TRUE(check_f32(name(c, step, "o"), o_gpu, o32, o64, mag_o, {k_o}));
    EXPECT_TRUE(check_f32(name(c, step, "state"), state.get(), state32, state64, mag_state, {k_state}));
    EXPECT_TRUE(buffers_ok({&o, &state.buf}, {&q.buf, &k.buf, &v.buf, &g.buf, &beta.buf})) << name(c, step, "buffers");
  }
  return {o_gpu, state.get()};
}

// The elements of x [B, Hv, per] outside sequences skip_a and skip_b.
std::vector<float> pairs_except(const std::vector<float>& x, int64_t per, int64_t B, int64_t Hv, int64_t skip_a,
                                int64_t skip_b) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    if (b == skip_a || b == skip_b) continue;
    out.insert(out.end(), x.begin() + b * Hv * per, x.begin() + (b + 1) * Hv * per);
  }
  return out;
}

}  // namespace

TEST(GatedDeltaRuleDecodeCuda, StepsF32) {
  HLM_REQUIRE_CUDA();
  for (const DecodeCase& c : kCases) {
    const auto [o1, state1] = run_case(c, true);
    // Rerun from the same initial state: bit-identical (fixed sums, no atomics, no dependence on launch history).
    const auto [o2, state2] = run_case(c, false);
    EXPECT_TRUE(check_exact(name(c, c.steps - 1, "o rerun"), o2, o1));
    EXPECT_TRUE(check_exact(name(c, c.steps - 1, "state rerun"), state2, state1));
    if (c.poison) {
      // The sequences without a poisoned input are bit-identical to a run without poison.
      DecodeCase clean = c;
      clean.poison = false;
      const auto [o3, state3] = run_case(clean, false);
      const int64_t per_o = c.dv, per_state = c.dv * c.dk;
      EXPECT_TRUE(check_exact(name(c, c.steps - 1, "o of clean sequences"), pairs_except(o1, per_o, c.B, c.Hv, 1, 3),
                              pairs_except(o3, per_o, c.B, c.Hv, 1, 3)));
      EXPECT_TRUE(check_exact(name(c, c.steps - 1, "state of clean sequences"),
                              pairs_except(state1, per_state, c.B, c.Hv, 1, 3),
                              pairs_except(state3, per_state, c.B, c.Hv, 1, 3)));
    }
  }
}
