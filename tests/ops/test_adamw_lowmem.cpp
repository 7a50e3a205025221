// The low-memory AdamW reference (src/ops/adamw/adamw_lowmem_ref.cpp): code tables, block quantization, stochastic
// rounding, and a small training with 8-bit moments and/or bf16 masters against fp32 AdamW on the same problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/adamw/adamw_lowmem.h"

using namespace hlm;

namespace {

std::vector<float> normal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

}  // namespace

TEST(AdamWLowmem, CodebooksAreSortedWithExactEnds) {
  for (const Q8Codebook* b : {&q8_codebook_signed(), &q8_codebook_unsigned()}) {
    for (int i = 0; i + 1 < b->used; ++i) {
      EXPECT_LT(b->code[static_cast<size_t>(i)], b->code[static_cast<size_t>(i) + 1]) << i;
      EXPECT_GT(b->mid[static_cast<size_t>(i)], b->code[static_cast<size_t>(i)]) << i;
      EXPECT_LT(b->mid[static_cast<size_t>(i)], b->code[static_cast<size_t>(i) + 1]) << i;
    }
    EXPECT_EQ(b->code[b->zero], 0.0f);
    EXPECT_EQ(b->code[static_cast<size_t>(b->used - 1)], 1.0f);
  }
  EXPECT_EQ(q8_codebook_signed().code[0], -1.0f);
}

TEST(AdamWLowmem, QuantizePicksTheNearestCode) {
  // Brute force over every code for many values: the chosen code is at least as near as any other.
  for (const Q8Codebook* b : {&q8_codebook_signed(), &q8_codebook_unsigned()}) {
    const float lo = b->used == 255 ? -1.0f : 0.0f;
    for (int k = 0; k <= 20000; ++k) {
      const float x = lo + (1.0f - lo) * static_cast<float>(k) / 20000.0f;
      const uint8_t q = q8_quantize_value(*b, x);
      const double err = std::abs(static_cast<double>(b->code[q]) - x);
      for (int i = 0; i < b->used; ++i)
        ASSERT_LE(err, std::abs(static_cast<double>(b->code[static_cast<size_t>(i)]) - x) * (1 + 1e-6) + 1e-12)
            << "x " << x << " code " << int(q) << " vs " << i;
    }
  }
}

