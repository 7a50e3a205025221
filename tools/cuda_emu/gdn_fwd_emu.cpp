// The v2 forward kernels of the chunked gated delta rule (gdn_fwd_v2.cuh), run on the CPU through emu.h / emu_mma.h
// (gdn_fwd_emu.sh builds it), against a double-precision host model of each stage on tiny shapes.
//
// state_v2: the scratch it reads (γ, W and Kd in bf16, Ũ in fp32) is made on the host from random inputs by the
// chunked algebra (gdn.md §2: γ, L, R = (I + L)^-1, W = R diag(βe^γ) K, Ũ = R diag(β) V, Kd = e^{γ_c − γ} K) in
// double; the model then runs the pass in double with the kernel's bf16 operands (teacher forcing: its stored M0 and
// bf16 of its U, each checked against the model's own):
//   M0 = bf16(M);  U = Ũ − W M0ᵀ;  M ← e^{γ_c} M + bf16(U)ᵀ Kd.
// Checked: every per-chunk state M0 (bf16: at most 0.1% of the elements may differ, by one bf16 ulp, from rounding
// flips, since the kernel sums in fp32), U (in place of Ũ) and hT within 1e-4 of the tensor's RMS (fp32 sums give
// ~4e-7; a 0.1% error in the decay fails; a logic error gives O(1)); every state element written.
// output_v2: on each pass's M0 and U, against O = scale·(e^γ ⊙ Q M0ᵀ + bf16(Q Kᵀ ⊙ Γ) U) in double (tolerance
// 2e-3 of the RMS: bf16 rounding flips of single terms); and the chain (host prep → state_v2 → output_v2) against
// the CPU chunked reference gated_delta_rule_chunked_forward (o and hT: relative RMS error ≤ 1e-2, bf16 operands).
// Cases: weak (g ∈ (−0.003, 0)) and strong decay, packed sequences with partial chunks and empty sequences, dk ≠ dv, odd dims (scalar copy paths and the
// 16-bit M0 stores), GVA (Hv = 2 Hk), h0 / hT on and off; each with 1, 2, 4 and 8 warps per block, and
// 4 warps with split keys (a warp pair per 16 rows, each warp 64 key columns: state_v2_kernel<4, 2>).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gdn_fwd_v2.cuh"  // the copy made by gdn_fwd_emu.sh

using namespace hlm;
using namespace hlm::gdn_chunked;

