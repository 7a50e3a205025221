// Simple GLA (Lightning Attention-2): CUDA (src/ops/simple_gla/simple_gla.cu) vs the CPU reference
// (simple_gla_ref.cpp: the float instantiation as cpu32, the double one as ref64). Both CUDA forms against the
// reference's same form: the chunked kernels vs simple_gla_chunked_forward, the token recurrence vs
// simple_gla_recurrent_forward; outputs o and final states checked separately. Plus the Lightning mixer's group
// RMSNorm + sigmoid gate against a plain statement of layers/lightning_layer.cpp's loop.
// Cases: odd dk ≠ dv (4, 3; 33, 40), packed sequences of 1, 5, 7 / 65, 0 (empty), 127 / 33, 64 / 300 / 40, 9 tokens,
// chunks 1, 4, 16, 32, 64 (lengths on, one past and across chunk boundaries; 300 = 4 chunks of 64 + 44), the
// bailing_moe_linear_tiny golden's shape (6 heads of 16, its layer-0 decay), Ring-mini-linear-2.0's (dk = dv = 128,
// chunk 64, 16 heads with its layer-0 decays), the dims limit 256 (dynamic shared memory past 48 KiB), an initial
// state or none, edge gates (g = −20: λ^m underflows to 0 past m ≈ 5; g = 0: no decay; g = +0.05: a growing state),
// decode steps (one token per sequence) with the state updated in place (state_out = state_in), NaN in q / k / v of
// one sequence (NaN parity; the other sequences bit-identical to a clean run), and a rerun for bit-identical results.
// Guards on every buffer.
//
// Tolerance (fp32 rule, harness.h), mag = the recurrence in double over |q|, |k|, |v|, |state_in| with λ = e^g > 0
// (so it bounds the sum of |terms| behind each output and state element). Chains of fp32 roundings:
//   chunked: a q·k or q·S dot over dk (dk FMAs), the in-chunk sum over ≤ Q tokens (Q), the chunk-state sum (Q), the
//     state scan (one FMA per chunk: n_chunks), ~12 for expf, products and the scale; plus the decays' arguments:
//     λ^m = expf(g·m) with m ≤ Q carries the fp32 product's error |g|·m·u and expf's 2 ulp, once per chunk crossed:
//     k = 2·dk + 2·Q + 12 + n_chunks·(Q·|g|max + 3).
//   recurrent: per token the update (2 roundings) and λ = expf(g) (|g|·u + 2 ulp compounding over the steps), then
//     the dot over dk and the scale: k = Σ_t (4 + |g|) + dk + 4.
// A wrong decay exponent, chunk boundary or state hand-over is O(1e-2) or more relative, far above these bounds: the
// cases with the Ring decay also require the GPU output to FAIL the bound against the reference run with the next
// layer's decay (the "(ℓ − 1) → ℓ" mutation).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/simple_gla/simple_gla.h"
#include "ops/simple_gla/simple_gla_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct GlaCase {
  std::vector<int64_t> lens;
  int64_t H, dk, dv, chunk;
  bool state_in;
  int edge = 0;            // 0 normal; 1 edge gates; 2 NaN in sequence 1 (q, k, v at three tokens)
  bool in_place = false;   // state_out = state_in (decode)
  int decay = 0;           // 0: spread −0.3 … +0.004; 1: Ring decay of layer 0 of 20 layers (ring_linear_decay)
};

const std::vector<GlaCase> kCases = {
    {{1, 5, 7}, 3, 4, 3, 4, true},                    // dk ≠ dv; chunk 4 with 1, 5, 7 tokens
    {{1, 5, 7}, 3, 4, 3, 1, false},                   // chunk 1, no initial state
    {{65, 0, 127}, 6, 16, 16, 64, true, 0, false, 1},  // the tiny golden's shape and decay, an empty sequence
    {{33, 64}, 2, 33, 40, 32, false},                 // 33 = one past a chunk, 64 = two whole chunks
    {{300}, 16, 128, 128, 64, true, 0, false, 1},     // Ring-mini's shape and decay; 300 = 4·64 + 44
    {{40, 9}, 1, 256, 256, 16, true},                 // dims limit
    {{20, 45}, 3, 8, 16, 16, true, 1},                // edge gates
    {{20, 45, 31}, 4, 8, 16, 16, true, 2},            // NaN confined to sequence 1
    {{1, 1, 1, 1}, 6, 16, 16, 64, true, 0, true, 1},   // decode step, state in place
    {{1, 1, 1}, 16, 128, 128, 64, true, 0, true, 1},  // decode at Ring-mini's shape
};

