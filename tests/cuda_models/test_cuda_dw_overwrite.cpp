// The first backward into a zeroed bf16 gradient holder (the lean plan, cuda_hold_bf16_linear_grads) WRITES each
// linear's weight gradient, bf16(dyᵀ·x) in cuBLASLt's epilogue, instead of adding the fp32 product through scratch
// and rounding (layers/cuda/cuda_linear.h: CudaModel::set_zero marks the linears, their first backward clears the
// mark). Against HLM_DW_BF16_OVERWRITE=off, on a converted qwen3_hybrid student (attention, GDN and MLP linears) in the
// bf16 compute mode:
//   one backward: every linear's bf16 gradient within 1 bf16 ulp of the add-and-round path's (both one rounding of
//     the fp32 product; the products may differ in fp32 summation order, as cuBLASLt picks its algorithm per output
//     type, hence also 2⁻¹⁶ of the tensor's largest value for sums that cancel; −0 becomes +0 only in the add), most
//     of them identical (printed); every fp32 gradient (norms, convs, the GDN's small tensors, the head) identical to
//     the byte (the switch touches only bf16 holders);
//   two backwards of the same batch into the same holder (the second is an accumulating micro-batch: the mark is
//     gone): within 2 bf16 ulps (+ the same allowance) of the off path's (the first's ulp carried, one more
//     rounding), i.e. ≈ twice the one-backward gradient. A second backward that wrongly overwrote would give half of
//     that: far outside the bound.
// Also: with the switch on, the first backward takes the overwrite path once per linear and the second never
// (cuda_linear_dw_overwrites, a count of host calls); with it off, never.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"
#include "cuda_models/cuda_model_support.h"
#include "layers/cuda/cuda_linear.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_train.h"
#include "train/cuda/cuda_bf16_masters.h"

using namespace hlm;
using namespace hlm::test;

namespace {

// Every gradient of the holder, by HF name, widened to f32 (bf16 holders exactly); `bf16` names the bf16 ones.
std::map<std::string, Tensor> download_grads(CudaContext& ctx, CudaModel& grads, std::map<std::string, bool>& bf16) {
  std::map<std::string, Tensor> out;
  for (const CudaModel::NamedTensor& t : grads.named_tensors()) {
    if (t.tensor->raw() == nullptr) continue;
    bf16[t.name] = t.tensor->dtype() == DType::BF16;
    out[t.name] = cuda_download(ctx, *t.tensor).to(DType::F32).contiguous();
  }
  return out;
}

// One bf16 ulp of |v| (8 significant bits): 2^(e − 7) for |v| in [2^e, 2^(e+1)); the smallest normal's for 0.
double bf16_ulp(double v) {
  if (v == 0.0) return std::ldexp(1.0, -133);
  int e = 0;
  std::frexp(std::abs(v), &e);  // |v| = f · 2^e, f in [0.5, 1)
  return std::ldexp(1.0, e - 1 - 7);
}

// `backwards` backwards of the same batch into a zeroed lean holder, with the overwrite switch as given.
// `linears`: how many the model has (each has one bf16 weight-gradient holder).
std::map<std::string, Tensor> run(CudaModel& gpu, const ModelConfig& c, const TokenBatch& batch,
                                  const CudaTensor& d_final, bool overwrite, int backwards, int64_t linears,
                                  std::map<std::string, bool>& bf16) {
  CudaContext& ctx = cuda_context();
  cuda_linear_set_dw_bf16_overwrite(overwrite ? 1 : 0);
  CudaModel grads = CudaModel::zeros_like(c, ctx);
  cuda_hold_bf16_linear_grads(ctx, grads);
  grads.set_zero();
  for (int b = 0; b < backwards; ++b) {
    const CudaTrainTrace trace = gpu.forward_train(batch, Recompute::Layer);
    const int64_t before = cuda_linear_dw_overwrites();
    gpu.backward(trace, d_final.data<float>(), grads);
    const int64_t taken = cuda_linear_dw_overwrites() - before;
    if (overwrite && b == 0)
      EXPECT_EQ(taken, linears) << "the first backward writes every linear's gradient";
    else
      EXPECT_EQ(taken, 0) << "backward " << b + 1 << " with the switch " << (overwrite ? "on" : "off");
  }
  cuda_linear_set_dw_bf16_overwrite(-1);
  return download_grads(ctx, grads, bf16);
}

}  // namespace