namespace {

struct Case {
  std::vector<int64_t> cu;
  int Hk, Hv, dk, dv;
  bool h0;
  std::string name;
  double g_scale = 0.3;  // g ∈ (−g_scale, 0)
};

float bfr(double x) { return static_cast<float>(__float2bfloat16_rn(static_cast<float>(x))); }

int g_fail = 0, g_checks = 0;

// max |got − want| / (rms(want) + tiny) over the listed pairs.
struct Cmp {
  double max_err = 0, sum_sq = 0;
  int64_t n = 0;
  std::vector<std::pair<double, double>> pairs;
  void add(double got, double want) { pairs.push_back({got, want}), sum_sq += want * want, ++n; }
  // Each |got − want| ≤ tol·rms + ulp_rel·|want|; and at most max_diff_frac of the elements differ at all.
  bool report(const std::string& what, double tol, double ulp_rel = 0, double max_diff_frac = 1) {
    const double rms = n ? std::sqrt(sum_sq / n) : 0;
    int64_t bad = 0, diff = 0;
    for (auto [g, w] : pairs) {
      const double e = std::fabs(g - w), allowed = tol * (rms + 1e-30) + ulp_rel * std::fabs(w);
      max_err = std::max(max_err, e / (rms + 1e-30));
      if (!(e <= allowed)) ++bad;
      if (g != w) ++diff;
    }
    if (diff > max_diff_frac * n) bad += diff;
    ++g_checks;
    const bool ok = bad == 0;
    if (!ok) ++g_fail;
    std::printf("  %-34s %s  n=%-7lld rms=%-10.3g max_err/rms=%-10.3g bad=%lld\n", what.c_str(), ok ? "ok  " : "FAIL",
                static_cast<long long>(n), rms, max_err, static_cast<long long>(bad));
    return ok;
  }
  // Relative RMS error ‖got − want‖ / ‖want‖ ≤ tol (FLA's metric for bf16 chains).
  bool report_rel_rms(const std::string& what, double tol) {
    double se = 0;
    for (auto [g, w] : pairs) se += (g - w) * (g - w);
    const double rel = std::sqrt(se / (sum_sq + 1e-300));
    ++g_checks;
    const bool ok = rel <= tol;
    if (!ok) ++g_fail;
    std::printf("  %-34s %s  n=%-7lld rel RMS err=%-10.3g (bound %g)\n", what.c_str(), ok ? "ok  " : "FAIL",
                static_cast<long long>(n), rel, tol);
    return ok;
  }
};

void run_state_case(const Case& c, std::mt19937& rng) {
  const int64_t N = static_cast<int64_t>(c.cu.size()) - 1, T = c.cu.back();
  const int Hk = c.Hk, Hv = c.Hv, dk = c.dk, dv = c.dv, G = Hv / Hk;
  std::normal_distribution<double> nd;
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  // Inputs: L2-normalised k, v ~ N(0,1), β ∈ (0.2, 1), g = log-decay in (−g_scale, 0), h0 ~ 0.3 N(0,1).
  std::vector<float> q(T * Hk * dk), k(T * Hk * dk), v(T * Hv * dv), g(T * Hv), beta(T * Hv);
  for (auto* x : {&q, &k})
    for (int64_t r = 0; r < T * Hk; ++r) {
      double n2 = 0;
      std::vector<double> row(dk);
      for (int d = 0; d < dk; ++d) n2 += std::pow(row[d] = nd(rng), 2);
      for (int d = 0; d < dk; ++d) (*x)[r * dk + d] = static_cast<float>(row[d] / std::sqrt(n2));
    }
  for (auto& x : v) x = static_cast<float>(nd(rng));
  for (auto& x : g) x = static_cast<float>(-c.g_scale * ud(rng));
  for (auto& x : beta) x = static_cast<float>(0.2 + 0.8 * ud(rng));
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<float> h0(c.h0 ? N * Hv * dv * dk : 0);
  for (auto& x : h0) x = static_cast<float>(0.3 * nd(rng));

  // Chunk table.
  std::vector<ChunkInfo> table;
  std::vector<int64_t> seq_first(N + 1);
  for (int64_t s = 0; s < N; ++s) {
    seq_first[s] = static_cast<int64_t>(table.size());
    for (int64_t t0 = c.cu[s]; t0 < c.cu[s + 1]; t0 += kC)
      table.push_back({t0, static_cast<int32_t>(std::min<int64_t>(kC, c.cu[s + 1] - t0)), static_cast<int32_t>(s)});
  }
  seq_first[N] = static_cast<int64_t>(table.size());
  const int64_t chunks = static_cast<int64_t>(table.size());

  // Scratch as prep leaves it.
  std::vector<float> gam(T * Hv), Ut(T * Hv * dv);
  std::vector<bf16> W(T * Hv * dk), Kd(T * Hv * dk);
  std::vector<float> R_host(chunks * Hv * kC * kC, 0.0f);  // per chunk [64][64]; padded rows: identity
  for (int64_t ci_ = 0; ci_ < chunks; ++ci_)
    for (int h = 0; h < Hv; ++h) {
      const ChunkInfo ch = table[ci_];
      const int len = ch.len, hk = h / G;
      std::vector<double> gm(len), L(len * len, 0.0), R(len * len, 0.0);
      float run = 0;
      for (int i = 0; i < len; ++i) gm[i] = run += static_cast<float>(g[(ch.t0 + i) * Hv + h]);
      const auto kv = [&](int i, int d) { return static_cast<double>(k[((ch.t0 + i) * Hk + hk) * dk + d]); };
      for (int i = 0; i < len; ++i)
        for (int j = 0; j < i; ++j) {
          double dot = 0;
          for (int d = 0; d < dk; ++d) dot += kv(i, d) * kv(j, d);
          L[i * len + j] = beta[(ch.t0 + i) * Hv + h] * std::exp(gm[i] - gm[j]) * dot;
        }
      for (int i = 0; i < len; ++i) {
        R[i * len + i] = 1;
        for (int j = 0; j < i; ++j) {
          double acc = 0;
          for (int m = j; m < i; ++m) acc += L[i * len + m] * R[m * len + j];
          R[i * len + j] = -acc;
        }
      }
      for (int i = 0; i < kC; ++i)
        for (int j = 0; j < kC; ++j)
          R_host[((ci_ * Hv + h) * kC + i) * kC + j] = i < len && j < len ? static_cast<float>(R[i * len + j]) : (i == j);
      for (int i = 0; i < len; ++i) {
        const int64_t t = ch.t0 + i;
        gam[t * Hv + h] = static_cast<float>(gm[i]);
        for (int d = 0; d < dk; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += R[i * len + j] * beta[(ch.t0 + j) * Hv + h] * std::exp(gm[j]) * kv(j, d);
          W[(t * Hv + h) * dk + d] = __float2bfloat16_rn(static_cast<float>(acc));
          Kd[(t * Hv + h) * dk + d] = __float2bfloat16_rn(static_cast<float>(std::exp(gm[len - 1] - gm[i]) * kv(i, d)));
        }
        for (int a = 0; a < dv; ++a) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += R[i * len + j] * beta[(ch.t0 + j) * Hv + h] * v[((ch.t0 + j) * Hv + h) * dv + a];
          Ut[(t * Hv + h) * dv + a] = static_cast<float>(acc);
        }
      }
    }

