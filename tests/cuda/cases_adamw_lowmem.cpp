// The low-memory AdamW on CUDA (src/ops/adamw/adamw_lowmem.cu) against its CPU reference (adamw_lowmem_ref.cpp),
// BIT FOR BIT: both run the same fp32 operations in the same order (explicit _rn intrinsics on the GPU), quantize by
// comparisons against the same midpoint table, and draw the same stochastic-rounding bits, so every byte of the
// parameter, the codes and the block scales must agree.
// Cases: sizes 1, 255, 256, 257, 1000, 2^16 + 3 (a short last block) and 2^20 + 5 (more quantization blocks than
// the persistent grid has CUDA blocks on any GPU up to 512 multiprocessors: each walks several), 8-bit or fp32 moments × fp32 or bf16 master,
// no clip scale / a scale of 0.37 / a NaN scale (skipped: nothing written), three steps in a row (the second and third
// read dequantized moments), weight decay on. Also: the quantize / dequantize kernels against q8_quantize /
// q8_dequantize, and fp32 moments with an fp32 master against the fp32 AdamW kernel (adamw_step_cuda): same bits;
// the kernel's vector and scalar paths (aligned and misaligned rows, a short last block) with NaN / Inf blocks; the
// quantizer's fallbacks (ratios on and next to the midpoints, block scales below 2^-125); a tensor updated in pieces
// with sr_first (ZeRO-1's shards) against the whole tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/adamw/adamw_cuda.h"
#include "ops/adamw/adamw_lowmem_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

::testing::AssertionResult same(const std::string& what, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return ::testing::AssertionFailure() << what << ": byte " << i << " differs (" << int(a[i]) << " vs " << int(b[i])
                                           << ")";
  return ::testing::AssertionSuccess();
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

TEST(AdamWLowmemCuda, QuantizeAndDequantizeMatchTheReferenceBitForBit) {
  HLM_REQUIRE_CUDA();
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{1000}, int64_t{(1 << 16) + 3},
                          int64_t{(1 << 20) + 5}}) {
    for (const bool is_signed : {true, false}) {
      std::vector<float> x = make_values(static_cast<size_t>(n), Fill::Normal, 900 + n, 1e-3f);
      if (!is_signed)
        for (float& v : x) v = v * v;
      if (n >= 512) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
      if (n >= 768) std::fill(x.begin() + 512, x.begin() + 768, NAN);   // an all-NaN block: absmax 0, zero codes
      const Q8Codebook& book = is_signed ? q8_codebook_signed() : q8_codebook_unsigned();
      std::vector<uint8_t> q(x.size());
      std::vector<float> absmax(static_cast<size_t>(q8_blocks(n))), back(x.size());
      q8_quantize(book, x.data(), n, q.data(), absmax.data());
      q8_dequantize(book, q.data(), absmax.data(), n, back.data());
      DeviceBuffer dx = DeviceBuffer::from(x, "x"), dq(q.size(), "q"), da(absmax.size() * 4, "absmax"),
                   dback(back.size() * 4, "back");
      q8_quantize_cuda(is_signed, dx.as<float>(), n, dq.as<uint8_t>(), da.as<float>(), ctx().stream());
      q8_dequantize_cuda(is_signed, dq.as<uint8_t>(), da.as<float>(), n, dback.as<float>(), ctx().stream());
      const std::string what = "n " + std::to_string(n) + (is_signed ? " signed" : " unsigned");
      EXPECT_TRUE(same(what + " codes", dq.download_bytes(), bytes_of(q)));
      EXPECT_TRUE(same(what + " absmax", da.download_bytes(), bytes_of(absmax)));
      EXPECT_TRUE(same(what + " dequantized", dback.download_bytes(), bytes_of(back)));
      EXPECT_TRUE(buffers_ok({&dq, &da, &dback}, {&dx}));
    }
  }
}

