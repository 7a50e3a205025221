// Mamba-2 SSD scan: CUDA (src/ops/mamba2_ssd/mamba2_ssd.cu) vs the CPU reference (mamba2_ssd_ref.cpp: the float
// instantiation as cpu32, the double one as ref64). Both CUDA forms against the reference's same form: the chunked
// kernels vs mamba2_ssd_chunked_forward, the token recurrence vs mamba2_ssd_recurrent_forward; outputs y and final
// states checked separately. x, B, C are read from one packed xBC buffer with a padded row stride, as the mixer passes
// them (the CPU gets contiguous copies).
// Cases: odd P and N (3, 5; 33, 40), packed sequences of 1, 5, 7 / 65, 0 (empty), 127 / 300 tokens, chunks 1, 4, 8,
// 32 (lengths on and across chunk boundaries), 256 with Granite-4.0-H's P 64 / N 128, the dims limit P = N = 256
// (dynamic shared memory past 48 KiB), groups 1 and 2, an initial state or none, dt limits applied or not, extreme
// gates (softplus above its threshold 20, dt ~ 1e-13, A_log 3: decays of e^−600), a decode step (one token per
// sequence) with the state updated in place (state_out = state_in), NaN in x / B / dt_raw of one sequence (NaN parity;
// the other sequences bit-identical to a clean run), and a rerun for bit-identical results. Guards on every buffer.
//
// Tolerance (fp32 rule, harness.h), mag = the recurrence in double over |x|, |B|, |C|, |D|, |state_in| (every decay
// and dt is positive, so this bounds the sum of |terms| behind each y and state element). Chains of fp32 roundings:
//   chunked: a C·B or S·C dot over N (N FMAs), the in-chunk sum over ≤ Q tokens (Q), the chunk-state sum (Q), the
//     state scan (one FMA per chunk: n_chunks), and ~12 for softplus / expf / products: k = 2N + 2Q + n_chunks + 12;
//     plus the decays' exponents: c_t is a serial fp32 sum of ≤ Q terms, so its absolute error is ≤ Q·u·|c|max and
//     e^{c} carries that as a relative error: + Q·|c|max per chunk crossed (the reference sums c in double).
//   recurrent: per token the update (2 roundings) and e^{dt·A} (2 ulp + |dt·A|·u from the product), then the dot over
//     N (N/32 FMAs + 5 tree levels) and the D FMA: k = Σ_t (4 + |dt_t·A|) + N + 8.
// A wrong group, decay, chunk boundary or state hand-over is O(1) relative, far above these bounds (≤ ~1e-4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/mamba2_ssd/mamba2_ssd.h"
#include "ops/mamba2_ssd/mamba2_ssd_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct SsdCase {
  std::vector<int64_t> lens;
  int64_t nh, P, G, N, chunk;
  bool state_in;
  bool clamp;          // dt limits (0.01, 0.5) applied
  int edge = 0;        // 0 normal; 1 extreme gates; 2 NaN in sequence 1 (x, B, dt_raw at three tokens)
  bool in_place = false;  // state_out = state_in (decode)
};

const std::vector<SsdCase> kCases = {
    {{1, 5, 7}, 4, 3, 2, 5, 4, true, false},          // odd P, N; chunk 4 with 1, 5, 7 tokens
    {{1, 5, 7}, 4, 3, 2, 5, 1, false, true},          // chunk 1, clamped dt
    {{65, 0, 127}, 8, 16, 2, 12, 8, true, false},     // granitemoehybrid_tiny's mixer shape, an empty sequence
    {{33, 64}, 2, 33, 1, 40, 32, true, true},         // 33 = one past a chunk, 64 = two whole chunks
    {{300}, 4, 64, 1, 128, 256, true, false},         // Granite-4.0-H's P, N, chunk; crosses the chunk at 256
    {{40, 9}, 1, 256, 1, 256, 16, true, false},       // dims limit
    {{20, 45}, 3, 8, 1, 16, 16, true, false, 1},      // extreme gates
    {{20, 45, 31}, 4, 8, 2, 16, 16, true, false, 2},  // NaN confined to sequence 1
    {{1, 1, 1, 1}, 4, 16, 2, 12, 8, true, false, 0, true},  // decode step, state in place
    {{1, 1, 1}, 4, 64, 1, 128, 256, true, true, 0, true},   // decode at Granite's shape, clamped
};