  // Host model of the pass, teacher-forced by the kernel's own bf16 operands (its M0 and bf16 of its U), so that each
  // check is local: a one-ulp rounding flip in the kernel cannot grow into a difference later on.
  const auto model = [&](const std::vector<bf16>& states, const std::vector<float>& U_k, std::vector<float>& M0_ref,
                         std::vector<float>& U_ref, std::vector<float>& hT_ref) {
    M0_ref.assign(chunks * Hv * dv * dk, 0.0f);
    U_ref.assign(T * Hv * dv, 0.0f);
    hT_ref.assign(N * Hv * dv * dk, 0.0f);
    for (int64_t s = 0; s < N; ++s)
      for (int h = 0; h < Hv; ++h) {
        std::vector<double> M(dv * dk, 0.0);
        if (c.h0)
          for (int64_t x = 0; x < dv * dk; ++x) M[x] = h0[(s * Hv + h) * dv * dk + x];
        for (int64_t ci = seq_first[s]; ci < seq_first[s + 1]; ++ci) {
          const ChunkInfo ch = table[ci];
          const int64_t so = (ci * Hv + h) * dv * dk;
          for (int64_t x = 0; x < dv * dk; ++x) M0_ref[so + x] = bfr(M[x]);
          for (int i = 0; i < ch.len; ++i)
            for (int a = 0; a < dv; ++a) {
              const int64_t t = ch.t0 + i;
              double acc = Ut[(t * Hv + h) * dv + a];
              for (int d = 0; d < dk; ++d)
                acc -= static_cast<double>(W[(t * Hv + h) * dk + d]) * static_cast<float>(states[so + a * dk + d]);
              U_ref[(t * Hv + h) * dv + a] = static_cast<float>(acc);
            }
          const double decay = std::exp(static_cast<double>(gam[(ch.t0 + ch.len - 1) * Hv + h]));
          for (int a = 0; a < dv; ++a)
            for (int d = 0; d < dk; ++d) {
              double acc = decay * M[a * dk + d];
              for (int i = 0; i < ch.len; ++i) {
                const int64_t t = ch.t0 + i;
                acc += static_cast<double>(bfr(U_k[(t * Hv + h) * dv + a])) * static_cast<double>(Kd[(t * Hv + h) * dk + d]);
              }
              M[a * dk + d] = acc;
            }
        }
        for (int64_t x = 0; x < dv * dk; ++x) hT_ref[(s * Hv + h) * dv * dk + x] = static_cast<float>(M[x]);
      }
  };