TEST(AdamWLowmemCuda, StepMatchesTheReferenceBitForBit) {
  HLM_REQUIRE_CUDA();
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{1000}, int64_t{(1 << 16) + 3}}) {
    for (const bool q8 : {true, false}) {
      for (const bool bf16 : {false, true}) {
        for (const int scale_kind : {0, 1, 2}) {  // none, 0.37, NaN
          const std::string what = "n " + std::to_string(n) + (q8 ? " q8" : " f32") + (bf16 ? " bf16" : " f32") +
                                   " scale " + std::to_string(scale_kind);
          const size_t un = static_cast<size_t>(n), blocks = static_cast<size_t>(q8_blocks(n));
          // Host state.
          std::vector<float> p = make_values(un, Fill::Normal, 10 + n), m(un, 0.0f), v(un, 0.0f);
          std::vector<uint16_t> p16 = to_bf16(p);
          std::vector<uint8_t> qm(un, q8_codebook_signed().zero), qv(un, 0);
          std::vector<float> am(blocks, 0.0f), av(blocks, 0.0f);
          // Device state (the same initial bytes).
          DeviceBuffer dp = DeviceBuffer::from(p, "p"), dp16 = DeviceBuffer::from(p16, "p16"),
                       dm = DeviceBuffer::from(m, "m"), dv = DeviceBuffer::from(v, "v"),
                       dqm = DeviceBuffer::from(qm, "qm"), dqv = DeviceBuffer::from(qv, "qv"),
                       dam = DeviceBuffer::from(am, "am"), dav = DeviceBuffer::from(av, "av");
          const float scale_value = scale_kind == 2 ? NAN : 0.37f;
          DeviceBuffer dscale = DeviceBuffer::from(std::vector<float>{scale_value}, "scale");
          for (int64_t step = 1; step <= 3; ++step) {
            const std::vector<float> g = make_values(un, Fill::Normal, 100 * step + n, 1e-2f);
            DeviceBuffer dg = DeviceBuffer::from(g, "g");
            const AdamWLowmemStep s =
                adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, step, adamw_sr_base(5, step, "layer.weight"));
            AdamWLowmemTensor h, d;
            h.n = d.n = n;
            h.grad = g.data();
            d.grad = dg.as<float>();
            if (bf16) {
              h.param_bf16 = p16.data();
              d.param_bf16 = dp16.as<uint16_t>();
            } else {
              h.param_f32 = p.data();
              d.param_f32 = dp.as<float>();
            }
            if (q8) {
              h.q_m = qm.data(), h.q_v = qv.data(), h.absmax_m = am.data(), h.absmax_v = av.data();
              d.q_m = dqm.as<uint8_t>(), d.q_v = dqv.as<uint8_t>(), d.absmax_m = dam.as<float>(),
              d.absmax_v = dav.as<float>();
            } else {
              h.exp_avg = m.data(), h.exp_avg_sq = v.data();
              d.exp_avg = dm.as<float>(), d.exp_avg_sq = dv.as<float>();
            }
            adamw_lowmem_step_ref(h, scale_kind == 0 ? nullptr : &scale_value, s);
            adamw_lowmem_step_cuda(d, scale_kind == 0 ? nullptr : dscale.as<float>(), s, ctx().stream());
            const std::string at = what + " step " + std::to_string(step);
            if (bf16)
              ASSERT_TRUE(same(at + " param bf16", dp16.download_bytes(), bytes_of(p16)));
            else
              ASSERT_TRUE(same(at + " param", dp.download_bytes(), bytes_of(p)));
            if (q8) {
              ASSERT_TRUE(same(at + " q_m", dqm.download_bytes(), bytes_of(qm)));
              ASSERT_TRUE(same(at + " q_v", dqv.download_bytes(), bytes_of(qv)));
              ASSERT_TRUE(same(at + " absmax_m", dam.download_bytes(), bytes_of(am)));
              ASSERT_TRUE(same(at + " absmax_v", dav.download_bytes(), bytes_of(av)));
            } else {
              ASSERT_TRUE(same(at + " m", dm.download_bytes(), bytes_of(m)));
              ASSERT_TRUE(same(at + " v", dv.download_bytes(), bytes_of(v)));
            }
            EXPECT_TRUE(buffers_ok({&dp, &dp16, &dm, &dv, &dqm, &dqv, &dam, &dav}, {&dg, &dscale}));
          }
          if (scale_kind == 2) {  // NaN scale: every step skipped, nothing moved
            EXPECT_EQ(bytes_of(p), bytes_of(make_values(un, Fill::Normal, 10 + n))) << what;
            EXPECT_TRUE(dqm.unchanged() && dm.unchanged()) << what;
          }
        }
      }
    }
  }
}

