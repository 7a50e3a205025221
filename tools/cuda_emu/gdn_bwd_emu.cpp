// The v2 backward kernels of the chunked gated delta rule (src/ops/gated_delta_rule/gdn_bwd_v2.cuh) run on the CPU
// through tools/cuda_emu (gdn_bwd_emu.sh builds this with the kernels' own source), on tiny shapes, in the GPU's
// order: du_local_v2 → dstate_v2 (one and two chunk buffers) → dqk_v2 → wy_v2, each on what the previous left in
// the scratch, against the CPU chunked backward's formulas evaluated in double (gated_delta_rule_chunked_backward.cpp,
// letters (a)-(h) there) and against gated_delta_rule_chunked_backward itself (dq, dk, dv, dβ, dg, dh0).
//
// Per case: inputs as the GPU tests make them (L2-normalised q, k; g ≤ 0; β ∈ (0, 1)); the forward scratch from the
// CPU reference's own stages (gdn_detail::chunk_prepare / chunk_write_vectors / chunk_advance_state: M0 per chunk,
// γ, U, W, Ũ, R, Kd, Qd; bf16 where the scratch is bf16); the reverse pass in double for the expected dU_loc, dU, D
// per chunk, dh0, and the output/state parts of dq, dk, dγ and dW.
// Pass: relative RMS error ≤ 2e-2 per output (bf16 operands: ~2^-9 per rounding, a few roundings per chain; a wrong
// fragment layout, sign, mask or decay is O(1)), or 6 × the case's conditioning where that is larger (see run_case).
// Cases: partial chunks, a 1-token sequence, an empty sequence, dk ≠ dv (40/72, 7/5), GVA 2× and 3×, dk = dv = 128
// (the kernels' kFull path, also with GVA and strong decay), with and without h0/dhT, and the β ≈ 2 regime with
// near-parallel keys and g ≈ 0.
// Then per case the same chain with the full dU held as bf16 (BackwardScratch::dUh, the kDuBf16 instantiations, as
// the launcher runs v2): every output (D per chunk, dh0, dq, dW, the dk/dγ parts, dk, dv, dβ, dg) must equal the
// fp32-dU chain's bit for bit, and the bf16 dU must be bf16 of the fp32 dU (82 checks over the six cases). With
// GVA and kFull, wy_v2's dq (summed over the group's v-heads) must equal gva_kernel's float sum bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define HLM_CUDA_EMU 1
#include "ops/gated_delta_rule/gdn_mma.cuh"  // emu.h, emu_mma.h
using std::min;
template <class T>
T __ldg(const T* p) {
  return *p;
}
#include "gdn_prelude_emu.h"  // generated: gdn_chunked_tiles.cuh's structs, constants and loaders
#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunk.h"
#include "ops/gated_delta_rule/gdn_mma_bwd.cuh"
#include "gdn_bwd_v2_emu.cuh"  // generated: gdn_bwd_v2.cuh with shared memory from the emulator

using namespace hlm;
using namespace hlm::gdn_chunked;