TEST(AdamWLowmem, RoundTripErrorWithinTheCodeSpacing) {
  // Round trip of a block: each value comes back within half the gap to its neighbouring code, times absmax; the
  // absmax itself exactly; zero blocks stay zero. Sizes with a short last block.
  for (const int64_t n : {1, 255, 256, 257, 1000}) {
    std::vector<float> m = normal(static_cast<size_t>(n), 1 + n, 1e-3f);
    std::vector<float> v(m.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = m[i] * m[i];
    for (int pass = 0; pass < 2; ++pass) {
      const Q8Codebook& b = pass == 0 ? q8_codebook_signed() : q8_codebook_unsigned();
      const std::vector<float>& x = pass == 0 ? m : v;
      std::vector<uint8_t> q(x.size());
      std::vector<float> absmax(static_cast<size_t>(q8_blocks(n))), back(x.size());
      q8_quantize(b, x.data(), n, q.data(), absmax.data());
      q8_dequantize(b, q.data(), absmax.data(), n, back.data());
      for (int64_t i = 0; i < n; ++i) {
        const float a = absmax[static_cast<size_t>(i / kQ8Block)];
        const int c = q[static_cast<size_t>(i)];
        const double gap_lo = c > 0 ? b.code[static_cast<size_t>(c)] - b.code[static_cast<size_t>(c) - 1] : 0.0;
        const double gap_hi = c + 1 < b.used ? b.code[static_cast<size_t>(c) + 1] - b.code[static_cast<size_t>(c)] : 0.0;
        // Half the larger gap, plus fp32 rounding of x/a and code·a (2 ulps of a).
        const double bound = 0.5 * std::max(gap_lo, gap_hi) * a + 2.0 * a * 6e-8;
        ASSERT_LE(std::abs(static_cast<double>(back[static_cast<size_t>(i)]) - x[static_cast<size_t>(i)]), bound)
            << "n " << n << " i " << i;
      }
    }
  }
  std::vector<float> zeros(300, 0.0f), back(300, 1.0f), absmax(2, 1.0f);
  std::vector<uint8_t> q(300);
  q8_quantize(q8_codebook_signed(), zeros.data(), 300, q.data(), absmax.data());
  q8_dequantize(q8_codebook_signed(), q.data(), absmax.data(), 300, back.data());
  for (float x : back) EXPECT_EQ(x, 0.0f);
}

TEST(AdamWLowmem, StochasticRoundingIsUnbiasedAndBracketed) {
  // x between two bf16 neighbours: every draw gives one of them, and the mean over 2^16 evenly spread draws is x
  // (exactly, up to fp32 rounding of the mean: E[round] = x when r is uniform over 16 bits).
  const float x = 1.0f + 0.3f * (1.0f / 128.0f);  // 30% of the way from 1 to the next bf16 (1 + 2^-7)
  const float lo = 1.0f, hi = 1.0f + 1.0f / 128.0f;
  double sum = 0.0;
  for (uint32_t r = 0; r < 65536; ++r) {
    const float y = bf16_to_f32(bf16_round_stochastic(x, r));
    ASSERT_TRUE(y == lo || y == hi) << y;
    sum += y;
  }
  EXPECT_NEAR(sum / 65536.0, x, 1e-7);
  // bf16 values stay as they are; Inf stays Inf.
  EXPECT_EQ(bf16_round_stochastic(1.5f, 0xFFFF), f32_to_bf16(1.5f));
  EXPECT_EQ(bf16_to_f32(bf16_round_stochastic(INFINITY, 0xFFFF)), INFINITY);
  // The stream is a pure function of (seed, step, name).
  EXPECT_EQ(adamw_sr_base(3, 7, "a.weight"), adamw_sr_base(3, 7, "a.weight"));
  EXPECT_NE(adamw_sr_base(3, 7, "a.weight"), adamw_sr_base(3, 8, "a.weight"));
  EXPECT_NE(adamw_sr_base(3, 7, "a.weight"), adamw_sr_base(3, 7, "b.weight"));
}

TEST(AdamWLowmem, F32StorageMatchesTheFp32FormulaAndSkipsNonFiniteScale) {
  std::vector<float> p = normal(70, 5), g = normal(70, 6), m(70, 0.0f), v(70, 0.0f);
  const std::vector<float> p0 = p;
  AdamWLowmemTensor t;
  t.param_f32 = p.data();
  t.exp_avg = m.data();
  t.exp_avg_sq = v.data();
  t.grad = g.data();
  t.n = 70;
  const float nan = NAN;
  adamw_lowmem_step_ref(t, &nan, adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, 1, 0));
  EXPECT_EQ(std::memcmp(p.data(), p0.data(), p.size() * 4), 0);  // skipped
  adamw_lowmem_step_ref(t, nullptr, adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, 1, 0));
  for (size_t i = 0; i < p.size(); ++i) {
    // Step 1: m̂ = g, v̂ = g², so p = p0(1 − lr·wd) − lr·g/(|g| + eps): within a few fp32 roundings.
    const double want = p0[i] * (1 - 1e-5) - 1e-3 * g[i] / (std::abs(g[i]) + 1e-8);
    EXPECT_NEAR(p[i], want, 1e-6 * (std::abs(want) + 1e-3)) << i;
  }
}

// A small training: a diagonal quadratic over 664 parameters (one tensor, three quantization blocks) with curvatures
// 1e-2 .. ~3, 300 steps of AdamW at lr 1e-2 from w = 0; the loss falls by ~5.3 nats (0.37 → 0.0018). Each low-memory
// storage is compared with fp32 storage (the same fp32 element arithmetic) on the same problem:
//   - at every step |ln(loss / loss_fp32)| ≤ 0.35, i.e. the curves stay within ~7% of the total log-decrease of each
//     other. Measured (2026-12-01): bf16-sr 0.040; q8 0.275 and q8 + bf16-sr 0.306 near the end, BELOW the fp32 curve (the
//     8-bit v of the slowly converging coordinates rounds to codes that give slightly larger steps: a ~0.1% faster
//     per-step decay, not an error that grows);
//   - the final loss is at most 10% above the fp32 run's (a storage may converge faster, not slower).
// A broken quantizer (wrong absmax, wrong code, moments not carried between steps) or a biased rounding (nearest
// instead of stochastic, with updates below a bf16 ulp) fails these bounds: the run stalls or diverges.
struct Problem {
  std::vector<float> a, target;  // target w*: the loss is ½·mean((w − w*)²·a)  (diagonal quadratic, scales 1e-2..1)
};