std::string name(const GlaCase& c, const char* what) {
  std::string lens;
  for (int64_t l : c.lens) lens += (lens.empty() ? "" : ",") + std::to_string(l);
  return "simple_gla." + std::string(what) + " lens=" + lens + " H=" + std::to_string(c.H) +
         " dk=" + std::to_string(c.dk) + " dv=" + std::to_string(c.dv) + " Q=" + std::to_string(c.chunk) +
         (c.state_in ? " state" : "") + (c.edge == 1 ? " edge-gates" : c.edge == 2 ? " nan" : "") +
         (c.in_place ? " in-place" : "") + (c.decay == 1 ? " ring-decay" : "");
}

struct Inputs {
  int64_t T = 0;
  std::vector<int64_t> cu;
  std::vector<float> q, k, v, g, state;
};

Inputs make_inputs(const GlaCase& c, bool poison) {
  Inputs in;
  in.cu = {0};
  for (int64_t l : c.lens) in.cu.push_back(in.cu.back() + l);
  in.T = in.cu.back();
  const auto T = static_cast<size_t>(in.T);
  // q, k as the layer feeds them (RMS-normalised: entries ~ N(0, 1)); v ~ N(0, 1).
  in.q = make_values(T * static_cast<size_t>(c.H * c.dk), Fill::Normal, 51);
  in.k = make_values(T * static_cast<size_t>(c.H * c.dk), Fill::Normal, 52);
  in.v = make_values(T * static_cast<size_t>(c.H * c.dv), Fill::Normal, 53);
  in.state = make_values(c.lens.size() * static_cast<size_t>(c.H * c.dk * c.dv), Fill::Normal, 54, 0.5f);
  in.g.resize(static_cast<size_t>(c.H));
  if (c.decay == 1) {
    const std::vector<double> g = ring_linear_decay(0, 20, c.H);
    for (int64_t h = 0; h < c.H; ++h) in.g[static_cast<size_t>(h)] = static_cast<float>(g[static_cast<size_t>(h)]);
  } else {
    const float spread[] = {-0.3f, -0.02f, 0.004f, -1.0f};
    for (int64_t h = 0; h < c.H; ++h) in.g[static_cast<size_t>(h)] = spread[h % 4];
  }
  if (c.edge == 1) in.g = {-20.0f, 0.0f, 0.05f};
  if (poison && c.edge == 2) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int64_t s = in.cu[1];  // sequence 1: q of head 1 at its 3rd token, k of head 0 at its 10th (a chunk
    in.q[static_cast<size_t>(((s + 2) * c.H + 1) * c.dk + 3)] = nan;  // boundary at 16), v of head 2 at its 30th
    in.k[static_cast<size_t>(((s + 9) * c.H + 0) * c.dk + 5)] = nan;
    in.v[static_cast<size_t>(((s + 29) * c.H + 2) * c.dv + 7)] = nan;
  }
  return in;
}

