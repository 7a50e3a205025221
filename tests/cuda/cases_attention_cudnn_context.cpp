// The cuDNN engine's inference pieces (ops/attention/attention_cudnn.h): attention_cudnn_gather_cache against a host
// gather of a random paged bf16 cache (bytes equal), and attention_cudnn_forward_context (queries the last Sq of Skv
// positions, diagonal at the bottom right) against the CPU reference run in double over each whole sequence, whose
// last Sq rows are what the chunk must give. Skips without cuDNN.
//
// Tolerance, per output element (i, d) with M_id = Σ_j P_ij |v_jd| (exact P): 2^-8·|ref_id| for the output's bf16
// rounding, 2^-8·M_id for P rounded to bf16 before P·V (as FlashAttention and cuDNN do), and 2^-16·M_id for the fp32
// scores, exponentials and sums (each within a few fp32 roundings of a value of order M_id; 2^-16 leaves ~100× room).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/attention/attention.h"
#include "ops/attention/attention_cudnn.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

struct ContextCase {
  int64_t B, Sq, Skv, Hq, Hkv, D;
};

void context_case(const ContextCase& c) {
  const std::string name = "cudnn context B" + std::to_string(c.B) + " Sq" + std::to_string(c.Sq) + " Skv" +
                           std::to_string(c.Skv) + " Hq" + std::to_string(c.Hq) + " Hkv" + std::to_string(c.Hkv) +
                           " D" + std::to_string(c.D);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D)));
  // Full sequences of Skv tokens; the chunk's queries are each sequence's last Sq rows.
  const size_t nq_full = static_cast<size_t>(c.B * c.Skv * c.Hq * c.D), nkv = static_cast<size_t>(c.B * c.Skv * c.Hkv * c.D);
  const std::vector<float> q_full = round_bf16(make_values(nq_full, Fill::Normal, 1));
  const std::vector<float> k = round_bf16(make_values(nkv, Fill::Normal, 2));
  const std::vector<float> v = round_bf16(make_values(nkv, Fill::Normal, 3));
  std::vector<int64_t> cu(static_cast<size_t>(c.B + 1));
  for (int64_t b = 0; b <= c.B; ++b) cu[static_cast<size_t>(b)] = b * c.Skv;
  std::vector<double> ref_full(nq_full);
  const AttentionShape shape{c.B * c.Skv, c.Hq, c.Hkv, c.D, 0};
  attention_forward<double>(ref_full.data(), widen(q_full).data(), widen(k).data(), widen(v).data(), cu.data(), c.B,
                            shape, scale);
  // The same with |v|: Σ_j P_ij |v_jd| = M_id.
  std::vector<double> v_abs = widen(v), mag_full(nq_full);
  for (double& x : v_abs) x = std::abs(x);
  attention_forward<double>(mag_full.data(), widen(q_full).data(), widen(k).data(), v_abs.data(), cu.data(), c.B,
                            shape, scale);
  const size_t row = static_cast<size_t>(c.Hq * c.D);
  std::vector<float> q(static_cast<size_t>(c.B * c.Sq) * row);
  std::vector<double> ref(q.size()), mag(q.size());
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.Sq; ++i) {
      const size_t src = static_cast<size_t>(b * c.Skv + c.Skv - c.Sq + i) * row, dst = static_cast<size_t>(b * c.Sq + i) * row;
      std::copy_n(q_full.begin() + src, row, q.begin() + dst);
      std::copy_n(ref_full.begin() + src, row, ref.begin() + dst);
      std::copy_n(mag_full.begin() + src, row, mag.begin() + dst);
    }
  DeviceBuffer dq = DeviceBuffer::from(to_bf16(q), "q"), dk = DeviceBuffer::from(to_bf16(k), "k");
  DeviceBuffer dv = DeviceBuffer::from(to_bf16(v), "v");
  DeviceBuffer out(q.size() * 2, "out"), lse(static_cast<size_t>(c.B * c.Sq * c.Hq) * 4, "lse");
  std::string why;
  ASSERT_TRUE(attention_cudnn_forward_context(out.as<__nv_bfloat16>(), lse.as<float>(), dq.as<__nv_bfloat16>(),
                                              dk.as<__nv_bfloat16>(), dv.as<__nv_bfloat16>(),
                                              {c.B, c.Sq, c.Skv, c.Hq, c.Hkv, c.D, scale}, ctx().stream(), &why))
      << name << ": " << why;
  const std::vector<float> got = bf16_to_f32(out.download<uint16_t>());
  double worst = 0;
  size_t at = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double bound = std::ldexp(std::abs(ref[e]), -8) + std::ldexp(mag[e], -8) + std::ldexp(mag[e], -16);
    const double r = std::abs(static_cast<double>(got[e]) - ref[e]) / bound;
    if (!(r <= worst)) {
      worst = r;
      at = e;
    }
  }
  std::printf("[cudnn] %s: worst |err| / bound = %.3f (element %zu: got %.6g, ref %.6g)\n", name.c_str(), worst, at,
              static_cast<double>(got[at]), ref[at]);
  EXPECT_LE(worst, 1.0) << name;
}

}  // namespace