namespace {

struct Case {
  std::vector<int64_t> cu;
  int64_t Hk, Hv, dk, dv;
  bool with_state;       // h0 and dhT given
  float decay = 1.0f;    // g = −decay·(0.02 + 0.6u), u uniform in [0, 1)
  bool beta_near_two = false;  // β ∈ [1.9, 2), keys near-parallel (one shared direction + 0.1 noise), g ≈ 0
};

int g_failed = 0, g_checks = 0;
double g_bound = 2e-2;  // per case: max(2e-2, 6 × the reference's sensitivity to bf16-rounded inputs)

void compare(const std::string& what, const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0, worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    num += e * e;
    den += want[i] * want[i];
    worst = std::max(worst, std::fabs(e));
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  const bool ok = std::isfinite(rel) && (rel <= g_bound || std::sqrt(den) < 1e-12);
  ++g_checks;
  if (!ok) ++g_failed;
  std::printf("  %-5s %-28s rel RMS %.2e  max |err| %.2e  (|ref| %.2e)\n", ok ? "ok" : "FAIL", what.c_str(), rel, worst,
              std::sqrt(den));
}

// Bit-for-bit equality of two runs' outputs (the bf16-dU chain against the fp32-dU chain).
template <class T>
void same_bits(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  size_t diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  ++g_checks;
  if (diff != 0) ++g_failed;
  std::printf("  %-5s %-40s %zu of %zu values differ in bits\n", diff == 0 ? "ok" : "FAIL", what.c_str(), diff,
              want.size());
}

void run_case(const Case& cs, uint32_t seed, bool with_wy) {
  const int64_t N = static_cast<int64_t>(cs.cu.size()) - 1, T = cs.cu.back();
  const int64_t Hk = cs.Hk, Hv = cs.Hv, dk = cs.dk, dv = cs.dv, G = Hv / Hk;
  const GdnShape shape{T, Hk, Hv, dk, dv};
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  const auto fill = [&](size_t n) {
    std::vector<float> x(n);
    for (auto& e : x) e = nd(rng);
    return x;
  };
  const auto l2 = [](std::vector<float>& x, int64_t w) {
    for (size_t r = 0; r < x.size() / w; ++r) {
      double ss = 0.0;
      for (int64_t d = 0; d < w; ++d) ss += double(x[r * w + d]) * x[r * w + d];
      for (int64_t d = 0; d < w; ++d) x[r * w + d] = float(x[r * w + d] / std::sqrt(ss + 1e-6));
    }
  };
  std::vector<float> q = fill(T * Hk * dk), k = fill(T * Hk * dk), v = fill(T * Hv * dv), dO = fill(T * Hv * dv);
  if (cs.beta_near_two) {  // the negative-eigenvalue regime with near-parallel keys: large entries of R
    std::vector<float> dir = fill(Hk * dk);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < Hk * dk; ++e) k[t * Hk * dk + e] = dir[e] + 0.1f * k[t * Hk * dk + e];
  }
  l2(q, dk);
  l2(k, dk);
  std::vector<float> g(T * Hv), beta(T * Hv);
  for (auto& e : g) e = -cs.decay * (0.02f + 0.6f * ud(rng));
  for (auto& e : beta) e = 0.05f + 0.9f * ud(rng);
  if (cs.beta_near_two) {
    for (auto& e : beta) e = 1.9f + 0.1f * ud(rng);
    for (auto& e : g) e = -1e-4f * ud(rng);
  }
  std::vector<float> dhT = cs.with_state ? fill(N * Hv * dv * dk) : std::vector<float>();
  std::vector<float> h0 = cs.with_state ? fill(N * Hv * dv * dk) : std::vector<float>();
  for (auto& e : h0) e *= 0.1f;
  std::vector<int64_t> cu = cs.cu;
  GdnInputs<float> in{q.data(), k.data(), v.data(), g.data(), beta.data(), cs.with_state ? h0.data() : nullptr,
                      cu.data(), N};