template <typename T>
std::vector<T> cast(const std::vector<float>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The reference (recurrent or chunked) in T over `in` (abs: q, k, v and the state by absolute value, λ unchanged).
template <typename T>
void reference(const GlaCase& c, const Inputs& in, bool chunked, bool abs, std::vector<T>& o, std::vector<T>& state) {
  const auto prep = [&](const std::vector<float>& x) {
    std::vector<T> r = cast<T>(x);
    if (abs)
      for (T& e : r) e = std::abs(e);
    return r;
  };
  const std::vector<T> q = prep(in.q), k = prep(in.k), v = prep(in.v), s0 = prep(in.state), g = cast<T>(in.g);
  o.assign(static_cast<size_t>(in.T * c.H * c.dv), T(0));
  state.assign(in.state.size(), T(0));
  SimpleGlaInputs<T> ri;
  ri.q = q.data();
  ri.k = k.data();
  ri.v = v.data();
  ri.g = g.data();
  ri.state_in = c.state_in ? s0.data() : nullptr;
  ri.cu_seqlens = in.cu.data();
  ri.n_seqs = static_cast<int64_t>(c.lens.size());
  const SimpleGlaShape shape{in.T, c.H, c.dk, c.dv};
  if (chunked)
    simple_gla_chunked_forward<T>({o.data(), state.data()}, ri, shape, c.chunk);
  else
    simple_gla_recurrent_forward<T>({o.data(), state.data()}, ri, shape);
}

struct GpuResult {
  std::vector<float> o, state;
};

GpuResult run_gpu(const GlaCase& c, const Inputs& in, bool chunked, bool check_buffers) {
  const auto S = static_cast<int64_t>(c.lens.size());
  DeviceBuffer q = DeviceBuffer::from(in.q, "q"), k = DeviceBuffer::from(in.k, "k"), v = DeviceBuffer::from(in.v, "v"),
               g = DeviceBuffer::from(in.g, "g"), cu = DeviceBuffer::from(in.cu, "cu_seqlens");
  DeviceBuffer s_in = DeviceBuffer::from(in.state, "state_in");
  DeviceBuffer o(static_cast<size_t>(std::max<int64_t>(in.T * c.H * c.dv, 1)) * sizeof(float), "o");
  DeviceBuffer s_out(in.state.size() * sizeof(float), "state_out");
  SimpleGlaCudaParams p;
  p.total_tokens = in.T;
  p.heads = c.H;
  p.key_dim = c.dk;
  p.value_dim = c.dv;
  p.n_seqs = S;
  p.chunk = c.chunk;
  const float* state_in = c.state_in ? s_in.as<float>() : nullptr;
  float* state_out = c.in_place ? s_in.as<float>() : s_out.as<float>();
  const SimpleGlaCudaInputs di{q.as<float>(), k.as<float>(), v.as<float>(), g.as<float>(), state_in,
                               cu.as<int64_t>()};
  if (chunked) {
    const size_t bytes = simple_gla_chunked_cuda_workspace_bytes(p);
    DeviceBuffer ws(std::max<size_t>(bytes, 16), "workspace");
    simple_gla_chunked_forward_cuda(o.as<float>(), state_out, di, p, ws.as<float>(), bytes, ctx().stream());
    ctx().synchronize();
    if (check_buffers) {
      EXPECT_TRUE(ws.guards_intact()) << name(c, "workspace guards");
    }
  } else {
    simple_gla_recurrent_forward_cuda(o.as<float>(), state_out, di, p, ctx().stream());
  }
  GpuResult r;
  r.o = o.download<float>();
  r.o.resize(static_cast<size_t>(in.T * c.H * c.dv));
  r.state = c.in_place ? s_in.download<float>() : s_out.download<float>();
  if (check_buffers) {
    if (c.in_place)
      EXPECT_TRUE(buffers_ok({&o, &s_in}, {&q, &k, &v, &g, &cu})) << name(c, "buffers");
    else
      EXPECT_TRUE(buffers_ok({&o, &s_out}, {&q, &k, &v, &g, &cu, &s_in})) << name(c, "buffers");
  }
  return r;
}

double g_max(const Inputs& in) {
  double m = 0.0;
  for (float g : in.g) m = std::max(m, std::abs(static_cast<double>(g)));
  return m;
}

// Chain lengths of the header comment.
double k_chunked(const GlaCase& c, const Inputs& in) {
  int64_t n_chunks = 0;
  for (size_t s = 0; s + 1 < in.cu.size(); ++s)
    n_chunks = std::max(n_chunks, (in.cu[s + 1] - in.cu[s] + c.chunk - 1) / c.chunk);
  return 2.0 * static_cast<double>(c.dk + c.chunk) + 12.0 +
         static_cast<double>(std::max<int64_t>(n_chunks, 1)) * (static_cast<double>(c.chunk) * g_max(in) + 3.0);
}

double k_recurrent(const GlaCase& c, const Inputs& in) {
  int64_t longest = 0;
  for (size_t s = 0; s + 1 < in.cu.size(); ++s) longest = std::max(longest, in.cu[s + 1] - in.cu[s]);
  return static_cast<double>(longest) * (4.0 + g_max(in)) + static_cast<double>(c.dk) + 4.0;
}

// The elements of x [T, per] outside tokens [a, b).
std::vector<float> rows_except(const std::vector<float>& x, int64_t per, int64_t a, int64_t b) {
  std::vector<float> out(x.begin(), x.begin() + a * per);
  out.insert(out.end(), x.begin() + b * per, x.end());
  return out;
}

}  // namespace

