// Chunked LM-head losses: CUDA (src/ops/lm_head_loss/lm_head_loss.cu) vs the CPU float implementation
// (train/lm_head_cross_entropy.cpp, lm_head_forward_kl.cpp: chunked, sgemm; without OpenBLAS in the standalone build
// the full-logits float reference stands in) and the fp64 full-logits reference (lm_head_loss_ref.cpp, double
// instantiation) on the same inputs. Outputs: per-token values, d_hidden (overwritten), d_weight (accumulated onto a
// non-zero start), and the device-side loss / mean / count.
// Cases: odd N, V not a multiple of the chunk, chunk > V and row block > N, one-row blocks, ignored targets (−100) and
// a target in the last (partial) chunk, token weights, a Granite logits divisor, logits of ~±80 and beyond (std 30),
// all-zero hidden states (uniform softmax), a NaN hidden row (NaN parity of the per-token values), τ = 1 and τ = 2,
// forward only (no gradients), N = 0, and a target ≥ V (error flag); the KL cases again in the bf16 compute mode
// (bf16-representable inputs, bf16 products, dz rounded to bf16: the extra terms are stated at run_kl_case).
//
// Tolerances (fp32 rule with k = 1 and mag = the derived bound in units of u; per row t of a head with scale
// s = 1/(divisor·τ), z = s·h·Wᵀ, A_t = max_v |s|·Σ_k |h_tk|·|W_vk|, T = lm_head_cuda_threads(), Cb the chunk):
//   e_z = (H + 3)·A_t: the cuBLASLt fp32 dot product (≤ H roundings on Σ|h||W|, any summation tree, FMA or not), its
//     f32 output, s rounded to f32, and the product by s.
//   e_lse = e_z + ceil(Cb/T) + 4 + spread_t: log-sum-exp moves by at most the largest logit error; Σ exp has
//     relative error ≤ (ceil(Cb/T) − 1) fp32 additions per thread + 4 (expf: ≤ 2 ulp = 4u) + spread_t = Σ_v p_v·|z_v −
//     max z| (each term's argument z − running max is rounded, ≤ u·|z − max| relative, weighted by the term) + 1 to
//     spare for the fp64 combination and log.
//   CE_t = lse − z_target: mag = e_lse + e_z + |CE_t| (f32 output rounding).
//   KL_t = Σ p_T (a − b), a = log p_T, b = log p_S (fp64 from f32 logits): with α = e_z,T + e_lse,T and
//     β = e_z,S + e_lse,S, mag = α + β + α·Σ_v p_T·|a − b| + Σ_v ε_T·p_T·|a − b| + |KL_t|, where ε = 4 + |log p|
//     is the KL pass's f32 exp of the fp64 log probability rounded to f32 (expf ≤ 2 ulp, the rounding u·|log p|).
//   dz: |Δdz_tv| ≤ u·d_tv, d_tv = |w_t·g|·(p·(e_z + e_lse)) + |dz_tv| (CE: g = s, p = p_tv; KL: g = τ²·s_S and
//     p·(…) = p_S·(β + ε_S) + p_T·(α + ε_T), the ε terms the f32 exps), the last term the f32 rounding of dz.
//   dh_tk = Σ_v dz_tv·W_vk: mag = Σ_v (d_tv + L_h·|dz_tv|)·|W_vk|, L_h = V + ceil(V/Cb) + 1 (the product's sum plus
//     one accumulation per chunk);
//   dW_vk += Σ_t dz_tv·h_tk: mag = Σ_t d_tv·|h_tk| + L_w·(Σ_t |dz_tv·h_tk| + |dW0_vk|), L_w = N + ceil(N/Rb) + 1.
//   loss (fp64 on the device from fp64 per-token values): |Δ| ≤ u·Σ_t |w_t|·(mag_t − |value_t|) (KL: · τ²)
//     + 2^-40·Σ_t|w_t·value_t| (fp64 sums in a different order); mean likewise with 1/count.
// These are worst-case bounds (typical errors are ~sqrt of them); a dropped chunk, a wrong rescale, a missed target,
// a wrong τ or divisor factor moves results by ≥ 1e-3 relative, far outside them.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "harness.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"
#include "train/lm_head_loss.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct HeadShape {
  int64_t H;
  double divisor;
};

struct LossCase {
  int64_t N, V;
  HeadShape student, teacher;  // CE uses `student` only
  int64_t vocab_chunk, row_block;
  double logit_std;            // target standard deviation of the logits (30: many beyond ±80)
  double tau;                  // KL only
  bool weights, grad;
  bool zero_hidden = false, nan_row = false;
};