std::string name(const SsdCase& c, const char* what) {
  std::string lens;
  for (int64_t l : c.lens) lens += (lens.empty() ? "" : ",") + std::to_string(l);
  return "mamba2_ssd." + std::string(what) + " lens=" + lens + " nh=" + std::to_string(c.nh) +
         " P=" + std::to_string(c.P) + " G=" + std::to_string(c.G) + " N=" + std::to_string(c.N) +
         " Q=" + std::to_string(c.chunk) + (c.state_in ? " state" : "") + (c.clamp ? " clamp" : "") +
         (c.edge == 1 ? " extreme" : c.edge == 2 ? " nan" : "") + (c.in_place ? " in-place" : "");
}

struct Inputs {
  int64_t T = 0, Im = 0, GN = 0, stride = 0;
  std::vector<int64_t> cu;
  std::vector<float> xbc;  // [T, stride]: x [nh·P] | B [G·N] | C [G·N] | padding
  std::vector<float> x, B, C, dt_raw, dt_bias, A_log, D, state;
};

Inputs make_inputs(const SsdCase& c, bool poison) {
  Inputs in;
  in.cu = {0};
  for (int64_t l : c.lens) in.cu.push_back(in.cu.back() + l);
  in.T = in.cu.back();
  in.Im = c.nh * c.P;
  in.GN = c.G * c.N;
  in.stride = in.Im + 2 * in.GN + 3;  // padded rows: the kernels must honour the stride
  const size_t T = static_cast<size_t>(in.T);
  in.xbc = make_values(T * static_cast<size_t>(in.stride), Fill::Normal, 11);
  in.dt_raw = make_values(T * static_cast<size_t>(c.nh), Fill::Normal, 12);
  in.dt_bias = make_values(static_cast<size_t>(c.nh), Fill::Normal, 13, 0.5f);
  in.A_log = make_values(static_cast<size_t>(c.nh), Fill::Normal, 14, 0.5f);
  in.D = make_values(static_cast<size_t>(c.nh), Fill::Normal, 15);
  in.state = make_values(static_cast<size_t>(static_cast<int64_t>(c.lens.size()) * c.nh * c.P * c.N), Fill::Normal,
                         16, 0.5f);
  if (c.edge == 1) {
    for (size_t i = 0; i < in.dt_raw.size(); ++i) {
      if (i % 5 == 0) in.dt_raw[i] = 30.0f;                 // above softplus's threshold: dt = 30.x
      if (i % 5 == 1) in.dt_raw[i] = -30.0f;                // dt ~ 1e-13
    }
    in.A_log[0] = 3.0f;  // A = −20: decays of e^−600 with dt 30 (underflow to 0)
    in.A_log[1] = -6.0f;  // A = −0.0025: almost no decay
  }
  if (poison && c.edge == 2) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int64_t s = in.cu[1];  // sequence 1's tokens: x of head 1 at its 3rd token, B of group 0 at its 10th,
    in.xbc[static_cast<size_t>((s + 2) * in.stride + 1 * c.P + 3)] = nan;  // dt_raw of head 2 at its 30th
    in.xbc[static_cast<size_t>((s + 9) * in.stride + in.Im + 5)] = nan;
    in.dt_raw[static_cast<size_t>((s + 29) * c.nh + 2)] = nan;
  }
  for (size_t t = 0; t < T; ++t) {
    const float* row = in.xbc.data() + t * static_cast<size_t>(in.stride);
    in.x.insert(in.x.end(), row, row + in.Im);
    in.B.insert(in.B.end(), row + in.Im, row + in.Im + in.GN);
    in.C.insert(in.C.end(), row + in.Im + in.GN, row + in.Im + 2 * in.GN);
  }
  return in;
}