TEST(SimpleGlaCuda, ChunkedAndRecurrentF32) {
  HLM_REQUIRE_CUDA();
  for (const GlaCase& c : kCases) {
    const Inputs in = make_inputs(c, true);
    std::vector<double> mag_o, mag_s;
    reference<double>(c, in, false, true, mag_o, mag_s);
    for (const bool chunked : {true, false}) {
      if (chunked && c.in_place) continue;  // decode steps run the recurrence
      const char* form = chunked ? "chunked" : "recurrent";
      std::vector<float> o32, s32;
      std::vector<double> o64, s64;
      reference<float>(c, in, chunked, false, o32, s32);
      reference<double>(c, in, chunked, false, o64, s64);
      const double k = chunked ? k_chunked(c, in) : k_recurrent(c, in);
      const GpuResult r = run_gpu(c, in, chunked, true);
      EXPECT_TRUE(check_f32(name(c, (std::string(form) + " o").c_str()), r.o, o32, o64, mag_o, {k}));
      EXPECT_TRUE(check_f32(name(c, (std::string(form) + " state").c_str()), r.state, s32, s64, mag_s, {k}));
      // Deterministic: a rerun gives the same bits.
      const GpuResult again = run_gpu(c, in, chunked, false);
      EXPECT_TRUE(check_exact(name(c, (std::string(form) + " o rerun").c_str()), again.o, r.o));
      EXPECT_TRUE(check_exact(name(c, (std::string(form) + " state rerun").c_str()), again.state, r.state));
      if (c.decay == 1 && !c.in_place) {
        // The bound has power: against the reference run with the next layer's decay (the "(ℓ − 1) → ℓ" mutation of
        // the decay exponent, docs/families.md) the same GPU output fails it.
        Inputs mutated = in;
        const std::vector<double> g1 = ring_linear_decay(1, 20, c.H);
        for (int64_t h = 0; h < c.H; ++h) mutated.g[static_cast<size_t>(h)] = static_cast<float>(g1[static_cast<size_t>(h)]);
        std::vector<float> m32, ms32;
        std::vector<double> m64, ms64;
        reference<float>(c, mutated, chunked, false, m32, ms32);
        reference<double>(c, mutated, chunked, false, m64, ms64);
        EXPECT_FALSE(check_f32(name(c, (std::string(form) + " o vs a mutated decay (must fail)").c_str()), r.o, m32,
                               m64, mag_o, {k}))
            << name(c, "the bound does not tell the layer's decay from the next layer's");
      }
      if (c.edge == 2) {  // NaN stays in sequence 1: the other sequences equal a clean run, bit for bit
        const Inputs clean = make_inputs(c, false);
        const GpuResult cr = run_gpu(c, clean, chunked, false);
        const int64_t per_o = c.H * c.dv, per_state = c.H * c.dk * c.dv;
        EXPECT_TRUE(check_exact(name(c, (std::string(form) + " o outside the poisoned sequence").c_str()),
                                rows_except(r.o, per_o, in.cu[1], in.cu[2]),
                                rows_except(cr.o, per_o, in.cu[1], in.cu[2])));
        EXPECT_TRUE(check_exact(name(c, (std::string(form) + " state outside the poisoned sequence").c_str()),
                                rows_except(r.state, per_state, 1, 2), rows_except(cr.state, per_state, 1, 2)));
        size_t nans = 0;
        for (float x : r.o) nans += std::isnan(x) ? 1 : 0;
        EXPECT_GT(nans, 0u) << name(c, "poison reached o");
      }
    }
  }
}