// CE cases: {N, V, head, -, chunk, rows, logit std, -, weights, grad, ...}.
const std::vector<LossCase> kCeCases = {
    {37, 1000, {48, 1.0}, {}, 256, 16, 3.0, 1.0, false, true},
    {1, 1, {1, 1.0}, {}, 4096, 1024, 3.0, 1.0, false, true},
    {65, 4097, {33, 8.0}, {}, 1024, 64, 30.0, 1.0, true, true},   // Granite divisor, large logits, weights
    {37, 1000, {64, 1.0}, {}, 4096, 1024, 3.0, 1.0, false, true},  // one chunk, one row block
    {37, 1000, {48, 1.0}, {}, 1000, 16, 3.0, 1.0, true, true},     // one chunk of exactly V, three row blocks: pass 2
                                                                   // reuses pass 1's tile in each
    {9, 300, {16, 1.0}, {}, 7, 1, 30.0, 1.0, true, true},          // tiny chunks, one-row blocks
    {5, 300, {16, 1.0}, {}, 128, 2, 3.0, 1.0, false, true, true},  // zero hidden: uniform softmax
    {37, 1000, {48, 1.0}, {}, 256, 16, 3.0, 1.0, true, false},     // forward only
    {37, 1000, {48, 1.0}, {}, 256, 16, 3.0, 1.0, false, false, false, true},  // NaN row, forward only
};

// KL cases: {N, V, student, teacher, chunk, rows, logit std, tau, weights, grad}.
const std::vector<LossCase> kKlCases = {
    {37, 1000, {48, 1.0}, {40, 1.0}, 256, 16, 3.0, 1.0, false, true},
    {37, 1000, {48, 0.9}, {40, 1.2}, 256, 16, 3.0, 2.0, false, true},
    {65, 4097, {33, 4.0}, {40, 1.0}, 1024, 64, 30.0, 2.0, true, true},
    {65, 4097, {33, 1.0}, {40, 1.0}, 1024, 64, 30.0, 1.0, false, true},
    {9, 300, {16, 1.0}, {24, 1.0}, 7, 1, 3.0, 1.0, true, true},
    {37, 1000, {48, 1.0}, {40, 1.0}, 1000, 16, 3.0, 2.0, true, true},  // one chunk of exactly V, three row blocks:
                                                                       // pass 2 reuses pass 1's two tiles
    {65, 4097, {33, 4.0}, {40, 1.0}, 8192, 64, 30.0, 1.0, false, true},   // one chunk beyond V, large logits
    {37, 1000, {48, 1.0}, {40, 1.0}, 4096, 1024, 3.0, 2.0, true, false},  // forward only
};

std::string name(const LossCase& c, const char* what) {
  return std::string("lm_head.") + what + " N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) +
         " H=" + std::to_string(c.student.H) + " chunk=" + std::to_string(c.vocab_chunk) +
         " rows=" + std::to_string(c.row_block) + " div=" + std::to_string(c.student.divisor) +
         " std=" + std::to_string(c.logit_std) + " tau=" + std::to_string(c.tau) + (c.weights ? " weights" : "") +
         (c.grad ? "" : " fwd-only") + (c.zero_hidden ? " zero-hidden" : "") + (c.nan_row ? " nan-row" : "");
}

// Hidden and weight values whose logits z = h·Wᵀ/divisor have about the requested standard deviation.
struct HeadInputs {
  std::vector<float> h, W;
};
HeadInputs make_head(const LossCase& c, const HeadShape& s, uint64_t stream) {
  const double per_factor = std::sqrt(c.logit_std * std::abs(s.divisor) / std::sqrt(static_cast<double>(s.H)));
  HeadInputs in{make_values(static_cast<size_t>(c.N * s.H), Fill::Normal, stream, static_cast<float>(per_factor)),
                make_values(static_cast<size_t>(c.V * s.H), Fill::Normal, stream + 1, static_cast<float>(per_factor))};
  if (c.zero_hidden) std::fill(in.h.begin(), in.h.end(), 0.0f);
  if (c.nan_row && c.N > 3)
    std::fill(in.h.begin() + 3 * s.H, in.h.begin() + 4 * s.H, std::numeric_limits<float>::quiet_NaN());
  return in;
}

