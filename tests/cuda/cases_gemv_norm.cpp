// The small-row GEMV with the input's RMSNorm in its prologue (gemv_cuda.h, GemvNorm) against what it replaces: the
// norm's own launches (gemv_norm_launches_cuda: rmsnorm_forward_rounded_cuda,
// rmsnorm_residual_into_forward_rounded_cuda, or a copy of h and rmsnorm_post_residual_forward_cuda on it) followed by
// the plain GEMV on the norm's fp32 output (kPre) or on the updated stream (kPost). Byte for byte: y, the norm's
// output, its bf16 rounding and the stream's next value.
// Cases: K = 1032 (the shortest block-path row, 5 passes of 256 with a partial last), 2560 (qwen3_4b), 4096 (the
// 7B shapes), 5128 (past the norm's register kernel: its add and norm are two launches); M = 1..4; kPre without and
// with a pending branch (scale 1 and 0.22, granite's residual multiplier form), with and without the bf16 output;
// kPost at scale 1; the group GEMV (two outputs, 37 + 300 columns: 43 blocks) and the SwiGLU form (300 pairs: 38
// blocks), so that with M · ceil(K / 256) = 5-84 passes a block writes one, several or none of the norm's passes;
// fills Normal, Large, Special (NaN/±Inf).
// Also what gemv_norm_supported refuses.
#include <cstdio>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/matmul/gemv_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct NormForm {
  const char* name;
  GemvNorm::Kind kind;
  bool branch;  // kPre: a pending branch added first (kPost always has its branch)
  float scale;
  bool out16;
};

const NormForm kForms[] = {{"pre", GemvNorm::kPre, false, 1.0f, false},
                           {"pre + bf16 out", GemvNorm::kPre, false, 1.0f, true},
                           {"pre + branch", GemvNorm::kPre, true, 1.0f, false},
                           {"pre + branch x0.22 + bf16 out", GemvNorm::kPre, true, 0.22f, true},
                           {"post", GemvNorm::kPost, true, 1.0f, false}};

}  // namespace