// The two forms continue each other: a prefill in the chunked form, then decode steps by the recurrence with the state
// in place, equal one chunked pass over the whole sequences (Ring-mini's shape; the engine's use). Same bound as the
// chunked form's, with the recurrence's chain added for the decoded tokens.
TEST(SimpleGlaCuda, PrefillThenDecodeContinuesTheState) {
  HLM_REQUIRE_CUDA();
  const GlaCase whole{{70, 45}, 16, 128, 128, 64, true, 0, false, 1};
  const Inputs in = make_inputs(whole, false);
  const int64_t H = whole.H, dk = whole.dk, dv = whole.dv, steps = 5;
  std::vector<float> o32, s32;
  std::vector<double> o64, s64, mag_o, mag_s;
  reference<float>(whole, in, true, false, o32, s32);
  reference<double>(whole, in, true, false, o64, s64);
  reference<double>(whole, in, false, true, mag_o, mag_s);
  // Prefill: every sequence but its last `steps` tokens.
  std::vector<int64_t> cu_pre = {0};
  std::vector<float> q, k, v;
  const auto take = [&](const std::vector<float>& x, int64_t per, int64_t t0, int64_t t1, std::vector<float>& to) {
    to.insert(to.end(), x.begin() + t0 * per, x.begin() + t1 * per);
  };
  for (size_t s = 0; s + 1 < in.cu.size(); ++s) {
    take(in.q, H * dk, in.cu[s], in.cu[s + 1] - steps, q);
    take(in.k, H * dk, in.cu[s], in.cu[s + 1] - steps, k);
    take(in.v, H * dv, in.cu[s], in.cu[s + 1] - steps, v);
    cu_pre.push_back(cu_pre.back() + (in.cu[s + 1] - in.cu[s] - steps));
  }
  DeviceBuffer dq = DeviceBuffer::from(q, "q"), dkb = DeviceBuffer::from(k, "k"), dvb = DeviceBuffer::from(v, "v"),
               dg = DeviceBuffer::from(in.g, "g"), dcu = DeviceBuffer::from(cu_pre, "cu"),
               st = DeviceBuffer::from(in.state, "state");
  SimpleGlaCudaParams p;
  p.total_tokens = cu_pre.back();
  p.heads = H;
  p.key_dim = dk;
  p.value_dim = dv;
  p.n_seqs = 2;
  p.chunk = whole.chunk;
  const size_t bytes = simple_gla_chunked_cuda_workspace_bytes(p);
  DeviceBuffer ws(bytes, "workspace"), o_pre(q.size() / dk * dv * sizeof(float), "o");
  simple_gla_chunked_forward_cuda(o_pre.as<float>(), st.as<float>(),
                                  {dq.as<float>(), dkb.as<float>(), dvb.as<float>(), dg.as<float>(), st.as<float>(),
                                   dcu.as<int64_t>()},
                                  p, ws.as<float>(), bytes, ctx().stream());
  std::vector<float> o_gpu(o32.size());
  const std::vector<float> pre = o_pre.download<float>();
  for (size_t s = 0; s < 2; ++s)  // scatter the prefill rows back to their places in the whole batch
    std::copy(pre.begin() + cu_pre[s] * H * dv, pre.begin() + cu_pre[s + 1] * H * dv,
              o_gpu.begin() + in.cu[s] * H * dv);
  const std::vector<int64_t> cu_dec = {0, 1, 2};
  DeviceBuffer dcu1 = DeviceBuffer::from(cu_dec, "cu decode"), o1(2 * H * dv * sizeof(float), "o decode");
  p.total_tokens = 2;
  for (int64_t j = 0; j < steps; ++j) {
    std::vector<float> q1, k1, v1;
    for (size_t s = 0; s < 2; ++s) {
      const int64_t t = in.cu[s + 1] - steps + j;
      take(in.q, H * dk, t, t + 1, q1);
      take(in.k, H * dk, t, t + 1, k1);
      take(in.v, H * dv, t, t + 1, v1);
    }
    DeviceBuffer a = DeviceBuffer::from(q1, "q1"), b = DeviceBuffer::from(k1, "k1"), c = DeviceBuffer::from(v1, "v1");
    simple_gla_recurrent_forward_cuda(
        o1.as<float>(), st.as<float>(),
        {a.as<float>(), b.as<float>(), c.as<float>(), dg.as<float>(), st.as<float>(), dcu1.as<int64_t>()}, p,
        ctx().stream());
    const std::vector<float> row = o1.download<float>();
    for (size_t s = 0; s < 2; ++s) {
      const int64_t t = in.cu[s + 1] - steps + j;
      std::copy(row.begin() + static_cast<int64_t>(s) * H * dv, row.begin() + static_cast<int64_t>(s + 1) * H * dv,
                o_gpu.begin() + t * H * dv);
    }
  }
  const double kk = k_chunked(whole, in) + k_recurrent({{steps}, H, dk, dv, 64, true}, in);
  EXPECT_TRUE(check_f32(name(whole, "prefill+decode o"), o_gpu, o32, o64, mag_o, {kk}));
  EXPECT_TRUE(check_f32(name(whole, "prefill+decode state"), st.download<float>(), s32, s64, mag_s, {kk}));
}