double train_loss_curve(AdamWStateFormat state, MasterFormat master, std::vector<double>* curve) {
  const int64_t n = 664;
  Problem pr{normal(static_cast<size_t>(n), 11), normal(static_cast<size_t>(n), 12)};
  for (float& a : pr.a) a = 1e-2f + std::abs(a);
  std::vector<float> w(static_cast<size_t>(n), 0.0f), g(static_cast<size_t>(n)), m(static_cast<size_t>(n), 0.0f),
      v(static_cast<size_t>(n), 0.0f);
  std::vector<uint16_t> w16(static_cast<size_t>(n), 0);
  std::vector<uint8_t> qm(static_cast<size_t>(n), q8_codebook_signed().zero), qv(static_cast<size_t>(n), 0);
  std::vector<float> am(static_cast<size_t>(q8_blocks(n)), 0.0f), av(am.size(), 0.0f);
  double loss = 0.0;
  for (int64_t step = 1; step <= 300; ++step) {
    loss = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float wi = master == MasterFormat::Bf16Sr ? bf16_to_f32(w16[static_cast<size_t>(i)]) : w[static_cast<size_t>(i)];
      const float d = wi - pr.target[static_cast<size_t>(i)];
      g[static_cast<size_t>(i)] = pr.a[static_cast<size_t>(i)] * d / static_cast<float>(n);
      loss += 0.5 * pr.a[static_cast<size_t>(i)] * d * d / static_cast<double>(n);
    }
    curve->push_back(loss);
    AdamWLowmemTensor t;
    if (master == MasterFormat::Bf16Sr)
      t.param_bf16 = w16.data();
    else
      t.param_f32 = w.data();
    if (state == AdamWStateFormat::Q8) {
      t.q_m = qm.data();
      t.q_v = qv.data();
      t.absmax_m = am.data();
      t.absmax_v = av.data();
    } else {
      t.exp_avg = m.data();
      t.exp_avg_sq = v.data();
    }
    t.grad = g.data();
    t.n = n;
    adamw_lowmem_step_ref(t, nullptr, adamw_lowmem_step(1e-2, 0.0, 0.9, 0.999, 1e-8, step, adamw_sr_base(1, step, "w")));
  }
  return loss;
}

TEST(AdamWLowmem, SmallTrainingTracksFp32AdamW) {
  std::vector<double> base;
  const double base_final = train_loss_curve(AdamWStateFormat::F32, MasterFormat::F32, &base);
  ASSERT_LT(base_final, 0.05 * base[0]);  // the problem is learnt
  for (const auto& [state, master] : {std::pair{AdamWStateFormat::Q8, MasterFormat::F32},
                                      std::pair{AdamWStateFormat::F32, MasterFormat::Bf16Sr},
                                      std::pair{AdamWStateFormat::Q8, MasterFormat::Bf16Sr}}) {
    std::vector<double> curve;
    const double final_loss = train_loss_curve(state, master, &curve);
    SCOPED_TRACE(std::string(adamw_state_format_name(state)) + " / " + master_format_name(master));
    double worst = 0.0;
    for (size_t s = 0; s < curve.size(); ++s) {
      worst = std::max(worst, std::abs(std::log(curve[s] / base[s])));
      ASSERT_LE(std::abs(std::log(curve[s] / base[s])), 0.35) << "step " << s + 1;
    }
    EXPECT_LE(final_loss, 1.10 * base_final);
    std::printf("[check] %s / %s: worst |ln(loss / loss_fp32)| %.3f, final %.4g vs fp32 %.4g\n",
                adamw_state_format_name(state), master_format_name(master), worst, final_loss, base_final);
  }
}