TEST(MatmulCuda, GemvNormPrologueEqualsTheNormLaunchThenTheGemvBitForBit) {
  HLM_REQUIRE_CUDA();
  const int64_t n_small = 37, n_large = 300;
  uint64_t seed = 900;
  size_t compared = 0;
  for (const Fill fill : {Fill::Normal, Fill::Large, Fill::Special}) {
    for (const int64_t K : {int64_t{1032}, int64_t{2560}, int64_t{4096}, int64_t{5128}}) {
      const auto weights = [&](int64_t n, const char* what) {
        return DeviceBuffer::from(to_bf16(make_values(static_cast<size_t>(n * K), Fill::Normal, ++seed)), what);
      };
      const DeviceBuffer w1 = weights(n_small, "w1"), w2 = weights(n_large, "w2"), w3 = weights(n_large, "w3");
      const DeviceBuffer wn = DeviceBuffer::from(make_values(static_cast<size_t>(K), Fill::Normal, ++seed), "norm w");
      for (int64_t M = 1; M <= gemv_max_rows(); ++M) {
        const size_t rows = static_cast<size_t>(M * K);
        const DeviceBuffer h = DeviceBuffer::from(make_values(rows, fill, ++seed), "h");
        const DeviceBuffer br = DeviceBuffer::from(make_values(rows, fill, ++seed, 0.5f), "branch");
        for (const NormForm& form : kForms) {
          for (const bool swiglu : {false, true}) {
            SCOPED_TRACE(std::string("gemv norm prologue ") + form.name + (swiglu ? " swiglu" : " group") + " K " +
                         std::to_string(K) + " M " + std::to_string(M) + " " + fill_name(fill));
            // Reference: the norm's launch, then the GEMV on its fp32 result.
            DeviceBuffer out_ref(rows * 4, "norm out (launch)"), out16_ref(rows * 2, "norm bf16 (launch)");
            DeviceBuffer hout_ref(rows * 4, "h out (launch)");
            GemvNorm n;
            n.kind = form.kind;
            n.h = h.as<float>();
            n.branch = form.branch ? br.as<float>() : nullptr;
            n.scale = form.scale;
            n.weight = wn.as<float>();
            n.eps = 1e-6f;
            n.h_out = form.branch ? hout_ref.as<float>() : nullptr;
            n.norm_out = out_ref.as<float>();
            n.norm_out16 = form.out16 ? out16_ref.as<__nv_bfloat16>() : nullptr;
            gemv_norm_launches_cuda(n, M, K, ctx().stream());
            const float* x_ref = form.kind == GemvNorm::kPost ? hout_ref.as<float>() : out_ref.as<float>();
            DeviceBuffer y1_ref(static_cast<size_t>(M * n_small) * 4, "y1 (launch)");
            DeviceBuffer y2_ref(static_cast<size_t>(M * n_large) * 4, "y2 (launch)");
            const GemvOutput ref_outs[2] = {{w1.as<__nv_bfloat16>(), nullptr, y1_ref.as<float>(), n_small},
                                            {w2.as<__nv_bfloat16>(), nullptr, y2_ref.as<float>(), n_large}};
            const GemvOutput gate{w2.as<__nv_bfloat16>(), nullptr, nullptr, n_large};
            const GemvOutput up{w3.as<__nv_bfloat16>(), nullptr, nullptr, n_large};
            if (swiglu)
              gemv_bf16_swiglu_cuda(gate, up, y2_ref.as<float>(), nullptr, x_ref, nullptr, M, K, ctx().stream());
            else
              gemv_bf16_cuda(ref_outs, 2, x_ref, nullptr, M, K, ctx().stream());

            // The prologue form, into fresh buffers (poisoned like the reference's: an element no block writes shows,
            // and a buffer the form does not use stays poisoned on both sides).
            DeviceBuffer out(rows * 4, "norm out (prologue)"), out16(rows * 2, "norm bf16 (prologue)");
            DeviceBuffer hout(rows * 4, "h out (prologue)");
            GemvNorm p = n;
            p.h_out = form.branch ? hout.as<float>() : nullptr;
            p.norm_out = out.as<float>();
            p.norm_out16 = form.out16 ? out16.as<__nv_bfloat16>() : nullptr;
            ASSERT_TRUE(gemv_norm_supported(M, K, p));
            DeviceBuffer y1(static_cast<size_t>(M * n_small) * 4, "y1 (prologue)");
            DeviceBuffer y2(static_cast<size_t>(M * n_large) * 4, "y2 (prologue)");
            const GemvOutput outs[2] = {{w1.as<__nv_bfloat16>(), nullptr, y1.as<float>(), n_small},
                                        {w2.as<__nv_bfloat16>(), nullptr, y2.as<float>(), n_large}};
            if (swiglu)
              gemv_bf16_swiglu_cuda(gate, up, y2.as<float>(), nullptr, nullptr, nullptr, M, K, ctx().stream(), &p);
            else
              gemv_bf16_cuda(outs, 2, nullptr, nullptr, M, K, ctx().stream(), &p);
            ctx().synchronize();
            if (!swiglu) {
              EXPECT_EQ(y1.download_bytes(), y1_ref.download_bytes()) << "y1";
            }
            EXPECT_EQ(y2.download_bytes(), y2_ref.download_bytes()) << (swiglu ? "swiglu h" : "y2");
            EXPECT_EQ(out.download_bytes(), out_ref.download_bytes()) << "norm out";
            EXPECT_EQ(out16.download_bytes(), out16_ref.download_bytes()) << "norm bf16 out";
            EXPECT_EQ(hout.download_bytes(), hout_ref.download_bytes()) << "h out";
            EXPECT_TRUE(buffers_ok({&y1, &y2, &out, &out16, &hout, &y1_ref, &y2_ref, &out_ref, &out16_ref, &hout_ref},
                                   {&h, &br, &w1, &w2, &w3, &wn}));
            compared += static_cast<size_t>(M) * (swiglu ? n_large : n_small + n_large) + 3 * rows;
          }
        }
      }
    }
  }
  std::printf("[check] gemv norm prologue: %zu values compared byte for byte with the norm launch + GEMV\n", compared);

  // Refused: rows of a warp's norm (another summation order), a form without the pointers it needs, h_out aliasing
  // what every block reads, the GEMV's own limits.
  DeviceBuffer buf(4 * 8192 * 4, "buffers");
  float* base = buf.as<float>();
  GemvNorm ok;
  ok.h = base;
  ok.weight = base + 4096;
  ok.norm_out = base + 8192;
  EXPECT_TRUE(gemv_norm_supported(1, 1032, ok));
  EXPECT_FALSE(gemv_norm_supported(1, rmsnorm_cuda_warp_max_dim(), ok));
  EXPECT_FALSE(gemv_norm_supported(1, 1036, ok));  // K not a multiple of 8
  EXPECT_FALSE(gemv_norm_supported(gemv_max_rows() + 1, 1032, ok));
  GemvNorm bad = ok;
  bad.branch = base + 12288;  // a branch without h_out
  EXPECT_FALSE(gemv_norm_supported(1, 1032, bad));
  bad.h_out = base;  // h_out = h
  EXPECT_FALSE(gemv_norm_supported(1, 1032, bad));
  bad.h_out = base + 12288;  // h_out = branch
  EXPECT_FALSE(gemv_norm_supported(1, 1032, bad));
  bad = ok;
  bad.kind = GemvNorm::kPost;  // post without branch and h_out
  EXPECT_FALSE(gemv_norm_supported(1, 1032, bad));
  bad.branch = base + 12288;
  bad.h_out = base + 16384;
  EXPECT_TRUE(gemv_norm_supported(1, 1032, bad));
  bad.norm_out16 = reinterpret_cast<__nv_bfloat16*>(base + 20480);  // post has no bf16 output
  EXPECT_FALSE(gemv_norm_supported(1, 1032, bad));
  bad = ok;
  bad.norm_out = nullptr;
  EXPECT_FALSE(gemv_norm_supported(1, 1032, bad));
}
