// The low-memory AdamW on CUDA (src/ops/adamw/adamw_lowmem.cu) against its CPU reference (adamw_lowmem_ref.cpp),
// BIT FOR BIT: both run the same fp32 operations in the same order (explicit _rn intrinsics on the GPU), quantize by
// comparisons against the same midpoint table, and draw the same stochastic-rounding bits, so every byte of the
// parameter, the codes and the block scales must agree.
// Cases: sizes 1, 255, 256, 257, 1000, 2^16 + 3 (a short last block) and 2^20 + 5 (more quantization blocks than
// the persistent grid has CUDA blocks on any GPU up to 512 multiprocessors: each walks several), 8-bit or fp32 moments × fp32 or bf16 master,
// no clip scale / a scale of 0.37 / a NaN scale (skipped: nothing written), three steps in a row (the second and third
// read dequantized moments), weight decay on. Also: the quantize / dequantize kernels against q8_quantize /
// q8_dequantize, and fp32 moments with an fp32 master against the fp32 AdamW kernel (adamw_step_cuda): same bits;
// the kernel's vector and scalar paths (aligned and misaligned rows, a short last block) with NaN / Inf blocks.
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