// Targets: mostly random; every 7th ignored (−100); token 1 at V − 1 (the last, partial chunk).
std::vector<int32_t> make_targets(int64_t N, int64_t V) {
  std::vector<int32_t> t(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    t[static_cast<size_t>(i)] =
        (i % 7 == 5) ? -100 : static_cast<int32_t>(philox4x32(7, 77, static_cast<uint64_t>(i))[0] % V);
  if (N > 1) t[1] = static_cast<int32_t>(V - 1);
  return t;
}

std::vector<float> make_weights(int64_t N) {
  std::vector<float> w = make_values(static_cast<size_t>(N), Fill::Normal, 88);
  for (float& x : w) x = 0.25f + std::abs(x);
  return w;
}

// Per-row fp64 statistics of one head at scale s (see the header comment).
struct HeadStats {
  std::vector<double> z, p;    // [N, V]
  std::vector<double> lse;     // [N]
  std::vector<double> e_z, e_lse;  // [N], in units of u
};
HeadStats head_stats(const HeadInputs& in, int64_t N, int64_t V, int64_t H, double s, int64_t chunk,
                     double product_factor = 1.0) {
  const double T = lm_head_cuda_threads();
  HeadStats st;
  st.z.resize(static_cast<size_t>(N * V));
  st.p.resize(st.z.size());
  st.lse.resize(static_cast<size_t>(N));
  st.e_z.resize(st.lse.size());
  st.e_lse.resize(st.lse.size());
  const double sum_terms = std::ceil(static_cast<double>(std::min(chunk, V)) / T) + 4;
  for (int64_t t = 0; t < N; ++t) {
    double zmax = -std::numeric_limits<double>::infinity(), amax = 0;
    for (int64_t v = 0; v < V; ++v) {
      double dot = 0, abs_dot = 0;
      for (int64_t k = 0; k < H; ++k) {
        const double a = in.h[static_cast<size_t>(t * H + k)], b = in.W[static_cast<size_t>(v * H + k)];
        dot += a * b;
        abs_dot += std::abs(a * b);
      }
      const double z = s * dot;
      st.z[static_cast<size_t>(t * V + v)] = z;
      zmax = std::max(zmax, z);
      amax = std::max(amax, std::abs(s) * abs_dot);
    }
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(st.z[static_cast<size_t>(t * V + v)] - zmax);
    const double lse = zmax + std::log(sum);
    st.lse[static_cast<size_t>(t)] = lse;
    double spread = 0;  // Σ_v p_v·|z_v − max z|
    for (int64_t v = 0; v < V; ++v) {
      const double z = st.z[static_cast<size_t>(t * V + v)], p = std::exp(z - lse);
      st.p[static_cast<size_t>(t * V + v)] = p;
      if (p > 0) spread += p * (zmax - z);
    }
    st.e_z[static_cast<size_t>(t)] = (product_factor * static_cast<double>(H) + 3) * amax;
    st.e_lse[static_cast<size_t>(t)] = st.e_z[static_cast<size_t>(t)] + sum_terms + spread;
  }
  return st;
}

// mag of dh [N, H] and dW [V, H] from dz [N, V] and its error bound d [N, V] (header comment).
void grad_magnitudes(const std::vector<double>& dz, const std::vector<double>& d, const HeadInputs& in,
                     const std::vector<float>& dW0, const LossCase& c, int64_t H, std::vector<double>& mag_dh,
                     std::vector<double>& mag_dw, double product_factor = 1.0) {
  const int64_t N = c.N, V = c.V;
  const int64_t Cb = std::min(c.vocab_chunk, V), Rb = std::min(c.row_block, N);
  // product_factor (bf16 mode: 2) scales the products' own additions (tensor-core accumulation, ≤ 2u each).
  const double L_h = product_factor * static_cast<double>(V) + static_cast<double>((V + Cb - 1) / Cb + 1);
  const double L_w = product_factor * static_cast<double>(N) + static_cast<double>((N + Rb - 1) / Rb + 1);
  mag_dh.assign(static_cast<size_t>(N * H), 0.0);
  mag_dw.assign(static_cast<size_t>(V * H), 0.0);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t v = 0; v < V; ++v) {
      const size_t tv = static_cast<size_t>(t * V + v);
      const double a = std::abs(dz[tv]);
      if (a == 0 && d[tv] == 0) continue;
      for (int64_t k = 0; k < H; ++k) {
        const double w = std::abs(static_cast<double>(in.W[static_cast<size_t>(v * H + k)]));
        const double h = std::abs(static_cast<double>(in.h[static_cast<size_t>(t * H + k)]));
        mag_dh[static_cast<size_t>(t * H + k)] += (d[tv] + L_h * a) * w;
        mag_dw[static_cast<size_t>(v * H + k)] += d[tv] * h + L_w * a * h;
      }
    }
  for (size_t i = 0; i < mag_dw.size(); ++i) mag_dw[i] += L_w * std::abs(static_cast<double>(dW0[i]));
}

::testing::AssertionResult check_scalar(const std::string& what, double gpu, double ref, double bound) {
  const double err = std::abs(gpu - ref);
  std::cout << "[check] " << what << ": gpu " << gpu << " ref64 " << ref << " err " << err << " bound " << bound
            << (err <= bound ? "" : " FAIL") << "\n";
  if (err <= bound || (std::isnan(gpu) && std::isnan(ref))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": |" << gpu << " − " << ref << "| = " << err << " > " << bound;
}

// Device buffers of one head's inputs.
struct DeviceHead {
  DeviceBuffer h, W;
};
DeviceHead upload(const HeadInputs& in) { return {DeviceBuffer::from(in.h, "hidden"), DeviceBuffer::from(in.W, "weight")}; }

}  // namespace