TEST(AdamWLowmemCuda, Fp32StorageHasTheFp32KernelsBits) {
  HLM_REQUIRE_CUDA();
  const int64_t n = 4099;
  const std::vector<float> p = make_values(static_cast<size_t>(n), Fill::Normal, 1),
                           g = make_values(static_cast<size_t>(n), Fill::Normal, 2);
  const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  DeviceBuffer p1 = DeviceBuffer::from(p, "p1"), m1 = DeviceBuffer::from(zeros, "m1"), v1 = DeviceBuffer::from(zeros, "v1");
  DeviceBuffer p2 = DeviceBuffer::from(p, "p2"), m2 = DeviceBuffer::from(zeros, "m2"), v2 = DeviceBuffer::from(zeros, "v2");
  DeviceBuffer dg = DeviceBuffer::from(g, "g"), scale = DeviceBuffer::from(std::vector<float>{0.5f}, "scale");
  for (int64_t step = 1; step <= 2; ++step) {
    adamw_step_cuda(p1.as<float>(), m1.as<float>(), v1.as<float>(), nullptr, dg.as<float>(), scale.as<float>(), n,
                    adamw_cuda_step(1e-3, 0.01, 0.9, 0.999, 1e-8, step), ctx().stream());
    AdamWLowmemTensor t;
    t.param_f32 = p2.as<float>();
    t.exp_avg = m2.as<float>();
    t.exp_avg_sq = v2.as<float>();
    t.grad = dg.as<float>();
    t.n = n;
    adamw_lowmem_step_cuda(t, scale.as<float>(), adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, step, 0),
                           ctx().stream());
  }
  EXPECT_TRUE(same("param", p1.download_bytes(), p2.download_bytes()));
  EXPECT_TRUE(same("m", m1.download_bytes(), m2.download_bytes()));
  EXPECT_TRUE(same("v", v1.download_bytes(), v2.download_bytes()));
}