  // The CPU reference of the whole forward (gated_delta_rule_chunked.cpp, fp32 storage, double sums).
  std::vector<float> o_cpu(T * Hv * dv), hT_cpu(N * Hv * dv * dk);
  {
    GdnShape shape;
    shape.total_tokens = T, shape.k_heads = Hk, shape.v_heads = Hv, shape.key_dim = dk, shape.value_dim = dv;
    GdnInputs<float> in{q.data(), k.data(), v.data(), g.data(), beta.data(), c.h0 ? h0.data() : nullptr, c.cu.data(), N};
    gated_delta_rule_chunked_forward({o_cpu.data(), hT_cpu.data()}, in, shape, scale, kC);
  }
  Problem p{q.data(), k.data(), v.data(), g.data(), beta.data(), c.h0 ? h0.data() : nullptr, c.cu.data(), T, Hk, Hv,
            dk, dv, N, scale};
  // prep_v2 against the host prep (γ, Kd, W, Ũ; with the backward's R, Ũ in bf16 and Qd), then the chain
  // prep_v2 → state_v2 → output_v2 against the CPU reference.
  {
    std::vector<float> gam_k(T * Hv, 0.0f), U_k(T * Hv * dv, 0.0f);
    std::vector<bf16> W_k(T * Hv * dk), Kd_k(T * Hv * dk), R_k(chunks * Hv * kC * kC), Ut_k(T * Hv * dv),
        Qd_k(T * Hv * dk), states_k(chunks * Hv * dv * dk);
    ForwardScratch s{};
    s.table = table.data(), s.seq_first = seq_first.data(), s.max_chunks = chunks, s.gam = gam_k.data();
    s.W = W_k.data(), s.Kd = Kd_k.data(), s.U = U_k.data(), s.states = states_k.data();
    s.R = R_k.data(), s.Ut = Ut_k.data(), s.Qd = Qd_k.data();
    emu_launch({static_cast<unsigned>(chunks), static_cast<unsigned>(Hv), 1}, fwd_v2::kPrepV2Threads,
               fwd_v2::kPrepV2Smem, [&] { fwd_v2::prep_v2_kernel(p, s); });
    std::printf("%s, prep_v2\n", c.name.c_str());
    Cmp cg, ckd, cw, cu, cut, cqd, cr;
    for (int64_t x = 0; x < T * Hv; ++x) cg.add(gam_k[x], gam[x]);
    for (int64_t x = 0; x < T * Hv * dk; ++x) ckd.add(Kd_k[x], Kd[x]), cw.add(W_k[x], W[x]);
    for (int64_t x = 0; x < T * Hv * dv; ++x) cu.add(U_k[x], Ut[x]), cut.add(Ut_k[x], bfr(U_k[x]));
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < Hv; ++h) {
        for (int d = 0; d < dk; ++d)
          cqd.add(Qd_k[(t * Hv + h) * dk + d],
                  scale * std::exp(static_cast<double>(gam[t * Hv + h])) * q[(t * Hk + h / G) * dk + d]);
      }
    for (int64_t x = 0; x < chunks * Hv * kC * kC; ++x) cr.add(R_k[x], R_host[x]);
    cr.report_rel_rms("prep_v2 R (bf16; padded rows I)", 5e-3);
    // The inverse itself: R of the kernel's own L (K Kᵀ of bf16 k, its fp32 γ and β) in double; the kernel's inverse
    // is near fp32 (split-bf16 products), so its bf16(R) is the bf16 of that R but for rounding flips (one ulp each,
    // at most 1% of the elements; bf16-only products flip ~25%).
    Cmp cr1;
    for (int64_t ci_ = 0; ci_ < chunks; ++ci_)
      for (int h = 0; h < Hv; ++h) {
        const ChunkInfo ch = table[ci_];
        const int len = ch.len, hk = h / G;
        std::vector<double> Lm(kC * kC, 0.0), Rm(kC * kC, 0.0);
        for (int i = 0; i < len; ++i)
          for (int j = 0; j < i; ++j) {
            double dot = 0;
            for (int d = 0; d < dk; ++d)
              dot += static_cast<double>(bfr(k[((ch.t0 + i) * Hk + hk) * dk + d])) * bfr(k[((ch.t0 + j) * Hk + hk) * dk + d]);
            const float bi = beta[(ch.t0 + i) * Hv + h];
            const float gi = gam_k[(ch.t0 + i) * Hv + h], gj = gam_k[(ch.t0 + j) * Hv + h];
            Lm[i * kC + j] = static_cast<double>(bi * std::exp(gi - gj)) * static_cast<float>(dot);
          }
        for (int i = 0; i < kC; ++i) {
          Rm[i * kC + i] = 1;
          for (int j = 0; j < i; ++j) {
            double acc = 0;
            for (int m = j; m < i; ++m) acc += Lm[i * kC + m] * Rm[m * kC + j];
            Rm[i * kC + j] = -acc;
          }
        }
        for (int x = 0; x < kC * kC; ++x) cr1.add(R_k[(ci_ * Hv + h) * kC * kC + x], bfr(Rm[x]));
      }
    cr1.report("prep_v2 R = bf16(R of its L) +-1 ulp", 1e-5, 1.0 / 128, 1e-2);
    cg.report("prep_v2 gamma", 1e-6);
    ckd.report("prep_v2 Kd (bf16)", 1e-5, 1.0 / 128, 2e-3);
    cw.report_rel_rms("prep_v2 W (bf16 R, bf16 operands)", 1e-2);
    cu.report_rel_rms("prep_v2 U~", 1e-2);
    cut.report("prep_v2 U~ in bf16 = bf16(U~)", 0);
    cqd.report_rel_rms("prep_v2 Qd", 5e-3);
    std::vector<float> hT(N * Hv * dv * dk), o(T * Hv * dv);
    emu_launch({static_cast<unsigned>(N * Hv), static_cast<unsigned>((dv + 63) / 64), 1}, 128,
               fwd_v2::state_v2_smem<4, 1>(), [&] { fwd_v2::state_v2_kernel<4, 1>(p, s, hT.data()); });
    emu_launch({static_cast<unsigned>(chunks), static_cast<unsigned>(Hv), 1}, fwd_v2::kOutV2Threads,
               fwd_v2::kOutV2Smem, [&] { fwd_v2::output_v2_kernel(p, s, o.data()); });
    Cmp co, ch;
    for (int64_t x = 0; x < T * Hv * dv; ++x) co.add(o[x], o_cpu[x]);
    for (int64_t x = 0; x < N * Hv * dv * dk; ++x) ch.add(hT[x], hT_cpu[x]);
    co.report_rel_rms("chain v2: o vs CPU reference", 1e-2);
    ch.report_rel_rms("chain v2: hT vs CPU reference", 1e-2);
  }

  for (const auto [kw, split] : {std::pair{1, 1}, {2, 1}, {4, 1}, {8, 1}, {4, 2}}) {
    constexpr float kSentinel = 1234.5f;
    std::vector<float> U(Ut), hT(N * Hv * dv * dk, kSentinel);
    std::vector<bf16> states(chunks * Hv * dv * dk, __float2bfloat16_rn(kSentinel));
    ForwardScratch s{};
    s.table = table.data();
    s.seq_first = seq_first.data();
    s.max_chunks = chunks;
    s.gam = gam.data();
    s.W = W.data();
    s.Kd = Kd.data();
    s.U = U.data();
    s.states = states.data();
    const int rows = 16 * kw / split;
    const Dim grid{static_cast<unsigned>(N * Hv), static_cast<unsigned>((dv + rows - 1) / rows), 1};
    const auto run = [&](auto kernel, size_t smem) { emu_launch(grid, 32 * kw, smem, [&] { kernel(p, s, hT.data()); }); };
    switch (split == 2 ? 0 : kw) {
      case 0: run(fwd_v2::state_v2_kernel<4, 2>, fwd_v2::state_v2_smem<4, 2>()); break;
      case 1: run(fwd_v2::state_v2_kernel<1, 1>, fwd_v2::state_v2_smem<1, 1>()); break;
      case 2: run(fwd_v2::state_v2_kernel<2, 1>, fwd_v2::state_v2_smem<2, 1>()); break;
      case 4: run(fwd_v2::state_v2_kernel<4, 1>, fwd_v2::state_v2_smem<4, 1>()); break;
      default: run(fwd_v2::state_v2_kernel<8, 1>, fwd_v2::state_v2_smem<8, 1>()); break;
    }
    std::printf("%s, %d warps per block%s\n", c.name.c_str(), kw, split == 2 ? " (split keys: 2 warps per 16 rows)" : "");
    std::vector<float> M0_ref, U_ref, hT_ref;
    model(states, U, M0_ref, U_ref, hT_ref);
    Cmp m0, u, ht;
    int64_t stray = 0;
    for (int64_t x = 0; x < chunks * Hv * dv * dk; ++x) {
      const float got = states[x];
      if (got == kSentinel) ++stray;  // every element of every (chunk, head) state is valid here
      m0.add(got, M0_ref[x]);
    }
    for (int64_t x = 0; x < T * Hv * dv; ++x) u.add(U[x], U_ref[x]);
    for (int64_t x = 0; x < N * Hv * dv * dk; ++x) ht.add(hT[x], hT_ref[x]);
    m0.report("M0 per chunk (bf16)", 1e-5, 1.0 / 128, 1e-3);
    u.report("U (in place of U~)", 1e-4);
    ht.report("hT", 1e-4);
    ++g_checks;
    if (stray) ++g_fail, std::printf("  FAIL %lld state elements not written\n", static_cast<long long>(stray));

    // output_v2 on this pass's M0 and U, against the model O = scale·(e^γ ⊙ Q M0ᵀ + bf16(Q Kᵀ ⊙ Γ) U) in double
    // (q, k, U rounded to bf16 as the kernel's operands; its M0 as stored).
    std::vector<float> o(T * Hv * dv, kSentinel);
    emu_launch({static_cast<unsigned>(chunks), static_cast<unsigned>(Hv), 1}, fwd_v2::kOutV2Threads,
               fwd_v2::kOutV2Smem, [&] { fwd_v2::output_v2_kernel(p, s, o.data()); });
    Cmp om, oc, hc;
    for (int64_t ci = 0; ci < chunks; ++ci)
      for (int h = 0; h < Hv; ++h) {
        const ChunkInfo ch = table[ci];
        const int hk = h / G;
        const auto qb = [&](int i, int d) { return static_cast<double>(bfr(q[((ch.t0 + i) * Hk + hk) * dk + d])); };
        const auto kb = [&](int i, int d) { return static_cast<double>(bfr(k[((ch.t0 + i) * Hk + hk) * dk + d])); };
        for (int i = 0; i < ch.len; ++i) {
          const int64_t t = ch.t0 + i;
          std::vector<double> A(i + 1);
          for (int j = 0; j <= i; ++j) {
            double dot = 0;
            for (int d = 0; d < dk; ++d) dot += qb(i, d) * kb(j, d);
            const double gm = static_cast<double>(gam[t * Hv + h]) - gam[(ch.t0 + j) * Hv + h];
            A[j] = bfr(static_cast<float>(dot) * std::exp(static_cast<float>(gm)));
          }
          for (int a = 0; a < dv; ++a) {
            double st = 0, loc = 0;
            for (int d = 0; d < dk; ++d)
              st += qb(i, d) * static_cast<double>(states[(ci * Hv + h) * dv * dk + a * dk + d]);
            for (int j = 0; j <= i; ++j) loc += A[j] * bfr(U[((ch.t0 + j) * Hv + h) * dv + a]);
            const double want = scale * (std::exp(static_cast<double>(gam[t * Hv + h])) * st + loc);
            om.add(o[(t * Hv + h) * dv + a], want);
            oc.add(o[(t * Hv + h) * dv + a], o_cpu[(t * Hv + h) * dv + a]);
          }
        }
      }
    for (int64_t x = 0; x < N * Hv * dv * dk; ++x) hc.add(hT[x], hT_cpu[x]);
    om.report("o (output_v2) vs model", 2e-3);
    // Against the CPU reference: bf16 operands throughout (the GPU test's bound is ~16(sqrt(chunks)+1) bf16 ulps of
    // the magnitude); here a relative RMS error of 1e-2 (FLA's bf16 bound for o is 5e-3 with fp16 inputs).
    oc.report_rel_rms("o vs CPU chunked reference", 1e-2);
    hc.report_rel_rms("hT vs CPU chunked reference", 1e-2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::mt19937 rng(20261203);
  std::vector<Case> cases = {
      {{0, 200}, 1, 1, 128, 128, true, "T=200 (partial last chunk), dk=dv=128, h0, decay near 1", 0.003},
      {{0, 200}, 1, 1, 128, 128, true, "T=200 (partial last chunk), dk=dv=128, h0"},
      {{0, 0, 1, 3, 17, 64, 129}, 1, 2, 40, 72, false, "packed 0/1/2/14/47/65 tokens, GVA 2x, dk=40 dv=72"},
      {{0, 65, 96}, 1, 1, 7, 5, true, "65 + 31 tokens, dk=7 dv=5 (scalar paths), h0"},
      {{0, 150}, 2, 2, 64, 36, true, "T=150, 2 heads, dk=64 dv=36, h0"},
  };
  if (quick) cases.resize(1);
  for (const Case& c : cases) run_state_case(c, rng);
  std::printf("gdn_fwd_emu: %d checks, %d failed\n", g_checks, g_fail);
  return g_fail ? 1 : 0;
}