Mamba2DtLimits limits_of(const SsdCase& c) { return c.clamp ? Mamba2DtLimits{0.01, 0.5, true} : Mamba2DtLimits{0.0, std::numeric_limits<double>::infinity(), false}; }

template <typename T>
std::vector<T> cast(const std::vector<float>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The reference (recurrent or chunked) in T over `in` (abs: every input by its absolute value, for the magnitudes).
template <typename T>
void reference(const SsdCase& c, const Inputs& in, bool chunked, bool abs, std::vector<T>& y, std::vector<T>& state) {
  const auto prep = [&](const std::vector<float>& v) {
    std::vector<T> r = cast<T>(v);
    if (abs)
      for (T& e : r) e = std::abs(e);
    return r;
  };
  const std::vector<T> x = prep(in.x), B = prep(in.B), C = prep(in.C), D = prep(in.D), s0 = prep(in.state);
  const std::vector<T> dt = cast<T>(in.dt_raw), bias = cast<T>(in.dt_bias), A_log = cast<T>(in.A_log);
  y.assign(static_cast<size_t>(in.T * in.Im), T(0));
  state.assign(in.state.size(), T(0));
  const Mamba2Shape shape{in.T, c.nh, c.P, c.G, c.N};
  const Mamba2Inputs<T> ri{x.data(), dt.data(), bias.data(), A_log.data(), B.data(), C.data(), D.data(),
                           c.state_in ? s0.data() : nullptr, in.cu.data(), static_cast<int64_t>(c.lens.size())};
  if (chunked)
    mamba2_ssd_chunked_forward<T>({y.data(), state.data()}, ri, shape, limits_of(c), c.chunk);
  else
    mamba2_ssd_recurrent_forward<T>({y.data(), state.data()}, ri, shape, limits_of(c));
}

struct GpuResult {
  std::vector<float> y, state;
};

GpuResult run_gpu(const SsdCase& c, const Inputs& in, bool chunked, bool check_buffers) {
  const int64_t S = static_cast<int64_t>(c.lens.size());
  DeviceBuffer xbc = DeviceBuffer::from(in.xbc, "xbc"), dt = DeviceBuffer::from(in.dt_raw, "dt_raw"),
               bias = DeviceBuffer::from(in.dt_bias, "dt_bias"), A_log = DeviceBuffer::from(in.A_log, "A_log"),
               D = DeviceBuffer::from(in.D, "D"), cu = DeviceBuffer::from(in.cu, "cu_seqlens");
  DeviceBuffer s_in = DeviceBuffer::from(in.state, "state_in");
  DeviceBuffer y(static_cast<size_t>(std::max<int64_t>(in.T * in.Im, 1)) * sizeof(float), "y");
  DeviceBuffer s_out(in.state.size() * sizeof(float), "state_out");
  Mamba2CudaParams p;
  p.total_tokens = in.T;
  p.heads = c.nh;
  p.head_dim = c.P;
  p.groups = c.G;
  p.state_dim = c.N;
  p.n_seqs = S;
  p.chunk = c.chunk;
  p.x_stride = p.bc_stride = in.stride;
  const Mamba2DtLimits lim = limits_of(c);
  p.dt_clamp = lim.apply;
  p.dt_lo = static_cast<float>(lim.lo);
  p.dt_hi = static_cast<float>(lim.hi);
  float* base = xbc.as<float>();
  const float* state_in = c.state_in ? s_in.as<float>() : nullptr;
  float* state_out = c.in_place ? s_in.as<float>() : s_out.as<float>();
  if (c.in_place && !c.state_in) state_in = nullptr;
  const Mamba2CudaInputs di{base, dt.as<float>(), bias.as<float>(), A_log.as<float>(), base + in.Im,
                            base + in.Im + in.GN, D.as<float>(), state_in, cu.as<int64_t>()};
  if (chunked) {
    const size_t bytes = mamba2_ssd_chunked_cuda_workspace_bytes(p);
    DeviceBuffer ws(std::max<size_t>(bytes, 16), "workspace");
    mamba2_ssd_chunked_forward_cuda(y.as<float>(), state_out, di, p, ws.as<float>(), bytes, ctx().stream());
    ctx().synchronize();
    if (check_buffers) EXPECT_TRUE(ws.guards_intact()) << name(c, "workspace guards");
  } else {
    mamba2_ssd_recurrent_forward_cuda(y.as<float>(), state_out, di, p, ctx().stream());
  }
  GpuResult r;
  r.y = y.download<float>();
  r.y.resize(static_cast<size_t>(in.T * in.Im));
  r.state = c.in_place ? s_in.download<float>() : s_out.download<float>();
  if (check_buffers) {
    if (c.in_place)
      EXPECT_TRUE(buffers_ok({&y, &s_in}, {&xbc, &dt, &bias, &A_log, &D, &cu})) << name(c, "buffers");
    else
      EXPECT_TRUE(buffers_ok({&y, &s_out}, {&xbc, &dt, &bias, &A_log, &D, &cu, &s_in})) << name(c, "buffers");
  }
  return r;
}

// Chain lengths of the header comment.
double k_chunked(const SsdCase& c, const Inputs& in) {
  const Mamba2DtLimits lim = limits_of(c);
  double cmax = 0.0;
  int64_t n_chunks = 0;
  for (size_t s = 0; s + 1 < in.cu.size(); ++s) {
    n_chunks = std::max(n_chunks, (in.cu[s + 1] - in.cu[s] + c.chunk - 1) / c.chunk);
    for (int64_t h = 0; h < c.nh; ++h) {
      double cum = 0.0;
      const double A = -std::exp(static_cast<double>(in.A_log[static_cast<size_t>(h)]));
      for (int64_t t = in.cu[s]; t < in.cu[s + 1]; ++t) {
        if ((t - in.cu[s]) % c.chunk == 0) cum = 0.0;
        const double dt = mamba2_dt(in.dt_raw[static_cast<size_t>(t * c.nh + h)], in.dt_bias[static_cast<size_t>(h)], lim);
        if (std::isfinite(dt)) cum += dt * A;
        cmax = std::max(cmax, std::abs(cum));
      }
    }
  }
  return 2.0 * static_cast<double>(c.N + c.chunk) + static_cast<double>(n_chunks) + 12.0 +
         static_cast<double>(c.chunk) * cmax * static_cast<double>(std::max<int64_t>(n_chunks, 1));
}

double k_recurrent(const SsdCase& c, const Inputs& in) {
  const Mamba2DtLimits lim = limits_of(c);
  double worst = 0.0;
  for (size_t s = 0; s + 1 < in.cu.size(); ++s)
    for (int64_t h = 0; h < c.nh; ++h) {
      const double A = -std::exp(static_cast<double>(in.A_log[static_cast<size_t>(h)]));
      double k = 0.0;
      for (int64_t t = in.cu[s]; t < in.cu[s + 1]; ++t) {
        const double dt = mamba2_dt(in.dt_raw[static_cast<size_t>(t * c.nh + h)], in.dt_bias[static_cast<size_t>(h)], lim);
        k += 4.0 + (std::isfinite(dt) ? std::abs(dt * A) : 0.0);
      }
      worst = std::max(worst, k);
    }
  return worst + static_cast<double>(c.N) + 8.0;
}

// The elements of x [T, per] outside tokens [a, b).
std::vector<float> rows_except(const std::vector<float>& x, int64_t per, int64_t a, int64_t b) {
  std::vector<float> out(x.begin(), x.begin() + a * per);
  out.insert(out.end(), x.begin() + b * per, x.end());
  return out;
}

}  // namespace