TEST(AttentionCudnnContext, GatherCacheCopiesEachSequencesBlocks) {
  HLM_REQUIRE_CUDA();
  const int64_t num_blocks = 13, block_size = 16, Hkv = 2, D = 64, B = 3, context = 37, max_blocks = 4;
  const size_t row = static_cast<size_t>(Hkv * D);
  const std::vector<uint16_t> kc = to_bf16(make_values(static_cast<size_t>(num_blocks * block_size) * row, Fill::Normal, 4));
  const std::vector<uint16_t> vc = to_bf16(make_values(kc.size(), Fill::Normal, 5));
  // Blocks out of order and shared by none: sequence n uses blocks {12 − n, 3 + n, 8 + n, ...}.
  const std::vector<int32_t> tables = {12, 3, 8, 0, 11, 4, 9, 1, 10, 5, 2, 6};
  DeviceBuffer dkc = DeviceBuffer::from(kc, "k_cache"), dvc = DeviceBuffer::from(vc, "v_cache");
  DeviceBuffer dt = DeviceBuffer::from(tables, "tables");
  DeviceBuffer ko(static_cast<size_t>(B * context) * row * 2, "k_out"), vo(ko.bytes(), "v_out");
  attention_cudnn_gather_cache(ko.as<__nv_bfloat16>(), vo.as<__nv_bfloat16>(), dkc.as<__nv_bfloat16>(),
                               dvc.as<__nv_bfloat16>(), dt.as<int32_t>(), max_blocks, block_size, B, context, Hkv, D,
                               ctx().stream());
  std::vector<uint16_t> ke(static_cast<size_t>(B * context) * row), ve(ke.size());
  for (int64_t n = 0; n < B; ++n)
    for (int64_t t = 0; t < context; ++t) {
      const size_t slot = static_cast<size_t>(tables[static_cast<size_t>(n * max_blocks + t / block_size)] * block_size +
                                              t % block_size);
      std::copy_n(kc.begin() + slot * row, row, ke.begin() + static_cast<size_t>(n * context + t) * row);
      std::copy_n(vc.begin() + slot * row, row, ve.begin() + static_cast<size_t>(n * context + t) * row);
    }
  EXPECT_TRUE(ko.download<uint16_t>() == ke);
  EXPECT_TRUE(vo.download<uint16_t>() == ve);
  EXPECT_TRUE(buffers_ok({&ko, &vo}, {&dkc, &dvc, &dt}));
}

TEST(AttentionCudnnContext, ChunkOverContextMatchesTheWholeSequenceReference) {
  HLM_REQUIRE_CUDA();
  std::string why;
  if (!attention_cudnn_available(&why)) GTEST_SKIP() << "cuDNN not loadable: " << why;
  for (const ContextCase& c : {ContextCase{1, 64, 64, 4, 1, 128}, ContextCase{2, 64, 200, 8, 2, 128},
                               ContextCase{3, 17, 129, 4, 4, 64}, ContextCase{1, 1, 300, 2, 1, 64},
                               ContextCase{2, 128, 1024, 8, 2, 128}})
    context_case(c);
}