TEST(LmHeadLossCuda, CrossEntropy) {
  HLM_REQUIRE_CUDA();
  for (const LossCase& c : kCeCases) {
    const int64_t N = c.N, V = c.V, H = c.student.H;
    const HeadInputs in = make_head(c, c.student, 101);
    const std::vector<int32_t> targets = make_targets(N, V);
    const std::vector<float> weights = c.weights ? make_weights(N) : std::vector<float>{};
    const float* tw = c.weights ? weights.data() : nullptr;
    const std::vector<float> dW0 = make_values(static_cast<size_t>(V * H), Fill::Normal, 103, 0.01f);

    // CPU float (chunked with the same chunking) and fp64 full-logits references.
    const LmHead<float> head32{in.W.data(), V, H, c.student.divisor};
    std::vector<float> ce32(static_cast<size_t>(N)), dh32(static_cast<size_t>(N * H)), dW32 = dW0;
    LmHeadGrad<float> grad32{dh32.data(), dW32.data()};
#if HLM_CUDA_TEST_HAVE_CBLAS
    lm_head_cross_entropy<float>(ce32.data(), in.h.data(), N, head32, targets.data(), tw, c.grad ? &grad32 : nullptr,
                                 LmHeadChunking{c.vocab_chunk, c.row_block});
#else
    lm_head_cross_entropy_full<float>(ce32.data(), in.h.data(), N, head32, targets.data(), tw,
                                      c.grad ? &grad32 : nullptr);
#endif
    const std::vector<double> h64 = to_f64(in.h), W64 = to_f64(in.W), tw64 = to_f64(weights);
    const LmHead<double> head64{W64.data(), V, H, c.student.divisor};
    std::vector<double> ce64(static_cast<size_t>(N)), dh64(static_cast<size_t>(N * H)), dW64 = to_f64(dW0);
    LmHeadGrad<double> grad64{dh64.data(), dW64.data()};
    const TokenLossResult r64 = lm_head_cross_entropy_full<double>(
        ce64.data(), h64.data(), N, head64, targets.data(), c.weights ? tw64.data() : nullptr, &grad64);

    // Magnitudes.
    const double s = 1.0 / c.student.divisor;
    const HeadStats st = head_stats(in, N, V, H, s, c.vocab_chunk);
    std::vector<double> mag_ce(static_cast<size_t>(N)), dz(static_cast<size_t>(N * V)), d(dz.size());
    double loss_bound = 0, mean_bound = 0, loss_abs = 0;
    for (int64_t t = 0; t < N; ++t) {
      const size_t ut = static_cast<size_t>(t);
      const bool counted = targets[ut] >= 0;
      const double w = !counted ? 0.0 : (c.weights ? tw64[ut] : 1.0 / static_cast<double>(r64.count));
      const double e = st.e_lse[ut] + st.e_z[ut];
      mag_ce[ut] = e + std::abs(ce64[ut]);
      loss_bound += std::abs(w) * e * kU;
      loss_abs += std::abs(w * ce64[ut]);
      if (counted) mean_bound += e * kU / static_cast<double>(r64.count);
      for (int64_t v = 0; v < V; ++v) {
        const size_t tv = static_cast<size_t>(t * V + v);
        dz[tv] = w * s * (st.p[tv] - (v == targets[ut] ? 1.0 : 0.0));
        d[tv] = std::abs(w * s) * st.p[tv] * e + std::abs(dz[tv]);
      }
    }
    loss_bound += 0x1p-40 * loss_abs;
    mean_bound += 0x1p-40 * std::abs(r64.mean);

    // GPU.
    DeviceHead dev = upload(in);
    DeviceBuffer tg = DeviceBuffer::from(targets, "targets"), twb = DeviceBuffer::from(weights, "token_weight");
    DeviceBuffer ce(static_cast<size_t>(N) * 4, "ce"), dh(static_cast<size_t>(N * H) * 4, "d_hidden"),
        dW = DeviceBuffer::from(dW0, "d_weight"), result(sizeof(TokenLossCudaResult), "result"),
        flag = DeviceBuffer::from(std::vector<int>{0}, "error_flag");
    const LmHeadCudaChunking chunking{c.vocab_chunk, c.row_block};
    DeviceBuffer ws(lm_head_cross_entropy_cuda_workspace_bytes(N, V, chunking), "workspace");
    const LmHeadCuda head{dev.W.as<float>(), V, H, c.student.divisor};
    const LmHeadGradCuda grad{dh.as<float>(), dW.as<float>()};
    lm_head_cross_entropy_cuda(ctx().blaslt(), ce.as<float>(), result.as<TokenLossCudaResult>(), dev.h.as<float>(), N,
                               head, tg.as<int32_t>(), c.weights ? twb.as<float>() : nullptr,
                               c.grad ? &grad : nullptr, chunking, ws.as<void>(), ws.bytes(), flag.as<int>());

    const std::vector<float> ce_gpu = ce.download<float>();
    EXPECT_TRUE(check_f32(name(c, "ce values"), ce_gpu, ce32, ce64, mag_ce, {1}));
    const TokenLossCudaResult r = result.download<TokenLossCudaResult>()[0];
    EXPECT_EQ(r.count, r64.count) << name(c, "ce count");
    if (!c.nan_row) {
      EXPECT_TRUE(check_scalar(name(c, "ce loss"), r.loss, r64.loss, loss_bound));
      EXPECT_TRUE(check_scalar(name(c, "ce mean"), r.mean, r64.mean, mean_bound));
    } else {
      EXPECT_TRUE(std::isnan(r.loss) && std::isnan(r.mean)) << name(c, "ce loss with a NaN row");
    }
    EXPECT_EQ(read_flag(flag), 0) << name(c, "ce flag");
    if (c.grad) {
      std::vector<double> mag_dh, mag_dw;
      grad_magnitudes(dz, d, in, dW0, c, H, mag_dh, mag_dw);
      const std::vector<float> dh_gpu = dh.download<float>();
      EXPECT_TRUE(check_f32(name(c, "ce d_hidden"), dh_gpu, dh32, dh64, mag_dh, {1}));
      EXPECT_TRUE(check_f32(name(c, "ce d_weight"), dW.download<float>(), dW32, dW64, mag_dw, {1}));
      EXPECT_TRUE(buffers_ok({&ce, &dh, &dW, &result, &ws}, {&dev.h, &dev.W, &tg, &twb})) << name(c, "ce");
      // Deterministic: a second run gives the same bits (d_weight starts from its first result, so not compared).
      lm_head_cross_entropy_cuda(ctx().blaslt(), ce.as<float>(), result.as<TokenLossCudaResult>(), dev.h.as<float>(),
                                 N, head, tg.as<int32_t>(), c.weights ? twb.as<float>() : nullptr, &grad, chunking,
                                 ws.as<void>(), ws.bytes(), flag.as<int>());
      EXPECT_TRUE(check_exact(name(c, "ce values rerun"), ce.download<float>(), ce_gpu));
      EXPECT_TRUE(check_exact(name(c, "ce d_hidden rerun"), dh.download<float>(), dh_gpu));
    } else {
      EXPECT_TRUE(buffers_ok({&ce, &result, &ws}, {&dev.h, &dev.W, &tg, &twb, &dh, &dW})) << name(c, "ce fwd");
    }
  }
}