TEST(Mamba2SsdCuda, ChunkedAndRecurrentF32) {
  HLM_REQUIRE_CUDA();
  for (const SsdCase& c : kCases) {
    const Inputs in = make_inputs(c, true);
    std::vector<double> mag_y, mag_s;
    reference<double>(c, in, false, true, mag_y, mag_s);
    for (const bool chunked : {true, false}) {
      if (chunked && c.in_place) continue;  // decode steps run the recurrence
      const char* form = chunked ? "chunked" : "recurrent";
      std::vector<float> y32, s32;
      std::vector<double> y64, s64;
      reference<float>(c, in, chunked, false, y32, s32);
      reference<double>(c, in, chunked, false, y64, s64);
      const double k = chunked ? k_chunked(c, in) : k_recurrent(c, in);
      const GpuResult g = run_gpu(c, in, chunked, true);
      EXPECT_TRUE(check_f32(name(c, (std::string(form) + " y").c_str()), g.y, y32, y64, mag_y, {k}));
      EXPECT_TRUE(check_f32(name(c, (std::string(form) + " state").c_str()), g.state, s32, s64, mag_s, {k}));
      // Deterministic: a rerun gives the same bits.
      const GpuResult again = run_gpu(c, in, chunked, false);
      EXPECT_TRUE(check_exact(name(c, (std::string(form) + " y rerun").c_str()), again.y, g.y));
      EXPECT_TRUE(check_exact(name(c, (std::string(form) + " state rerun").c_str()), again.state, g.state));
      if (c.edge == 2) {  // NaN stays in sequence 1: the other sequences equal a clean run, bit for bit
        const Inputs clean = make_inputs(c, false);
        const GpuResult r = run_gpu(c, clean, chunked, false);
        const int64_t per_state = c.nh * c.P * c.N;
        EXPECT_TRUE(check_exact(name(c, (std::string(form) + " y outside the poisoned sequence").c_str()),
                                rows_except(g.y, in.Im, in.cu[1], in.cu[2]),
                                rows_except(r.y, in.Im, in.cu[1], in.cu[2])));
        EXPECT_TRUE(check_exact(name(c, (std::string(form) + " state outside the poisoned sequence").c_str()),
                                rows_except(g.state, per_state, 1, 2), rows_except(r.state, per_state, 1, 2)));
        size_t nans = 0;
        for (float v : g.y) nans += std::isnan(v) ? 1 : 0;
        EXPECT_GT(nans, 0u) << name(c, "poison reached y");
      }
    }
  }
}