// The lean plan's GPU storages (adamw_lowmem.h): a bf16 gradient is read as its widened value, and an f32 tensor
// holding bf16 values (f32_holds_bf16) takes exactly the bf16 master's step (same random bits, stored widened), so
// the GPU's mixed layout (linears bf16, the rest f32 with bf16 values) equals the CPU optimizer's all-bf16 values.
// A wrong flag (nearest rounding, or no rounding) leaves non-bf16 values or other bits, which this catches.
TEST(AdamWLowmem, Bf16GradientAndF32HeldMasterEqualTheBf16MasterStep) {
  const int64_t n = 1000;
  const size_t un = static_cast<size_t>(n), blocks = static_cast<size_t>(q8_blocks(n));
  std::vector<uint16_t> pa(un);
  const std::vector<float> p0 = normal(un, 3);
  for (size_t i = 0; i < un; ++i) pa[i] = f32_to_bf16(p0[i]);
  std::vector<float> pb(un);
  for (size_t i = 0; i < un; ++i) pb[i] = bf16_to_f32(pa[i]);
  std::vector<uint8_t> qma(un, q8_codebook_signed().zero), qva(un, q8_codebook_unsigned().zero);
  std::vector<float> ama(blocks, 0.0f), ava(blocks, 0.0f);
  std::vector<uint8_t> qmb = qma, qvb = qva;
  std::vector<float> amb = ama, avb = ava;
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = normal(un, 10 + static_cast<uint64_t>(step), 1e-2f);
    std::vector<uint16_t> g16(un);
    std::vector<float> g32(un);
    for (size_t i = 0; i < un; ++i) {
      g16[i] = f32_to_bf16(g[i]);
      g32[i] = bf16_to_f32(g16[i]);
    }
    const AdamWLowmemStep s = adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, step, adamw_sr_base(9, step, "w"));
    AdamWLowmemTensor a, b;
    a.n = b.n = n;
    a.param_bf16 = pa.data();
    a.grad = g32.data();
    a.q_m = qma.data(), a.q_v = qva.data(), a.absmax_m = ama.data(), a.absmax_v = ava.data();
    b.param_f32 = pb.data();
    b.f32_holds_bf16 = true;
    b.grad_bf16 = g16.data();
    b.q_m = qmb.data(), b.q_v = qvb.data(), b.absmax_m = amb.data(), b.absmax_v = avb.data();
    const float scale = 0.5f;
    adamw_lowmem_step_ref(a, &scale, s);
    adamw_lowmem_step_ref(b, &scale, s);
    for (size_t i = 0; i < un; ++i) ASSERT_EQ(bf16_to_f32(pa[i]), pb[i]) << "step " << step << " element " << i;
    EXPECT_EQ(qma, qmb);
    EXPECT_EQ(qva, qvb);
    EXPECT_EQ(ama, amb);
    EXPECT_EQ(ava, avb);
  }
  size_t moved = 0;
  for (size_t i = 0; i < un; ++i) moved += pb[i] != bf16_to_f32(f32_to_bf16(p0[i])) ? 1 : 0;
  // The steps moved many weights: each moves by ~lr = 1e-3 per step against a bf16 ulp of 4e-3..8e-3 near |x| ~ 1,
  // so by the random bits an element leaves its value with probability ~1e-3/ulp per step (measured 491 of 1000 after
  // three steps); nearest rounding would move almost none.
  EXPECT_GT(moved, un / 4);
  // Both storages at once, or neither gradient: internal errors.
  AdamWLowmemTensor bad;
  bad.n = n;
  bad.param_f32 = pb.data();
  bad.exp_avg = pb.data();
  bad.exp_avg_sq = pb.data();
  EXPECT_THROW(adamw_lowmem_step_ref(bad, nullptr, adamw_lowmem_step(1e-3, 0, 0.9, 0.999, 1e-8, 1, 0)), Error);
}

// The stochastic rounding's random bits (adamw_lowmem.h): element j of a tensor takes the (j mod 4)-th 16-bit piece,
// from the low end, of splitmix64(sr_base + ⌊j / 4⌋); a piece of a tensor updated on its own with sr_first = its
// offset (ZeRO-1's shards) gets the whole tensor's bits, and with sr_first left at 0 it does not (so the field is what
// makes them agree).
TEST(AdamWLowmem, RandomBitsComeFourPerHashAndPiecesDrawTheWholeTensors) {
  const uint64_t base = adamw_sr_base(5, 3, "model.layers.0.mlp.down_proj.weight");
  for (uint64_t q = 0; q < 10; ++q)
    for (uint64_t c = 0; c < 4; ++c)
      ASSERT_EQ(adamw_sr_bits(base, 4 * q + c), (splitmix64(base + q) >> (16 * c)) & 0xFFFFu) << q << " " << c;
  const int64_t n = 300, cut = 137;
  const size_t un = static_cast<size_t>(n);
  const std::vector<float> p0 = normal(un, 21), g = normal(un, 22, 1e-2f);
  std::vector<uint16_t> whole(un), pieces(un), unshifted(un);
  for (size_t i = 0; i < un; ++i) whole[i] = pieces[i] = unshifted[i] = f32_to_bf16(p0[i]);
  const AdamWLowmemStep s = adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, 1, base);
  const auto run = [&](uint16_t* p, int64_t first, int64_t len, uint64_t sr_first) {
    std::vector<float> m(static_cast<size_t>(len), 0.0f), v(static_cast<size_t>(len), 0.0f);
    AdamWLowmemTensor t;
    t.n = len;
    t.param_bf16 = p + first;
    t.grad = g.data() + first;
    t.exp_avg = m.data();
    t.exp_avg_sq = v.data();
    AdamWLowmemStep piece = s;
    piece.sr_first = sr_first;
    adamw_lowmem_step_ref(t, nullptr, piece);
  };
  run(whole.data(), 0, n, 0);
  run(pieces.data(), 0, cut, 0);
  run(pieces.data(), cut, n - cut, static_cast<uint64_t>(cut));
  run(unshifted.data(), 0, cut, 0);
  run(unshifted.data(), cut, n - cut, 0);
  EXPECT_EQ(pieces, whole);
  size_t differ = 0;
  for (size_t i = static_cast<size_t>(cut); i < un; ++i) differ += unshifted[i] != whole[i] ? 1 : 0;
  EXPECT_GT(differ, 0u) << "the piece's offset changed no random bit";
}