namespace {

// Rounds every value to the nearest bf16 (the bf16 case's inputs: exactly representable, so the bf16 products see the
// very values the fp32 and fp64 references see).
void round_to_bf16(std::vector<float>& v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
}

std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

// One KL case, fp32 or bf16 compute mode (lm_head_loss_cuda.h). The bf16 mode gets bf16-representable h and W, so its
// only extra roundings are (a) the tensor-core products' fp32 accumulation, taken as ≤ 2u per addition (it need not
// round to nearest: product_factor 2 in e_z), and (b) dz rounded to bf16 before the gradient products: |Δdz| gains
// u_b·|dz|, u_b = 2^-8 = 2^16 u, which d carries into the dh and dW magnitudes.
void run_kl_case(const LossCase& c, bool bf16) {
  {
    const int64_t N = c.N, V = c.V, H_S = c.student.H, H_T = c.teacher.H;
    const double tau = c.tau;
    HeadInputs in_s = make_head(c, c.student, 111), in_t = make_head(c, c.teacher, 121);
    if (bf16)
      for (std::vector<float>* v : {&in_s.h, &in_s.W, &in_t.h, &in_t.W}) round_to_bf16(*v);
    const double product_factor = bf16 ? 2.0 : 1.0, dz_rounding = bf16 ? 65536.0 : 0.0;
    const auto kname = [&](const char* what) { return name(c, what) + (bf16 ? " bf16" : ""); };
    const std::vector<float> weights = c.weights ? make_weights(N) : std::vector<float>{};
    const float* tw = c.weights ? weights.data() : nullptr;
    const std::vector<float> dW0 = make_values(static_cast<size_t>(V * H_S), Fill::Normal, 113, 0.01f);

    const LmHead<float> t32{in_t.W.data(), V, H_T, c.teacher.divisor}, s32{in_s.W.data(), V, H_S, c.student.divisor};
    std::vector<float> kl32(static_cast<size_t>(N)), dh32(static_cast<size_t>(N * H_S)), dW32 = dW0;
    LmHeadGrad<float> grad32{dh32.data(), dW32.data()};
#if HLM_CUDA_TEST_HAVE_CBLAS
    lm_head_forward_kl<float>(kl32.data(), in_t.h.data(), t32, in_s.h.data(), s32, N, tau, tw,
                              c.grad ? &grad32 : nullptr, LmHeadChunking{c.vocab_chunk, c.row_block});
#else
    lm_head_forward_kl_full<float>(kl32.data(), in_t.h.data(), t32, in_s.h.data(), s32, N, tau, tw,
                                   c.grad ? &grad32 : nullptr);
#endif
    const std::vector<double> hs64 = to_f64(in_s.h), Ws64 = to_f64(in_s.W), ht64 = to_f64(in_t.h),
                              Wt64 = to_f64(in_t.W), tw64 = to_f64(weights);
    const LmHead<double> t64{Wt64.data(), V, H_T, c.teacher.divisor}, s64{Ws64.data(), V, H_S, c.student.divisor};
    std::vector<double> kl64(static_cast<size_t>(N)), dh64(static_cast<size_t>(N * H_S)), dW64 = to_f64(dW0);
    LmHeadGrad<double> grad64{dh64.data(), dW64.data()};
    const TokenLossResult r64 = lm_head_forward_kl_full<double>(kl64.data(), ht64.data(), t64, hs64.data(), s64, N,
                                                                tau, c.weights ? tw64.data() : nullptr, &grad64);

    const double scale_s = 1.0 / (c.student.divisor * tau), scale_t = 1.0 / (c.teacher.divisor * tau);
    const HeadStats ss = head_stats(in_s, N, V, H_S, scale_s, c.vocab_chunk, product_factor);
    const HeadStats st = head_stats(in_t, N, V, H_T, scale_t, c.vocab_chunk, product_factor);
    std::vector<double> mag_kl(static_cast<size_t>(N)), dz(static_cast<size_t>(N * V)), d(dz.size());
    double loss_bound = 0, mean_bound = 0, loss_abs = 0;
    for (int64_t t = 0; t < N; ++t) {
      const size_t ut = static_cast<size_t>(t);
      const double w = c.weights ? tw64[ut] : 1.0 / static_cast<double>(N);
      const double alpha = st.e_z[ut] + st.e_lse[ut], beta = ss.e_z[ut] + ss.e_lse[ut];
      double spread = 0, exp_terms = 0;
      for (int64_t v = 0; v < V; ++v) {
        const size_t tv = static_cast<size_t>(t * V + v);
        const double a = st.z[tv] - st.lse[ut], b = ss.z[tv] - ss.lse[ut];
        // The KL pass's f32 exps (header comment): ε = 4 + |log p| per probability.
        const double eps_t = 4.0 + std::abs(a), eps_s = 4.0 + std::abs(b);
        if (st.p[tv] > 0) {
          spread += st.p[tv] * std::abs(a - b);
          exp_terms += eps_t * st.p[tv] * std::abs(a - b);
        }
        const double g = w * tau * tau * scale_s;
        dz[tv] = g * (ss.p[tv] - st.p[tv]);
        d[tv] = std::abs(g) * (ss.p[tv] * (beta + eps_s) + st.p[tv] * (alpha + eps_t)) +
                (1.0 + dz_rounding) * std::abs(dz[tv]);
      }
      const double e = alpha + beta + alpha * spread + exp_terms;
      mag_kl[ut] = e + std::abs(kl64[ut]);
      loss_bound += tau * tau * std::abs(w) * e * kU;
      loss_abs += tau * tau * std::abs(w * kl64[ut]);
      mean_bound += e * kU / static_cast<double>(N);
    }
    loss_bound += 0x1p-40 * loss_abs;
    mean_bound += 0x1p-40 * std::abs(r64.mean);

    DeviceHead dev_s = upload(in_s), dev_t = upload(in_t);
    DeviceBuffer twb = DeviceBuffer::from(weights, "token_weight"), kl(static_cast<size_t>(N) * 4, "kl"),
                 dh(static_cast<size_t>(N * H_S) * 4, "d_hidden"), dW = DeviceBuffer::from(dW0, "d_weight"),
                 result(sizeof(TokenLossCudaResult), "result");
    const LmHeadCudaChunking chunking{c.vocab_chunk, c.row_block};
    DeviceBuffer ws(lm_head_forward_kl_cuda_workspace_bytes(N, V, chunking), "workspace");
    LmHeadCuda teacher{dev_t.W.as<float>(), V, H_T, c.teacher.divisor},
        student{dev_s.W.as<float>(), V, H_S, c.student.divisor};
    DeviceBuffer hs16 = DeviceBuffer::from(bf16 ? bf16_bits(in_s.h) : std::vector<uint16_t>{}, "hidden bf16"),
                 Ws16 = DeviceBuffer::from(bf16 ? bf16_bits(in_s.W) : std::vector<uint16_t>{}, "weight bf16"),
                 ht16 = DeviceBuffer::from(bf16 ? bf16_bits(in_t.h) : std::vector<uint16_t>{}, "teacher hidden bf16"),
                 Wt16 = DeviceBuffer::from(bf16 ? bf16_bits(in_t.W) : std::vector<uint16_t>{}, "teacher weight bf16");
    if (bf16) {
      student.weight_bf16 = Ws16.as<__nv_bfloat16>();
      student.hidden_bf16 = hs16.as<__nv_bfloat16>();
      teacher.weight_bf16 = Wt16.as<__nv_bfloat16>();
      teacher.hidden_bf16 = ht16.as<__nv_bfloat16>();
    }
    const LmHeadGradCuda grad{dh.as<float>(), dW.as<float>()};
    lm_head_forward_kl_cuda(ctx().blaslt(), kl.as<float>(), result.as<TokenLossCudaResult>(), dev_t.h.as<float>(),
                            teacher, dev_s.h.as<float>(), student, N, tau, c.weights ? twb.as<float>() : nullptr,
                            c.grad ? &grad : nullptr, chunking, ws.as<void>(), ws.bytes());

    EXPECT_TRUE(check_f32(kname("kl values"), kl.download<float>(), kl32, kl64, mag_kl, {1}));
    const TokenLossCudaResult r = result.download<TokenLossCudaResult>()[0];
    EXPECT_EQ(r.count, N) << kname("kl count");
    EXPECT_TRUE(check_scalar(kname("kl loss"), r.loss, r64.loss, loss_bound));
    EXPECT_TRUE(check_scalar(kname("kl mean"), r.mean, r64.mean, mean_bound));
    if (c.grad) {
      std::vector<double> mag_dh, mag_dw;
      grad_magnitudes(dz, d, in_s, dW0, c, H_S, mag_dh, mag_dw, product_factor);
      EXPECT_TRUE(check_f32(kname("kl d_hidden"), dh.download<float>(), dh32, dh64, mag_dh, {1}));
      EXPECT_TRUE(check_f32(kname("kl d_weight"), dW.download<float>(), dW32, dW64, mag_dw, {1}));
      EXPECT_TRUE(buffers_ok({&kl, &dh, &dW, &result, &ws},
                             {&dev_s.h, &dev_s.W, &dev_t.h, &dev_t.W, &twb, &hs16, &Ws16, &ht16, &Wt16}))
          << kname("kl");
    } else {
      EXPECT_TRUE(buffers_ok({&kl, &result, &ws},
                             {&dev_s.h, &dev_s.W, &dev_t.h, &dev_t.W, &twb, &dh, &dW, &hs16, &Ws16, &ht16, &Wt16}))
          << kname("kl fwd");
    }
    // One vocabulary chunk: the teacher's logits and lse made ahead (lm_head_teacher_logits_cuda, the distillation's
    // side stream) give the call above's bits: per-token KL, loss record, d_hidden and d_weight. The teacher's hidden
    // states are not passed, so a call that still read them would fault or differ.
    if (lm_head_teacher_logits_supported(V, chunking)) {
      DeviceBuffer logits(static_cast<size_t>(N * V) * 4, "teacher logits"), lse(static_cast<size_t>(N) * 8, "lse"),
          tws(lm_head_teacher_logits_cuda_workspace_bytes(N, V, chunking), "teacher workspace");
      lm_head_teacher_logits_cuda(ctx().blaslt(), logits.as<float>(), lse.as<double>(), dev_t.h.as<float>(), teacher,
                                  N, tau, chunking, tws.as<void>(), tws.bytes());
      DeviceBuffer kl2(static_cast<size_t>(N) * 4, "kl"), dh2(static_cast<size_t>(N * H_S) * 4, "d_hidden"),
          dW2 = DeviceBuffer::from(dW0, "d_weight"), result2(sizeof(TokenLossCudaResult), "result"),
          ws2(lm_head_forward_kl_cuda_workspace_bytes(N, V, chunking, true), "workspace");
      EXPECT_LT(ws2.bytes(), ws.bytes()) << kname("kl workspace without the teacher's tile");
      const LmHeadGradCuda grad2{dh2.as<float>(), dW2.as<float>()};
      const LmHeadTeacherLogitsCuda ahead{logits.as<float>(), lse.as<double>()};
      lm_head_forward_kl_cuda(ctx().blaslt(), kl2.as<float>(), result2.as<TokenLossCudaResult>(), nullptr, teacher,
                              dev_s.h.as<float>(), student, N, tau, c.weights ? twb.as<float>() : nullptr,
                              c.grad ? &grad2 : nullptr, chunking, ws2.as<void>(), ws2.bytes(), &ahead);
      EXPECT_EQ(kl2.download_bytes(), kl.download_bytes()) << kname("kl values, teacher ahead");
      EXPECT_EQ(result2.download_bytes(), result.download_bytes()) << kname("kl result, teacher ahead");
      if (c.grad) {
        EXPECT_EQ(dh2.download_bytes(), dh.download_bytes()) << kname("kl d_hidden, teacher ahead");
        EXPECT_EQ(dW2.download_bytes(), dW.download_bytes()) << kname("kl d_weight, teacher ahead");
      }
      std::printf("[check] %s: teacher logits ahead, the same bits\n", kname("kl").c_str());
    }
  }
}

}  // namespace