// The mixer's elementwise steps: the same float operations as layers/mamba2_layer.cpp (silu(v) = v / (1 + e^−v);
// expf vs std::exp: ≤ 2 ulp in e^−v, so ≤ 4 roundings in silu and 5 after the gate's product).
TEST(Mamba2SsdCuda, ConvBiasSiluAndGate) {
  HLM_REQUIRE_CUDA();
  const int64_t T = 37, C = 101;
  for (const Fill fill : {Fill::Normal, Fill::Large, Fill::Special}) {
    const std::vector<float> x = make_values(static_cast<size_t>(T * C), fill, 21, 3.0f);
    const std::vector<float> bias = make_values(static_cast<size_t>(C), Fill::Normal, 22);
    const std::vector<float> z = make_values(static_cast<size_t>(T * C), fill, 23, 3.0f);
    for (const bool with_bias : {true, false}) {
      std::vector<float> cpu32(x.size()), gate32(x.size());
      std::vector<double> ref64(x.size()), gate64(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const float v = with_bias ? x[i] + bias[i % C] : x[i];
        cpu32[i] = v / (1.0f + std::exp(-v));
        ref64[i] = static_cast<double>(v) / (1.0 + std::exp(-static_cast<double>(v)));
        gate32[i] = x[i] * (z[i] / (1.0f + std::exp(-z[i])));
        gate64[i] = static_cast<double>(x[i]) * (static_cast<double>(z[i]) / (1.0 + std::exp(-static_cast<double>(z[i]))));
      }
      DeviceBuffer dx = DeviceBuffer::from(x, "xbc"), db = DeviceBuffer::from(bias, "bias");
      mamba2_conv_bias_silu_cuda(dx.as<float>(), with_bias ? db.as<float>() : nullptr, T, C, ctx().stream());
      const std::string what = std::string("mamba2_conv_bias_silu ") + fill_name(fill) + (with_bias ? " bias" : "");
      EXPECT_TRUE(check_f32(what, dx.download<float>(), cpu32, ref64, abs_of(ref64), {4}));
      DeviceBuffer dy = DeviceBuffer::from(x, "y"), dz = DeviceBuffer::from(z, "z");
      mamba2_gate_silu_cuda(dy.as<float>(), dz.as<float>(), T * C, ctx().stream());
      EXPECT_TRUE(check_f32(std::string("mamba2_gate_silu ") + fill_name(fill), dy.download<float>(), gate32, gate64,
                            abs_of(gate64), {5}));
      EXPECT_TRUE(buffers_ok({&dx, &dy}, {&db, &dz}));
    }
  }
}