TEST(CudaDwOverwrite, FirstBackwardWritesWithinOneRoundingAndLaterOnesAdd) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = Model::load(cuda_golden_dir("qwen3_untied"));
  Model student = convert_to_hybrid(teacher, {1}, {.neg_eigval = true, .seed = 3});
  const ModelConfig& c = student.config();
  const TokenBatch batch = odd_length_batch(c.vocab_size);
  CudaContext& ctx = cuda_context();
  const CudaTensor d_final = random_final_gradient(ctx, batch.total_tokens(), c.hidden_size, /*stream=*/17);
  CudaModel gpu = CudaModel::upload(student, ctx);
  gpu.set_bf16_compute(true);
  int64_t linears = 0;  // the linears' weight gradients are the holder's bf16 tensors (cuda_hold_bf16_linear_grads)
  for (const CudaModel::NamedTensor& t : CudaModel::zeros_like(c, ctx).named_tensors())
    linears += t.name.find("_proj.weight") != std::string::npos ? 1 : 0;
  ASSERT_GT(linears, 0);
  for (const int backwards : {1, 2}) {
    std::map<std::string, bool> bf16;
    const std::map<std::string, Tensor> off = run(gpu, c, batch, d_final, false, backwards, linears, bf16);
    const std::map<std::string, Tensor> on = run(gpu, c, batch, d_final, true, backwards, linears, bf16);
    ASSERT_EQ(on.size(), off.size());
    const double ulps = backwards == 1 ? 1.0 : 2.0;
    size_t bf16_tensors = 0, elements = 0, identical = 0;
    double worst = 0.0;  // largest |on − off| in bf16 ulps of the larger magnitude
    for (const auto& [name, want] : off) {
      const Tensor& got = on.at(name);
      ASSERT_EQ(got.numel(), want.numel()) << name;
      if (!bf16.at(name)) {
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << name << ": an fp32 gradient changed";
        continue;
      }
      ++bf16_tensors;
      const float* g = got.f32();
      const float* w = want.f32();
      double largest = 0.0;
      for (int64_t i = 0; i < want.numel(); ++i) largest = std::max(largest, std::abs(static_cast<double>(w[i])));
      // The fp32 products of the two paths may be summed in other orders (cuBLASLt's algorithm per output type):
      // over this batch's 25 tokens they differ by ≲ 25 · 2⁻²⁴ of the terms' magnitudes, which a sum that cancels
      // can make large next to its own bf16 ulp; 2⁻¹⁶ of the tensor's largest gradient covers that with margin and
      // is far below what a wrong overwrite (a lost or doubled micro-batch) changes.
      const double order = std::ldexp(largest, -16);
      for (int64_t i = 0; i < want.numel(); ++i) {
        const double d = std::abs(static_cast<double>(g[i]) - w[i]);
        const double unit = bf16_ulp(std::max(std::abs(static_cast<double>(g[i])), std::abs(static_cast<double>(w[i]))));
        ASSERT_LE(d, ulps * unit + order) << backwards << " backward(s), " << name << "[" << i << "]: overwrite "
                                          << g[i] << ", add-and-round " << w[i] << " (largest " << largest << ")";
        worst = std::max(worst, d / unit);
        identical += g[i] == w[i] ? 1 : 0;
        ++elements;
      }
    }
    EXPECT_GT(bf16_tensors, 0u);
    std::printf("[check] dw overwrite, %d backward(s): %zu bf16 gradients, %zu of %zu elements identical to the "
                "add-and-round path, largest difference %.2f bf16 ulp (bound %.0f); fp32 gradients identical\n",
                backwards, bf16_tensors, identical, elements, worst, ulps);
  }
}

TEST(CudaDwOverwrite, SwitchOverrideGoesBackToTheEnvironment) {
  const bool env = cuda_linear_dw_bf16_overwrite();  // this test binary does not set HLM_DW_BF16_OVERWRITE
  cuda_linear_set_dw_bf16_overwrite(env ? 0 : 1);
  EXPECT_NE(cuda_linear_dw_bf16_overwrite(), env);
  cuda_linear_set_dw_bf16_overwrite(-1);
  EXPECT_EQ(cuda_linear_dw_bf16_overwrite(), env);
}