TEST(LmHeadLossCuda, ForwardKl) {
  HLM_REQUIRE_CUDA();
  for (const LossCase& c : kKlCases) run_kl_case(c, false);
}

// The bf16 compute mode (bf16 logits products, dz written straight to bf16 for the gradient products) on the same
// cases.
TEST(LmHeadLossCuda, ForwardKlBf16) {
  HLM_REQUIRE_CUDA();
  for (const LossCase& c : kKlCases) run_kl_case(c, true);
}

// A target ≥ V (the CPU throws) sets the flag; that token's CE is NaN, so are loss and mean; it is not counted.
// N = 0: the result is all zero and nothing else is written.
TEST(LmHeadLossCuda, BadTargetAndEmptyBatch) {
  HLM_REQUIRE_CUDA();
  const int64_t N = 5, V = 100, H = 8;
  const LossCase c{N, V, {H, 1.0}, {}, 64, 4, 3.0, 1.0, false, true};
  const HeadInputs in = make_head(c, c.student, 131);
  std::vector<int32_t> targets = {3, 100, -100, 99, 0};
  DeviceHead dev = upload(in);
  DeviceBuffer tg = DeviceBuffer::from(targets, "targets"), ce(N * 4, "ce"), dh(N * H * 4, "d_hidden"),
               dW = DeviceBuffer::from(std::vector<float>(V * H, 0.0f), "d_weight"),
               result(sizeof(TokenLossCudaResult), "result"), flag = DeviceBuffer::from(std::vector<int>{0}, "flag");
  const LmHeadCudaChunking chunking{64, 4};
  DeviceBuffer ws(lm_head_cross_entropy_cuda_workspace_bytes(N, V, chunking), "workspace");
  const LmHeadCuda head{dev.W.as<float>(), V, H, 1.0};
  const LmHeadGradCuda grad{dh.as<float>(), dW.as<float>()};
  lm_head_cross_entropy_cuda(ctx().blaslt(), ce.as<float>(), result.as<TokenLossCudaResult>(), dev.h.as<float>(), N,
                             head, tg.as<int32_t>(), nullptr, &grad, chunking, ws.as<void>(), ws.bytes(),
                             flag.as<int>());
  const std::vector<float> ce_gpu = ce.download<float>();
  EXPECT_EQ(read_flag(flag), 1);
  EXPECT_TRUE(std::isnan(ce_gpu[1]));
  EXPECT_EQ(ce_gpu[2], 0.0f);
  EXPECT_TRUE(std::isfinite(ce_gpu[0]) && std::isfinite(ce_gpu[3]) && std::isfinite(ce_gpu[4]));
  const TokenLossCudaResult r = result.download<TokenLossCudaResult>()[0];
  EXPECT_EQ(r.count, 3);
  EXPECT_TRUE(std::isnan(r.loss) && std::isnan(r.mean));
  const std::vector<float> dh_gpu = dh.download<float>();
  for (int64_t k = 0; k < H; ++k) EXPECT_EQ(dh_gpu[static_cast<size_t>(1 * H + k)], 0.0f) << "no gradient, k=" << k;
  EXPECT_TRUE(buffers_ok({&ce, &dh, &dW, &result, &ws}, {&dev.h, &dev.W, &tg}));

  // N = 0.
  DeviceBuffer empty_result(sizeof(TokenLossCudaResult), "result"), unused(16, "unused");
  lm_head_cross_entropy_cuda(ctx().blaslt(), unused.as<float>(), empty_result.as<TokenLossCudaResult>(),
                             dev.h.as<float>(), 0, head, tg.as<int32_t>(), nullptr, nullptr, chunking, nullptr, 0,
                             nullptr);
  const TokenLossCudaResult e = empty_result.download<TokenLossCudaResult>()[0];
  EXPECT_EQ(e.loss, 0.0);
  EXPECT_EQ(e.mean, 0.0);
  EXPECT_EQ(e.count, 0);
  const std::vector<uint8_t> untouched = unused.download_bytes();
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](uint8_t b) { return b == 0xFF; }));
}