// Speed at Granite-4.0-H's mixer shape (nh 128, P 64, N 128, G 1, chunk 256; one Mamba-2 layer's scan), printed only
// (no bound): a 4096-token prefill in the chunked form and in the token recurrence, and decode steps of 1 and 64
// sequences. Inputs N(0, 1), dt_raw N(0, 1) − 2; the kernels' time does not depend on the values.
TEST(Mamba2SsdCuda, TimingGraniteShape) {
  HLM_REQUIRE_CUDA();
  const int64_t nh = 128, P = 64, G = 1, N = 128, Q = 256, stride = nh * P + 2 * G * N;
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
      std::vector<float> dtr = make_values(static_cast<size_t>(T * nh), Fill::Normal, 32);
      for (float& v : dtr) v -= 2.0f;
      DeviceBuffer xbc = DeviceBuffer::from(make_values(static_cast<size_t>(T * stride), Fill::Normal, 31), "xbc");
      DeviceBuffer dt = DeviceBuffer::from(dtr, "dt");
      DeviceBuffer par = DeviceBuffer::from(make_values(static_cast<size_t>(3 * nh), Fill::Normal, 33, 0.5f), "par");
      DeviceBuffer cud = DeviceBuffer::from(cu, "cu");
      DeviceBuffer y(static_cast<size_t>(T * nh * P) * sizeof(float), "y");
      DeviceBuffer st(static_cast<size_t>(seqs * nh * P * N) * sizeof(float), "state");
      cudaMemsetAsync(st.as<float>(), 0, st.bytes(), ctx().stream());
      Mamba2CudaParams p;
      p.total_tokens = T;
      p.heads = nh;
      p.head_dim = P;
      p.groups = G;
      p.state_dim = N;
      p.n_seqs = seqs;
      p.chunk = Q;
      p.x_stride = p.bc_stride = stride;
      float* base = xbc.as<float>();
      const float* pr = par.as<float>();
      const Mamba2CudaInputs in{base, dt.as<float>(), pr, pr + nh, base + nh * P, base + nh * P + G * N, pr + 2 * nh,
                                st.as<float>(), cud.as<int64_t>()};
      const float rec = time_ms([&] { mamba2_ssd_recurrent_forward_cuda(y.as<float>(), st.as<float>(), in, p, ctx().stream()); });
      if (len == 1) {
        std::printf("[time] mamba2 decode step, %lld sequences, nh 128 P 64 N 128: %.4f ms\n",
                    static_cast<long long>(seqs), rec);
        continue;
      }
      const size_t bytes = mamba2_ssd_chunked_cuda_workspace_bytes(p);
      DeviceBuffer ws(bytes, "ws");
      const float chk = time_ms([&] {
        mamba2_ssd_chunked_forward_cuda(y.as<float>(), st.as<float>(), in, p, ws.as<float>(), bytes, ctx().stream());
      });
      std::printf("[time] mamba2 scan, %lld tokens, nh 128 P 64 N 128 chunk 256: chunked %.3f ms, recurrent %.3f ms "
                  "(workspace %.1f MB)\n", static_cast<long long>(T), chk, rec, static_cast<double>(bytes) / 1e6);
    }
  }
}