  // Conditioning: the CPU backward on q, k, v, dO rounded once to bf16 (where every bf16 implementation starts)
  // against the exact inputs. The kernels round about 8 operands along a chain (as v1 does), whose effects add like
  // a random walk (√8 ≈ 3 times one rounding's): the case's bound is max(2e-2, 6 × that), 2e-2 unless the case is
  // ill-conditioned (β ≈ 2 with near-parallel keys: R's entries grow). Every sabotage tried fails by more.
  {
    const auto rb = [](std::vector<float> x) {
      for (auto& e : x) e = static_cast<float>(bf16(e));
      return x;
    };
    std::vector<float> q16 = rb(q), k16 = rb(k), v16 = rb(v), dO16 = rb(dO);
    GdnInputs<float> in16 = in;
    in16.q = q16.data();
    in16.k = k16.data();
    in16.v = v16.data();
    std::vector<float> cdq(T * Hk * dk), cdk(T * Hk * dk), cdv(T * Hv * dv), cdg(T * Hv), cdb(T * Hv);
    GdnInputGrads<float> cg{cdq.data(), cdk.data(), cdv.data(), cdg.data(), cdb.data(), nullptr};
    GdnOutputGrads<float> co{dO16.data(), cs.with_state ? dhT.data() : nullptr};
    gated_delta_rule_chunked_backward(cg, co, in16, shape, scale);
    const auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
      double num = 0.0, den = 0.0;
      for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
      }
      return std::sqrt(num / std::max(den, 1e-300));
    };
    std::vector<float> edq(T * Hk * dk), edk(T * Hk * dk), edv(T * Hv * dv), edg(T * Hv), edb(T * Hv);
    GdnInputGrads<float> eg{edq.data(), edk.data(), edv.data(), edg.data(), edb.data(), nullptr};
    GdnOutputGrads<float> eo{dO.data(), cs.with_state ? dhT.data() : nullptr};
    gated_delta_rule_chunked_backward(eg, eo, in, shape, scale);
    const double c = std::max({rel(cdq, edq), rel(cdk, edk), rel(cdv, edv), rel(cdb, edb), rel(cdg, edg)});
    g_bound = std::max(2e-2, 6.0 * c);
    std::printf("case: the CPU reference moves by %.1e (largest over dq, dk, dv, dbeta, dg) when q, k, v, dO are "
                "rounded to bf16; bound %.1e\n", c, g_bound);
  }

  // Chunk table as chunk_table_kernel builds it.
  const int64_t maxc = max_chunks(T, N);
  std::vector<ChunkInfo> table(maxc, ChunkInfo{0, 0, 0});
  std::vector<int64_t> seq_first(N + 1);
  int64_t nc = 0;
  for (int64_t s = 0; s < N; ++s) {
    seq_first[s] = nc;
    for (int64_t t0 = cu[s]; t0 < cu[s + 1]; t0 += kC)
      table[nc++] = {t0, static_cast<int32_t>(std::min<int64_t>(kC, cu[s + 1] - t0)), static_cast<int32_t>(s)};
  }
  seq_first[N] = nc;

  // Scratch as the forward passes, dU_loc and dstate leave it.
  std::vector<float> gam(T * Hv), U(T * Hv * dv), dU(T * Hv * dv), dkp(T * Hv * dk, NAN), dgp(T * Hv, NAN);
  std::vector<float> dqv(T * Hv * dk, NAN), dq_out(T * Hk * dk, NAN);
  std::vector<bf16> W(T * Hv * dk), Kd(T * Hv * dk), Qd(T * Hv * dk), Ut(T * Hv * dv), dOh(T * Hv * dv);
  std::vector<bf16> states(maxc * Hv * dv * dk), dstates(maxc * Hv * dv * dk), R(maxc * Hv * kC * kC);
  std::vector<bf16> dW(T * Hv * dk, bf16(NAN));
  for (size_t i = 0; i < dO.size(); ++i) dOh[i] = bf16(dO[i]);
  // Expected (double): dq per v-head, dk and dγ (output/state parts), dW.
  std::vector<double> e_dq(T * Hv * dk), e_dkp(T * Hv * dk), e_dgp(T * Hv), e_dW(T * Hv * dk);
  // dU_loc = scale·Aᵀ dO (what dU_loc leaves for dstate), and what dstate leaves: the full dU, D leaving each chunk.
  std::vector<float> dU_loc(T * Hv * dv, 0.0f);
  std::vector<double> e_dU(T * Hv * dv), e_D(maxc * Hv * dv * dk), e_dh0(N * Hv * dv * dk, 0.0);

  for (int64_t s = 0; s < N; ++s)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t hk = h / G, first = seq_first[s], count = seq_first[s + 1] - first;
      if (count == 0) {  // an empty sequence passes dhT through to dh0
        if (cs.with_state)
          for (int64_t e = 0; e < dv * dk; ++e) e_dh0[(s * Hv + h) * dv * dk + e] = dhT[(s * Hv + h) * dv * dk + e];
        continue;
      }
      std::vector<gdn_detail::Chunk> chs(count);
      std::vector<std::vector<float>> M0(count + 1, std::vector<float>(dv * dk, 0.0f));
      if (cs.with_state) std::copy_n(h0.data() + (s * Hv + h) * dv * dk, dv * dk, M0[0].data());
      for (int64_t c = 0; c < count; ++c) {  // pass 1 (the reference's own stages)
        const ChunkInfo ci = table[first + c];
        gdn_detail::chunk_prepare(chs[c], in, shape, ci.t0, ci.len, h);
        gdn_detail::chunk_write_vectors(chs[c], M0[c].data(), shape);
        M0[c + 1] = M0[c];
        gdn_detail::chunk_advance_state(M0[c + 1].data(), chs[c], shape);
      }
      std::vector<double> D(dv * dk, 0.0);
      if (cs.with_state)
        for (int64_t e = 0; e < dv * dk; ++e) D[e] = dhT[(s * Hv + h) * dv * dk + e];
      for (int64_t c = count - 1; c >= 0; --c) {  // pass 2
        const gdn_detail::Chunk& ch = chs[c];
        const int64_t gci = first + c, t0 = table[gci].t0, len = ch.c, last = len - 1;
        const float* m0 = M0[c].data();
        const auto dOr = [&](int64_t i, int64_t a) { return double(dO[((t0 + i) * Hv + h) * dv + a]); };
        for (int64_t e = 0; e < dv * dk; ++e) {
          states[gci * Hv * dv * dk + h * dv * dk + e] = bf16(m0[e]);
          e_D[gci * Hv * dv * dk + h * dv * dk + e] = D[e];
        }
        for (int64_t i = 0; i < len; ++i) {
          const int64_t t = t0 + i;
          gam[t * Hv + h] = ch.gamma[i];
          for (int64_t a = 0; a < dv; ++a) {
            U[(t * Hv + h) * dv + a] = ch.U[i * dv + a];
            Ut[(t * Hv + h) * dv + a] = bf16(ch.Ut[i * dv + a]);
          }
          for (int64_t d = 0; d < dk; ++d) {
            W[(t * Hv + h) * dk + d] = bf16(ch.W[i * dk + d]);
            Kd[(t * Hv + h) * dk + d] = bf16(ch.decay_out[i] * ch.k[i * dk + d]);
            Qd[(t * Hv + h) * dk + d] = bf16(scale * ch.decay_in[i] * ch.q[i * dk + d]);
          }
          for (int64_t j = 0; j < kC; ++j)
            R[(gci * Hv + h) * kC * kC + i * kC + j] = bf16(j < len ? ch.R[i * len + j] : 0.0f);
        }
        // (a) dU (stored fp32, as dstate leaves it)
        std::vector<float> dUc(len * dv);
        for (int64_t j = 0; j < len; ++j)
          for (int64_t a = 0; a < dv; ++a) {
            double acc = 0.0;
            for (int64_t d = 0; d < dk; ++d) acc += D[a * dk + d] * ch.k[j * dk + d];
            acc *= ch.decay_out[j];
            double loc = 0.0;
            for (int64_t i = j; i < len; ++i) loc += scale * double(ch.QK[i * len + j]) * ch.Gam[i * len + j] * dOr(i, a);
            acc += loc;
            dUc[j * dv + a] = static_cast<float>(acc);
            e_dU[((t0 + j) * Hv + h) * dv + a] = acc;
            dU_loc[((t0 + j) * Hv + h) * dv + a] = static_cast<float>(loc);
          }
        // (c), (d), (f): output/state parts
        std::vector<double> dq(len * dk, 0.0), dkk(len * dk, 0.0), dgm(len, 0.0);
        for (int64_t i = 0; i < len; ++i) {
          for (int64_t a = 0; a < dv; ++a) {
            const double coef = scale * double(ch.decay_in[i]) * dOr(i, a);
            for (int64_t d = 0; d < dk; ++d) dq[i * dk + d] += coef * m0[a * dk + d];
          }
          for (int64_t d = 0; d < dk; ++d) dgm[i] += dq[i * dk + d] * ch.q[i * dk + d];
          for (int64_t j = 0; j <= i; ++j) {
            double du = 0.0;
            for (int64_t a = 0; a < dv; ++a) du += dOr(i, a) * ch.U[j * dv + a];
            const double dA = scale * du * ch.Gam[i * len + j];
            for (int64_t d = 0; d < dk; ++d) {
              dq[i * dk + d] += dA * ch.k[j * dk + d];
              dkk[j * dk + d] += dA * ch.q[i * dk + d];
            }
            dgm[i] += dA * ch.QK[i * len + j];
            dgm[j] -= dA * ch.QK[i * len + j];
          }
          double B = 0.0;
          for (int64_t d = 0; d < dk; ++d) {
            double acc = 0.0;
            for (int64_t a = 0; a < dv; ++a) acc += D[a * dk + d] * ch.U[i * dv + a];
            acc *= ch.decay_out[i];
            dkk[i * dk + d] += acc;
            B += acc * ch.k[i * dk + d];
          }
          dgm[last] += B;
          dgm[i] -= B;
        }
        double md = 0.0;
        for (int64_t e = 0; e < dv * dk; ++e) md += double(m0[e]) * D[e];
        dgm[last] += ch.decay_in[last] * md;
        for (int64_t i = 0; i < len; ++i) {
          const int64_t t = t0 + i;
          e_dgp[t * Hv + h] = dgm[i];
          for (int64_t d = 0; d < dk; ++d) {
            e_dq[(t * Hv + h) * dk + d] = dq[i * dk + d];
            e_dkp[(t * Hv + h) * dk + d] = dkk[i * dk + d];
            double acc = 0.0;
            for (int64_t a = 0; a < dv; ++a) acc += double(dUc[i * dv + a]) * m0[a * dk + d];
            e_dW[(t * Hv + h) * dk + d] = -acc;
          }
        }
        // (b) D ← e^{γ_c} D + scale Σ_i e^{γ_i} dO_i q_iᵀ − Σ_i dU_i W_iᵀ
        std::vector<double> Dn(dv * dk);
        for (int64_t a = 0; a < dv; ++a)
          for (int64_t d = 0; d < dk; ++d) {
            double acc = double(ch.decay_in[last]) * D[a * dk + d];
            for (int64_t i = 0; i < len; ++i)
              acc += scale * double(ch.decay_in[i]) * dOr(i, a) * ch.q[i * dk + d] -
                     double(dUc[i * dv + a]) * ch.W[i * dk + d];
            Dn[a * dk + d] = acc;
          }
        D.swap(Dn);
      }
      for (int64_t e = 0; e < dv * dk; ++e) e_dh0[(s * Hv + h) * dv * dk + e] = D[e];
      (void)hk;
    }

  // The kernel.
  Problem p{q.data(), k.data(), v.data(), g.data(), beta.data(), in.h0, cu.data(), T, Hk, Hv, dk, dv, N, scale};
  ForwardScratch fs{};
  fs.table = table.data();
  fs.seq_first = seq_first.data();
  fs.max_chunks = maxc;
  fs.gam = gam.data();
  fs.W = W.data();
  fs.Kd = Kd.data();
  fs.U = U.data();
  fs.states = states.data();
  fs.R = R.data();
  fs.Ut = Ut.data();
  fs.Qd = Qd.data();
  BackwardScratch bs{dstates.data(), dU.data(), dW.data(), dkp.data(), dgp.data(), dqv.data(), dOh.data()};
  std::vector<float> dk_out(T * Hk * dk, NAN), dv_out(T * Hv * dv, NAN), db_out(T * Hv, NAN), dg_out(T * Hv, NAN);
  Grads gr{dq_out.data(), dk_out.data(), dv_out.data(), dg_out.data(), db_out.data(), nullptr, dO.data(),
           cs.with_state ? dhT.data() : nullptr};
  std::vector<float> dh0_out(N * Hv * dv * dk, NAN);
  gr.dh0 = cs.with_state ? dh0_out.data() : nullptr;
  const bool full = dk == kD && dv == kD;
  std::string lens;
  for (int64_t s = 0; s < N; ++s) lens += (s ? "," : "") + std::to_string(cu[s + 1] - cu[s]);
  // du_local_v2 first (dU_loc and dOh from q, k, dO, γ), as on the GPU.
  const Dim grid{static_cast<unsigned>(maxc), static_cast<unsigned>(Hv), 1};
  std::fill(dOh.begin(), dOh.end(), bf16(NAN));
  std::fill(dU.begin(), dU.end(), NAN);
  emu_launch(grid, v2::kLocThreads, v2::kLocSmem, [&] {
    if (full)
      v2::du_local_kernel<true>(p, fs, bs, gr);
    else
      v2::du_local_kernel<false>(p, fs, bs, gr);
  });
  std::printf("du_local_v2 lens=%s Hk=%ld Hv=%ld dk=%ld dv=%ld%s\n", lens.c_str(), long(Hk), long(Hv), long(dk),
              long(dv), full ? " (kFull)" : "");
  compare("dU_loc", dU, std::vector<double>(dU_loc.begin(), dU_loc.end()));
  {
    std::vector<float> got(dOh.size());
    std::vector<double> want(dOh.size());
    for (size_t i = 0; i < dOh.size(); ++i) {
      got[i] = static_cast<float>(dOh[i]);
      want[i] = static_cast<float>(bf16(dO[i]));
    }
    compare("dOh = bf16(dO)", got, want);
  }
  const std::vector<float> dU_loc_kernel = dU;
  // dstate_v2 with one and with two chunk buffers, each from du_local_v2's dU_loc; the second run's results feed
  // dqk_v2 and wy_v2.
  const Dim pass_grid{static_cast<unsigned>(v2::dstate_blocks(p)), 1, 1};
  std::vector<bf16> f32_dstates[3];  // the fp32-dU chain's results per buffer count, for the bf16-dU chain's check
  std::vector<float> f32_dU[3], f32_dh0[3];
  for (int bufs = 1; bufs <= 2; ++bufs) {
    dU = dU_loc_kernel;
    std::fill(dstates.begin(), dstates.end(), bf16(NAN));
    emu_launch(pass_grid, bufs == 1 ? v2::kDstateThreads<1> : v2::kDstateThreads<2>,
               bufs == 1 ? v2::dstate_smem<1>() : v2::dstate_smem<2>(), [&] {
      if (bufs == 1 && full) v2::dstate_kernel<1, true, false>(p, fs, bs, gr);
      if (bufs == 1 && !full) v2::dstate_kernel<1, false, false>(p, fs, bs, gr);
      if (bufs == 2 && full) v2::dstate_kernel<2, true, false>(p, fs, bs, gr);
      if (bufs == 2 && !full) v2::dstate_kernel<2, false, false>(p, fs, bs, gr);
    });
    std::printf("dstate_v2<%d> lens=%s Hk=%ld Hv=%ld dk=%ld dv=%ld%s%s\n", bufs, lens.c_str(), long(Hk), long(Hv),
                long(dk), long(dv), cs.with_state ? " h0/dhT" : "", full ? " (kFull)" : "");
    std::vector<float> Dgot, Dref_f;
    std::vector<double> Dref;
    for (int64_t ci = 0; ci < maxc; ++ci)
      if (table[ci].len > 0)
        for (int64_t e = 0; e < Hv * dv * dk; ++e) {
          Dgot.push_back(static_cast<float>(dstates[ci * Hv * dv * dk + e]));
          Dref.push_back(e_D[ci * Hv * dv * dk + e]);
        }
    compare("D leaving each chunk", Dgot, Dref);
    compare("dU", dU, e_dU);
    if (cs.with_state) compare("dh0", dh0_out, e_dh0);
    f32_dstates[bufs] = dstates;
    f32_dU[bufs] = dU;
    f32_dh0[bufs] = dh0_out;
  }
  emu_launch(grid, v2::kThreads, v2::kDqkSmem, [&] {
    if (full)
      v2::dqk_kernel<true, false>(p, fs, bs, gr);
    else
      v2::dqk_kernel<false, false>(p, fs, bs, gr);
  });
  const std::vector<float> dkp_after_dqk = dkp, dgp_after_dqk = dgp;
  if (with_wy)
    emu_launch(grid, v2::kThreads, v2::kWySmem, [&] {
      if (full)
        v2::wy_kernel<true, false>(p, fs, bs, gr);
      else
        v2::wy_kernel<false, false>(p, fs, bs, gr);
    });

  std::printf("dqk_v2 lens=%s Hk=%ld Hv=%ld dk=%ld dv=%ld%s%s\n", lens.c_str(), long(Hk), long(Hv), long(dk), long(dv),
              cs.with_state ? " h0/dhT" : "", full ? " (kFull)" : "");
  const std::vector<float>& dq_got = G > 1 ? dqv : dq_out;
  compare("dq", dq_got, e_dq);
  compare("dk (output/state part)", dkp_after_dqk, e_dkp);
  compare("dgamma (output/state part)", dgp_after_dqk, e_dgp);
  std::vector<float> dWf(dW.size());
  for (size_t i = 0; i < dW.size(); ++i) dWf[i] = static_cast<float>(dW[i]);
  compare("dW", dWf, e_dW);
  // Against the library's CPU chunked backward: dq (summed over each GVA group in v-head order, as the gva kernel
  // does); after wy also dk (likewise), dv, dβ, dg.
  std::vector<float> rdq(T * Hk * dk), rdk(T * Hk * dk), rdv(T * Hv * dv), rdg(T * Hv), rdb(T * Hv);
  std::vector<float> rdh0(N * Hv * dv * dk);
  GdnInputGrads<float> rg{rdq.data(), rdk.data(), rdv.data(), rdg.data(), rdb.data(),
                          cs.with_state ? rdh0.data() : nullptr};
  GdnOutputGrads<float> ro{dO.data(), cs.with_state ? dhT.data() : nullptr};
  gated_delta_rule_chunked_backward(rg, ro, in, shape, scale);
  const auto gva = [&](const std::vector<float>& per_v) {
    std::vector<float> out(T * Hk * dk);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hk = 0; hk < Hk; ++hk)
        for (int64_t d = 0; d < dk; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < G; ++j) acc += per_v[(t * Hv + hk * G + j) * dk + d];
          out[(t * Hk + hk) * dk + d] = static_cast<float>(acc);
        }
    return out;
  };
  const auto dbl = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  compare("dq vs chunked_backward", gva(dq_got), dbl(rdq));
  if (cs.with_state) compare("dh0 (dstate_v2) vs chunked_backward", dh0_out, dbl(rdh0));
  if (!with_wy) return;
  std::printf("wy_v2 (after dqk_v2)\n");
  compare("dk vs chunked_backward", G > 1 ? gva(dkp) : dk_out, dbl(rdk));
  compare("dv vs chunked_backward", dv_out, dbl(rdv));
  compare("dbeta vs chunked_backward", db_out, dbl(rdb));
  compare("dg vs chunked_backward", dg_out, dbl(rdg));
  if (full && G > 1) {  // wy_v2<kFull> sums dq over the group's v-heads: gva_kernel's float steps, bit for bit
    std::vector<float> want(T * Hk * dk);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hk = 0; hk < Hk; ++hk)
        for (int64_t d = 0; d < dk; ++d) {
          float acc = 0.0f;
          for (int64_t j = 0; j < G; ++j) acc += dqv[(t * Hv + hk * G + j) * dk + d];
          want[(t * Hk + hk) * dk + d] = acc;
        }
    same_bits("wy_v2 dq = gva_kernel's sum of dqk_v2's dq", dq_out, want);
  }

  // The same chain with the full dU held as bf16 in dU's bytes (BackwardScratch::dUh, as the launcher sets it when
  // dstate, dqk and wy are all v2): every output must equal the fp32-dU chain's above bit for bit, and the bf16 dU
  // must be bf16 of that chain's fp32 dU.
  const std::vector<float> f32_dqv = dqv, f32_dq = dq_out, f32_dkp = dkp, f32_dgp = dgp, f32_dk = dk_out,
                           f32_dv = dv_out, f32_db = db_out, f32_dg = dg_out;
  const std::vector<bf16> f32_dW = dW;
  BackwardScratch bh = bs;
  bh.dUh = reinterpret_cast<bf16*>(dU.data());
  std::printf("bf16 dU chain (dstate_v2 writes dU as bf16; dqk_v2, wy_v2 read it) vs the fp32 dU chain\n");
  for (int bufs = 1; bufs <= 2; ++bufs) {
    dU = dU_loc_kernel;
    std::fill(dstates.begin(), dstates.end(), bf16(NAN));
    std::fill(dh0_out.begin(), dh0_out.end(), NAN);
    emu_launch(pass_grid, bufs == 1 ? v2::kDstateThreads<1> : v2::kDstateThreads<2>,
               bufs == 1 ? v2::dstate_smem<1>() : v2::dstate_smem<2>(), [&] {
      if (bufs == 1 && full) v2::dstate_kernel<1, true, true>(p, fs, bh, gr);
      if (bufs == 1 && !full) v2::dstate_kernel<1, false, true>(p, fs, bh, gr);
      if (bufs == 2 && full) v2::dstate_kernel<2, true, true>(p, fs, bh, gr);
      if (bufs == 2 && !full) v2::dstate_kernel<2, false, true>(p, fs, bh, gr);
    });
    const std::string tag = "dstate_v2<" + std::to_string(bufs) + "> ";
    same_bits(tag + "D leaving each chunk", dstates, f32_dstates[bufs]);
    if (cs.with_state) same_bits(tag + "dh0", dh0_out, f32_dh0[bufs]);
    std::vector<bf16> got(T * Hv * dv), want(T * Hv * dv);
    for (int64_t r = 0; r < T * Hv; ++r)
      for (int64_t a = 0; a < dv; ++a) {
        got[r * dv + a] = bh.dUh[du_h_index(r, dv, a)];
        want[r * dv + a] = bf16(f32_dU[bufs][r * dv + a]);
      }
    same_bits(tag + "bf16 dU = bf16(fp32 dU)", got, want);
  }
  std::fill(dqv.begin(), dqv.end(), NAN);
  std::fill(dq_out.begin(), dq_out.end(), NAN);
  std::fill(dkp.begin(), dkp.end(), NAN);
  std::fill(dgp.begin(), dgp.end(), NAN);
  std::fill(dW.begin(), dW.end(), bf16(NAN));
  std::fill(dk_out.begin(), dk_out.end(), NAN);
  std::fill(dv_out.begin(), dv_out.end(), NAN);
  std::fill(db_out.begin(), db_out.end(), NAN);
  std::fill(dg_out.begin(), dg_out.end(), NAN);
  emu_launch(grid, v2::kThreads, v2::kDqkSmem, [&] {
    if (full)
      v2::dqk_kernel<true, true>(p, fs, bh, gr);
    else
      v2::dqk_kernel<false, true>(p, fs, bh, gr);
  });
  same_bits("dqk_v2 dq", G > 1 ? dqv : dq_out, G > 1 ? f32_dqv : f32_dq);
  same_bits("dqk_v2 dW", dW, f32_dW);
  const std::vector<float> dkp_dqk = dkp, dgp_dqk = dgp;
  same_bits("dqk_v2 dk (output/state part)", dkp_dqk, dkp_after_dqk);
  same_bits("dqk_v2 dgamma (output/state part)", dgp_dqk, dgp_after_dqk);
  emu_launch(grid, v2::kThreads, v2::kWySmem, [&] {
    if (full)
      v2::wy_kernel<true, true>(p, fs, bh, gr);
    else
      v2::wy_kernel<false, true>(p, fs, bh, gr);
  });
  same_bits("wy_v2 dk", G > 1 ? dkp : dk_out, G > 1 ? f32_dkp : f32_dk);
  same_bits("wy_v2 dv", dv_out, f32_dv);
  same_bits("wy_v2 dbeta", db_out, f32_db);
  same_bits("wy_v2 dg", dg_out, f32_dg);
  if (full && G > 1) same_bits("wy_v2 dq (GVA sum)", dq_out, f32_dq);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Case> cases = {
      {{0, 1, 18, 0 + 18 + 64, 147}, 1, 2, 40, 72, true},  // len 1, partial chunks, a full chunk; GVA 2x; dk != dv
      {{0, 6, 6, 70}, 1, 3, 7, 5, true},                  // odd dims, an empty sequence, GVA 3x
      {{0, 130}, 1, 1, 128, 128, true},                   // kFull, a partial last chunk
      {{0, 64, 100}, 2, 2, 128, 128, false},              // kFull, two k-heads, no h0/dhT
      {{0, 100, 230}, 1, 2, 128, 128, true, 10.0f},       // kFull with GVA 2x, 2-3 chunks, strong decay (g to −6.2)
      {{0, 129}, 1, 1, 40, 72, true, 1.0f, true},         // β ≈ 2, near-parallel keys, g ≈ 0
  };
  const int only = argc > 1 ? std::atoi(argv[1]) : -1;
  for (size_t i = 0; i < cases.size(); ++i)
    if (only < 0 || only == static_cast<int>(i)) run_case(cases[i], 1234u + static_cast<uint32_t>(i), true);
  std::printf("%d checks, %d failed\n", g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