namespace {

// Bit-for-bit equality of fp32 / bf16 rows, except that two NaNs match whatever their payloads: the GPU's arithmetic
// returns the canonical NaN where x86 keeps the operand's payload, so a NaN gradient's update is NaN on both with
// different bits. Codes and block scales are compared byte for byte (a block scale is never NaN).
::testing::AssertionResult same_or_both_nan(const std::string& what, const std::vector<uint8_t>& a,
                                            const std::vector<uint8_t>& b, bool bf16) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  const size_t w = bf16 ? 2 : 4;
  for (size_t i = 0; i + w <= a.size(); i += w) {
    uint32_t x = 0, y = 0;
    std::memcpy(&x, a.data() + i, w);
    std::memcpy(&y, b.data() + i, w);
    const bool nx = bf16 ? (x & 0x7FFFu) > 0x7F80u : (x & 0x7FFFFFFFu) > 0x7F800000u;
    const bool ny = bf16 ? (y & 0x7FFFu) > 0x7F80u : (y & 0x7FFFFFFFu) > 0x7F800000u;
    if (x != y && !(nx && ny))
      return ::testing::AssertionFailure() << what << ": element " << i / w << " differs (0x" << std::hex << x
                                           << " vs 0x" << y << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

// The kernel's two paths (adamw_lowmem.cu): full blocks of aligned rows take the vector path (8 consecutive elements
// per lane, 16- and 8-byte accesses), a short last block and every block of a row that is not aligned the scalar
// one. Sizes 2048 (full blocks only) and 549 (two full blocks and a 37-element tail); rows at their allocation's
// start (vector path) or one element past it (misaligned: scalar path); the storages of the lean plan (bf16 gradient
// with a bf16 master, or with an f32-held master), the fp32 one, and fp32 moments with a bf16 master. Special
// values: step 1's gradient is NaN over the whole first block, +Inf at element 300 and NaN at the last element; so
// block 0's new m and v are all NaN (the reference's absmax is then 0: std::max(0, NaN) keeps 0), block 1's absmax
// is +Inf, and at step 2 block 1 dequantizes to NaN everywhere (0 · Inf) — all-NaN blocks on both paths.
TEST(AdamWLowmemCuda, VectorAndScalarPathsAndSpecialValuesMatchTheReference) {
  HLM_REQUIRE_CUDA();
  struct Storage {
    bool q8, param_bf16, f32_held, grad_bf16;
  };
  const Storage storages[] = {{true, true, false, true}, {true, false, true, true}, {true, false, false, false},
                              {false, true, false, true}};
  for (const int64_t n : {int64_t{2048}, int64_t{549}}) {
    for (const size_t off : {size_t{0}, size_t{1}}) {
      for (const Storage& st : storages) {
        for (const bool special : {false, true}) {
          const std::string what = "n " + std::to_string(n) + " offset " + std::to_string(off) +
                                   (st.q8 ? " q8" : " f32-moments") +
                                   (st.param_bf16 ? " bf16" : st.f32_held ? " f32-held" : " f32") +
                                   (st.grad_bf16 ? " grad-bf16" : " grad-f32") + (special ? " special" : "");
          const size_t un = static_cast<size_t>(n), len = un + off, blocks = static_cast<size_t>(q8_blocks(n));
          // Host rows of len elements whose first `off` are padding; the tensor starts at element off.
          std::vector<float> p = bf16_to_f32(to_bf16(make_values(len, Fill::Normal, 40 + n))), m(len, 0.0f),
                             v(len, 0.0f);
          std::vector<uint16_t> p16 = to_bf16(p);
          std::vector<uint8_t> qm(len, q8_codebook_signed().zero), qv(len, 0);
          std::vector<float> am(blocks, 0.0f), av(blocks, 0.0f);
          DeviceBuffer dp = DeviceBuffer::from(p, "p"), dp16 = DeviceBuffer::from(p16, "p16"),
                       dm = DeviceBuffer::from(m, "m"), dv = DeviceBuffer::from(v, "v"),
                       dqm = DeviceBuffer::from(qm, "qm"), dqv = DeviceBuffer::from(qv, "qv"),
                       dam = DeviceBuffer::from(am, "am"), dav = DeviceBuffer::from(av, "av");
          for (int64_t step = 1; step <= 3; ++step) {
            std::vector<float> g = make_values(len, Fill::Normal, 300 * step + n, 1e-2f);
            if (special && step == 1) {
              for (size_t i = 0; i < 256; ++i) g[off + i] = NAN;
              g[off + 300] = INFINITY;
              g[off + un - 1] = NAN;
            }
            const std::vector<uint16_t> g16 = to_bf16(g);
            if (st.grad_bf16) g = bf16_to_f32(g16);
            DeviceBuffer dg = DeviceBuffer::from(g, "g"), dg16 = DeviceBuffer::from(g16, "g16");
            const AdamWLowmemStep s =
                adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, step, adamw_sr_base(7, step, "layer.weight"));
            AdamWLowmemTensor h, d;
            h.n = d.n = n;
            if (st.grad_bf16) {
              h.grad_bf16 = g16.data() + off;
              d.grad_bf16 = dg16.as<uint16_t>() + off;
            } else {
              h.grad = g.data() + off;
              d.grad = dg.as<float>() + off;
            }
            if (st.param_bf16) {
              h.param_bf16 = p16.data() + off;
              d.param_bf16 = dp16.as<uint16_t>() + off;
            } else {
              h.param_f32 = p.data() + off;
              d.param_f32 = dp.as<float>() + off;
              h.f32_holds_bf16 = d.f32_holds_bf16 = st.f32_held;
            }
            if (st.q8) {
              h.q_m = qm.data() + off, h.q_v = qv.data() + off, h.absmax_m = am.data(), h.absmax_v = av.data();
              d.q_m = dqm.as<uint8_t>() + off, d.q_v = dqv.as<uint8_t>() + off, d.absmax_m = dam.as<float>(),
              d.absmax_v = dav.as<float>();
            } else {
              h.exp_avg = m.data() + off, h.exp_avg_sq = v.data() + off;
              d.exp_avg = dm.as<float>() + off, d.exp_avg_sq = dv.as<float>() + off;
            }
            adamw_lowmem_step_ref(h, nullptr, s);
            adamw_lowmem_step_cuda(d, nullptr, s, ctx().stream());
            const std::string at = what + " step " + std::to_string(step);
            if (special && st.q8 && step == 1) {  // the all-NaN blocks are there (and the device must match them)
              ASSERT_TRUE(am[0] == 0.0f && av[0] == 0.0f && std::isinf(am[1]) && std::isinf(av[1])) << at;
            }
            if (special && st.q8 && step == 2) {
              ASSERT_TRUE(av[1] == 0.0f) << at;
            }
            if (st.param_bf16)
              ASSERT_TRUE(same_or_both_nan(at + " param bf16", dp16.download_bytes(), bytes_of(p16), true));
            else
              ASSERT_TRUE(same_or_both_nan(at + " param", dp.download_bytes(), bytes_of(p), false));
            if (st.q8) {
              ASSERT_TRUE(same(at + " q_m", dqm.download_bytes(), bytes_of(qm)));
              ASSERT_TRUE(same(at + " q_v", dqv.download_bytes(), bytes_of(qv)));
              ASSERT_TRUE(same(at + " absmax_m", dam.download_bytes(), bytes_of(am)));
              ASSERT_TRUE(same(at + " absmax_v", dav.download_bytes(), bytes_of(av)));
            } else {
              ASSERT_TRUE(same_or_both_nan(at + " m", dm.download_bytes(), bytes_of(m), false));
              ASSERT_TRUE(same_or_both_nan(at + " v", dv.download_bytes(), bytes_of(v), false));
            }
            EXPECT_TRUE(buffers_ok({&dp, &dp16, &dm, &dv, &dqm, &dqv, &dam, &dav}, {&dg, &dg16}));
          }
        }
      }
    }
  }
}

namespace {

// The g whose first moment at step 1 from zero moments, RN(one_minus_beta1 · g), is `target` (or the nearest such
// product within ±256 ulps of target / one_minus_beta1).
float grad_for_m(float target, float one_minus_beta1) {
  float g = target / one_minus_beta1, best = g;
  for (int k = 0; k < 256; ++k) {
    const float up = std::nextafter(g, INFINITY), at = one_minus_beta1 * g;
    if (at == target) return g;
    if (std::fabs(at - target) < std::fabs(one_minus_beta1 * best - target)) best = g;
    g = at < target ? up : std::nextafter(g, -INFINITY);
  }
  return best;
}

// The g ≥ 0 whose second moment at step 1, RN(one_minus_beta2 · RN(g·g)), is nearest to `target`.
float grad_for_v(float target, float one_minus_beta2) {
  float g = std::sqrt(target / one_minus_beta2), best = g;
  const auto v_of = [&](float x) { return one_minus_beta2 * (x * x); };
  for (int k = 0; k < 256; ++k) {
    if (std::fabs(v_of(g) - target) < std::fabs(v_of(best) - target)) best = g;
    g = v_of(g) < target ? std::nextafter(g, INFINITY) : std::nextafter(g, -INFINITY);
  }
  return best;
}

}  // namespace

// The quantizer's rare paths on the vector path, against the reference, bit for bit. The kernel's fast path takes
// the code of x · RN(1/absmax) when no midpoint lies within 2^-20 of it, and otherwise (or when RN(1/absmax) is not
// a normal number) divides and walks the table: step 1 from zero moments puts m = RN(0.1f · g) and
// v = RN(0.001f · RN(g²)) where the test wants them. Blocks (256 elements each): 0, m on the midpoints themselves, one
// ulp either side, with absmax 1 (exact ratios: ties go to the lower code); 1, the same midpoints times an absmax of
// ~0.7 (ratios a rounding away from them); 2, v near its midpoints; 3, tiny gradients (absmax_m below 2^-125, so no
// normal reciprocal: every m divided; v underflows to 0: the zero code); 4, small gradients (v subnormal: every v
// divided); 5, plain normal values. (An absmax above 2^125 needs an infinite v: the special-values test has those.)
// Step 2 reads the dequantized moments back with plain gradients. Also checked on the host: blocks 0-2 hold at least
// 100 ratios within 2^-20 of a midpoint, so the fallback is exercised.
TEST(AdamWLowmemCuda, QuantizerFallbacksMatchTheReference) {
  HLM_REQUIRE_CUDA();
  constexpr size_t kBlocks = 6, n = kBlocks * 256;
  const AdamWLowmemStep s1 = adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, 1, adamw_sr_base(11, 1, "w"));
  const Q8Codebook& bm = q8_codebook_signed();
  const Q8Codebook& bv = q8_codebook_unsigned();
  std::vector<float> g(n);
  uint64_t x = 77;
  const auto next = [&x] { return x = splitmix64(x); };
  for (size_t b = 0; b < 2; ++b) {  // m: midpoints and their neighbours, absmax 1 (block 0) or ~0.7 (block 1)
    const float absmax = b == 0 ? 1.0f : 0.7f;
    g[b * 256] = grad_for_m(absmax, s1.one_minus_beta1);
    for (size_t i = 1; i < 256; ++i) {
      const float mid = bm.mid[next() % static_cast<uint64_t>(bm.used - 1)];
      float t = mid * absmax;
      if (i % 3 == 1) t = std::nextafter(t, INFINITY);
      if (i % 3 == 2) t = std::nextafter(t, -INFINITY);
      g[b * 256 + i] = grad_for_m(std::fabs(t) <= std::fabs(absmax) ? t : mid * absmax, s1.one_minus_beta1);
    }
  }
  g[2 * 256] = grad_for_v(0.5f, s1.one_minus_beta2);  // block 2: v near its midpoints under absmax_v ≈ 0.5
  for (size_t i = 1; i < 256; ++i)
    g[2 * 256 + i] = grad_for_v(bv.mid[next() % static_cast<uint64_t>(bv.used - 1)] * 0.5f, s1.one_minus_beta2);
  const std::vector<float> normal = make_values(n, Fill::Normal, 4242, 1e-2f);
  for (size_t i = 0; i < 256; ++i) {
    g[3 * 256 + i] = normal[3 * 256 + i] * 1e-36f;  // m ~1e-39 (absmax < 2^-125), v = 0
    g[4 * 256 + i] = normal[4 * 256 + i] * 1e-16f;  // g ~1e-18: v ~1e-39 (absmax_v < 2^-125), m normal
    g[5 * 256 + i] = normal[5 * 256 + i];
  }
  // The host check that the fallback has work: ratios within 2^-20 (relative) of a midpoint in blocks 0-2.
  int near = 0;
  for (size_t b = 0; b < 3; ++b) {
    std::vector<float> mv(256);
    float amax = 0.0f;
    for (size_t i = 0; i < 256; ++i) {
      const float gi = g[b * 256 + i];
      mv[i] = b < 2 ? s1.one_minus_beta1 * gi : s1.one_minus_beta2 * (gi * gi);
      amax = std::max(amax, std::fabs(mv[i]));
    }
    const Q8Codebook& book = b < 2 ? bm : bv;
    for (size_t i = 0; i < 256; ++i) {
      const float r = mv[i] / amax;
      for (int j = 0; j + 1 < book.used; ++j)
        if (std::fabs(r - book.mid[static_cast<size_t>(j)]) <= std::fabs(r) * 0x1p-20f) {
          ++near;
          break;
        }
    }
  }
  ASSERT_GE(near, 100) << "the test's values no longer reach the quantizer's fallback";
  std::vector<uint16_t> p16 = to_bf16(make_values(n, Fill::Normal, 4343));
  std::vector<uint8_t> qm(n, bm.zero), qv(n, bv.zero);
  std::vector<float> am(kBlocks, 0.0f), av(kBlocks, 0.0f);
  DeviceBuffer dp16 = DeviceBuffer::from(p16, "p16"), dqm = DeviceBuffer::from(qm, "qm"),
               dqv = DeviceBuffer::from(qv, "qv"), dam = DeviceBuffer::from(am, "am"), dav = DeviceBuffer::from(av, "av");
  for (int64_t step = 1; step <= 2; ++step) {
    const std::vector<float> gs = step == 1 ? g : make_values(n, Fill::Normal, 4444, 1e-2f);
    DeviceBuffer dg = DeviceBuffer::from(gs, "g");
    const AdamWLowmemStep s =
        step == 1 ? s1 : adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, 2, adamw_sr_base(11, 2, "w"));
    AdamWLowmemTensor h, d;
    h.n = d.n = static_cast<int64_t>(n);
    h.grad = gs.data(), d.grad = dg.as<float>();
    h.param_bf16 = p16.data(), d.param_bf16 = dp16.as<uint16_t>();
    h.q_m = qm.data(), h.q_v = qv.data(), h.absmax_m = am.data(), h.absmax_v = av.data();
    d.q_m = dqm.as<uint8_t>(), d.q_v = dqv.as<uint8_t>(), d.absmax_m = dam.as<float>(), d.absmax_v = dav.as<float>();
    adamw_lowmem_step_ref(h, nullptr, s);
    adamw_lowmem_step_cuda(d, nullptr, s, ctx().stream());
    const std::string at = "step " + std::to_string(step);
    if (step == 1) {  // the blocks are what the comment says
      ASSERT_TRUE(am[0] == 1.0f && am[3] > 0.0f && am[3] < 0x1p-125f && av[3] == 0.0f && av[4] > 0.0f &&
                  av[4] < 0x1p-125f && am[4] >= 0x1p-125f)
          << at;
    }
    ASSERT_TRUE(same(at + " param bf16", dp16.download_bytes(), bytes_of(p16)));
    ASSERT_TRUE(same(at + " q_m", dqm.download_bytes(), bytes_of(qm)));
    ASSERT_TRUE(same(at + " q_v", dqv.download_bytes(), bytes_of(qv)));
    ASSERT_TRUE(same(at + " absmax_m", dam.download_bytes(), bytes_of(am)));
    ASSERT_TRUE(same(at + " absmax_v", dav.download_bytes(), bytes_of(av)));
    EXPECT_TRUE(buffers_ok({&dp16, &dqm, &dqv, &dam, &dav}, {&dg}));
  }
}