// The Lightning mixer's group RMSNorm + sigmoid gate: cpu32 = layers/lightning_layer.cpp's loop (sum of squares in
// double, the inverse and the sigmoid rounded to float), ref64 all in double. The kernel sums the squares in fp32
// over `width` terms (≤ width·u relative in the mean, half of it in the inverse square root) and rounds ~8 times
// more (rsqrt, expf, the sigmoid's division, three products): k = width + 10, mag = |ref64|.
TEST(SimpleGlaCuda, LightningGroupNormGate) {
  HLM_REQUIRE_CUDA();
  struct Case {
    int64_t T, I, G;
  };
  for (const Case& c : std::vector<Case>{{37, 96, 4}, {5, 2048, 4}, {9, 48, 1}, {3, 7, 7}}) {
    for (const Fill fill : {Fill::Normal, Fill::Large, Fill::Special}) {
      const auto n = static_cast<size_t>(c.T * c.I);
      const std::vector<float> o = make_values(n, fill, 61), gate = make_values(n, fill, 62, 3.0f);
      const std::vector<float> w = make_values(static_cast<size_t>(c.I), Fill::Normal, 63);
      const float eps = 1e-6f;
      const int64_t width = c.I / c.G;
      std::vector<float> cpu32(n);
      std::vector<double> ref64(n);
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t g = 0; g < c.G; ++g) {
          const int64_t base = t * c.I + g * width;
          double sq = 0.0;
          for (int64_t j = 0; j < width; ++j) sq += static_cast<double>(o[base + j]) * o[base + j];
          const double inv64 = 1.0 / std::sqrt(sq / static_cast<double>(width) + eps);
          const float inv = static_cast<float>(inv64);
          for (int64_t j = 0; j < width; ++j) {
            const double s64 = 1.0 / (1.0 + std::exp(-static_cast<double>(gate[base + j])));
            const float s = static_cast<float>(s64);
            cpu32[base + j] = w[g * width + j] * (o[base + j] * inv) * s;
            ref64[base + j] = static_cast<double>(w[g * width + j]) * (static_cast<double>(o[base + j]) * inv64) * s64;
          }
        }
      DeviceBuffer d_o = DeviceBuffer::from(o, "o"), d_g = DeviceBuffer::from(gate, "gate"),
                   d_w = DeviceBuffer::from(w, "weight"), d_y(n * sizeof(float), "y");
      lightning_group_norm_gate_cuda(d_y.as<float>(), d_o.as<float>(), d_g.as<float>(), d_w.as<float>(), c.T, c.I,
                                     c.G, eps, ctx().stream());
      const std::string what = "lightning_group_norm_gate T=" + std::to_string(c.T) + " I=" + std::to_string(c.I) +
                               " G=" + std::to_string(c.G) + " " + fill_name(fill);
      EXPECT_TRUE(check_f32(what, d_y.download<float>(), cpu32, ref64, abs_of(ref64),
                            {static_cast<double>(width) + 10.0}));
      EXPECT_TRUE(buffers_ok({&d_y}, {&d_o, &d_g, &d_w})) << what;
      // In place (y = o), as the layer calls it: the same bits.
      lightning_group_norm_gate_cuda(d_o.as<float>(), d_o.as<float>(), d_g.as<float>(), d_w.as<float>(), c.T, c.I,
                                     c.G, eps, ctx().stream());
      EXPECT_TRUE(check_exact(what + " in place", d_o.download<float>(), d_y.download<float>()));
    }
  }
}

// Speed at Ring-mini-linear-2.0's mixer shape (16 heads, dk = dv = 128, chunk 64; one Lightning layer's scan), printed
// only (no bound): a 4096-token prefill in the chunked form and in the token recurrence, and decode steps of 1 and 64
// sequences.
TEST(SimpleGlaCuda, TimingRingMiniShape) {
  HLM_REQUIRE_CUDA();
  const int64_t H = 16, D = 128;
  const auto time_ms = [](const auto& fn) {
    fn();  // warm-up (lazy kernel loading, shared-memory opt-in)
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const int reps = 10;
    cudaEventRecord(a, ctx().stream());
    for (int i = 0; i < reps; ++i) fn();
    cudaEventRecord(b, ctx().stream());
    cudaEventSynchronize(b);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / reps;
  };
  for (const int64_t seqs : {int64_t{1}, int64_t{64}}) {
    for (const int64_t len : {int64_t{1}, int64_t{4096}}) {
      if (seqs == 64 && len > 1) continue;
      const int64_t T = seqs * len;
      std::vector<int64_t> cu = {0};
      for (int64_t s = 0; s < seqs; ++s) cu.push_back(cu.back() + len);
      const std::vector<double> g64 = ring_linear_decay(0, 20, H);
      const std::vector<float> g(g64.begin(), g64.end());
      DeviceBuffer q = DeviceBuffer::from(make_values(static_cast<size_t>(T * H * D), Fill::Normal, 71), "q");
      DeviceBuffer k = DeviceBuffer::from(make_values(static_cast<size_t>(T * H * D), Fill::Normal, 72), "k");
      DeviceBuffer v = DeviceBuffer::from(make_values(static_cast<size_t>(T * H * D), Fill::Normal, 73), "v");
      DeviceBuffer dg = DeviceBuffer::from(g, "g"), dcu = DeviceBuffer::from(cu, "cu");
      DeviceBuffer o(static_cast<size_t>(T * H * D) * sizeof(float), "o");
      DeviceBuffer st(static_cast<size_t>(seqs * H * D * D) * sizeof(float), "state");
      cudaMemsetAsync(st.as<float>(), 0, st.bytes(), ctx().stream());
      SimpleGlaCudaParams p;
      p.total_tokens = T;
      p.heads = H;
      p.key_dim = D;
      p.value_dim = D;
      p.n_seqs = seqs;
      p.chunk = 64;
      const SimpleGlaCudaInputs in{q.as<float>(), k.as<float>(), v.as<float>(), dg.as<float>(), st.as<float>(),
                                   dcu.as<int64_t>()};
      const float rec = time_ms([&] { simple_gla_recurrent_forward_cuda(o.as<float>(), st.as<float>(), in, p, ctx().stream()); });
      if (len == 1) {
        std::printf("[time] simple_gla decode step, %lld sequences, H 16 dk = dv = 128: %.4f ms\n",
                    static_cast<long long>(seqs), rec);
        continue;
      }
      const size_t bytes = simple_gla_chunked_cuda_workspace_bytes(p);
      DeviceBuffer ws(bytes, "ws");
      const float chk = time_ms([&] {
        simple_gla_chunked_forward_cuda(o.as<float>(), st.as<float>(), in, p, ws.as<float>(), bytes, ctx().stream());
      });
      std::printf("[time] simple_gla scan, %lld tokens, H 16 dk = dv = 128 chunk 64: chunked %.3f ms, recurrent %.3f "
                  "ms (workspace %.1f MB)\n", static_cast<long long>(T), chk, rec, static_cast<double>(bytes) / 1e6);
    }
  }
}