// A tensor updated in pieces (ZeRO-1's shards: sr_first = the piece's offset) draws the whole tensor's random bits:
// pieces on the vector path (offset 0 and 512: groups of four start there) and on the scalar path (offsets 256 and
// 259: a short piece, and a piece whose indices do not start a group), with fp32 moments and a bf16 master; and with
// 8-bit moments and an f32-held master in two block-aligned pieces. Every byte against the whole-tensor reference.
TEST(AdamWLowmemCuda, PiecesDrawTheWholeTensorsBits) {
  HLM_REQUIRE_CUDA();
  constexpr size_t n = 1000;
  for (const bool q8 : {false, true}) {
    const std::vector<size_t> cuts = q8 ? std::vector<size_t>{0, 512, n} : std::vector<size_t>{0, 256, 259, 512, n};
    std::vector<float> p = bf16_to_f32(to_bf16(make_values(n, Fill::Normal, 61))), m(n, 0.0f), v(n, 0.0f);
    std::vector<uint16_t> p16 = to_bf16(p);
    std::vector<uint8_t> qm(n, q8_codebook_signed().zero), qv(n, 0);
    std::vector<float> am(q8_blocks(n), 0.0f), av(q8_blocks(n), 0.0f);
    DeviceBuffer dp = DeviceBuffer::from(p, "p"), dp16 = DeviceBuffer::from(p16, "p16"), dm = DeviceBuffer::from(m, "m"),
                 dv = DeviceBuffer::from(v, "v"), dqm = DeviceBuffer::from(qm, "qm"), dqv = DeviceBuffer::from(qv, "qv"),
                 dam = DeviceBuffer::from(am, "am"), dav = DeviceBuffer::from(av, "av");
    for (int64_t step = 1; step <= 2; ++step) {
      const std::vector<float> g = make_values(n, Fill::Normal, 70 + step, 1e-2f);
      DeviceBuffer dg = DeviceBuffer::from(g, "g");
      const AdamWLowmemStep s = adamw_lowmem_step(1e-3, 0.01, 0.9, 0.999, 1e-8, step, adamw_sr_base(3, step, "w"));
      AdamWLowmemTensor h;
      h.n = static_cast<int64_t>(n);
      h.grad = g.data();
      if (q8) {
        h.param_f32 = p.data(), h.f32_holds_bf16 = true;
        h.q_m = qm.data(), h.q_v = qv.data(), h.absmax_m = am.data(), h.absmax_v = av.data();
      } else {
        h.param_bf16 = p16.data(), h.exp_avg = m.data(), h.exp_avg_sq = v.data();
      }
      adamw_lowmem_step_ref(h, nullptr, s);
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        const size_t at = cuts[c], len = cuts[c + 1] - at;
        AdamWLowmemTensor d;
        d.n = static_cast<int64_t>(len);
        d.grad = dg.as<float>() + at;
        if (q8) {
          d.param_f32 = dp.as<float>() + at, d.f32_holds_bf16 = true;
          d.q_m = dqm.as<uint8_t>() + at, d.q_v = dqv.as<uint8_t>() + at;
          d.absmax_m = dam.as<float>() + at / 256, d.absmax_v = dav.as<float>() + at / 256;
        } else {
          d.param_bf16 = dp16.as<uint16_t>() + at, d.exp_avg = dm.as<float>() + at, d.exp_avg_sq = dv.as<float>() + at;
        }
        AdamWLowmemStep piece = s;
        piece.sr_first = at;
        adamw_lowmem_step_cuda(d, nullptr, piece, ctx().stream());
      }
      const std::string at = std::string(q8 ? "q8" : "f32 moments") + " step " + std::to_string(step);
      if (q8) {
        ASSERT_TRUE(same(at + " param", dp.download_bytes(), bytes_of(p)));
        ASSERT_TRUE(same(at + " q_m", dqm.download_bytes(), bytes_of(qm)));
        ASSERT_TRUE(same(at + " q_v", dqv.download_bytes(), bytes_of(qv)));
      } else {
        ASSERT_TRUE(same(at + " param bf16", dp16.download_bytes(), bytes_of(p16)));
        ASSERT_TRUE(same(at + " m", dm.download_bytes(), bytes_of(m)));
        ASSERT_TRUE(same(at + " v", dv.download_bytes(), bytes_of(v)));
      }
      EXPECT_TRUE(buffers_ok({&dp, &dp16, &dm, &dv, &dqm, &dqv, &dam, &dav}, {&dg}));
    }
  }
}
