// HLM_NORM_BF16_OUT (models/cuda/cuda_model.h): in the bf16 compute mode a pre-norm block's input norms also write
// their output's bf16 rounding (rmsnorm_*_rounded_cuda) for the branch's projections, in the forward and in the
// recomputing backward, instead of a cast launch after them; with kept activations (--recompute none) they write it
// straight into the kept bf16 input the backward reads. The rounding is cast_f32_to_bf16_cuda's, so everything
// must be BIT-IDENTICAL with the switch off: the logits of a forward, and a forward_train + backward's final hidden
// states and every parameter gradient (memcmp; no tolerance), with the recomputing backward and with kept
// activations. Models: olmo_hybrid_tiny (post-norm attention blocks,
// which keep their path, and pre-norm GDN blocks) and a qwen3_hybrid student converted from qwen3_untied (pre-norm
// attention and GDN blocks). Also checked: the fp32 mode ignores the switch (still identical), and the switch's
// override goes back to the environment.
// HLM_NORM_BF16_DX (same header) likewise: the backward's norms also write the residual gradient's bf16 rounding for
// the pre-norm branches' output projections; every gradient must be BIT-IDENTICAL with it off, alone and with
// HLM_NORM_BF16_OUT on, and in the bf16 mode some branches must have read the rounding (the count of reads grows; in
// olmo_hybrid_tiny, whose attention blocks are post-norm, only the pre-norm GDN blocks' branches that come after a
// norm backward wrote it), in the fp32 mode none.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_train.h"
#include "models/model_train.h"

using namespace hlm;
using namespace hlm::test;

namespace {

struct Run {
  Tensor logits;        // [T, V] host: CudaModel::forward with every token's logits
  Tensor final_hidden;  // [T, hidden] host: forward_train
  DecoderWeights grads; // every parameter's gradient, host
};

Run run_once(CudaModel& gpu, const ModelConfig& c, const TokenBatch& batch, const CudaTensor& d_final,
             Recompute recompute) {
  CudaContext& ctx = cuda_context();
  Run r;
  ForwardOptions options;
  options.all_logits = true;
  r.logits = gpu.forward(batch, options, {}, {});
  CudaModel grads = CudaModel::zeros_like(c, ctx);
  const CudaTrainTrace trace = gpu.forward_train(batch, recompute);
  gpu.backward(trace, d_final.data<float>(), grads);
  r.final_hidden = cuda_download(ctx, trace.final_hidden);
  r.grads = zero_grads_like(c);
  grads.download_into(r.grads);
  return r;
}

void expect_switch_changes_no_bit(Model& cpu_model, const std::string& label) {
  const ModelConfig& c = cpu_model.config();
  const TokenBatch batch = odd_length_batch(c.vocab_size);
  const int64_t T = batch.total_tokens(), H = c.hidden_size;
  CudaContext& ctx = cuda_context();
  const CudaTensor d_final = random_final_gradient(ctx, T, H, /*stream=*/13);
  CudaModel gpu = CudaModel::upload(cpu_model, ctx);
  for (const bool bf16 : {true, false})
  for (const Recompute recompute : {Recompute::Layer, Recompute::None}) {
    gpu.set_bf16_compute(bf16);
    const std::string mode = label + (bf16 ? " bf16" : " fp32") +
                             (recompute == Recompute::None ? " kept activations" : " recomputed");
    cuda_model_set_norm_bf16_out(0);
    cuda_model_set_norm_bf16_dx(0);
    const Run off = run_once(gpu, c, batch, d_final, recompute);
    // {HLM_NORM_BF16_OUT, HLM_NORM_BF16_DX} against both off.
    for (const auto& [out16, dx16] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{1, 1}}) {
      cuda_model_set_norm_bf16_out(out16);
      cuda_model_set_norm_bf16_dx(dx16);
      ASSERT_EQ(cuda_model_norm_bf16_out(), out16 == 1);
      ASSERT_EQ(cuda_model_norm_bf16_dx(), dx16 == 1);
      const int64_t reads_before = cuda_model_norm_bf16_dx_reads();
      const Run on = run_once(gpu, c, batch, d_final, recompute);
      const int64_t reads = cuda_model_norm_bf16_dx_reads() - reads_before;
      cuda_model_set_norm_bf16_out(-1);
      cuda_model_set_norm_bf16_dx(-1);
      const std::string with = mode + (out16 ? " norm bf16 out" : "") + (dx16 ? " norm bf16 dx" : "");
      if (dx16 && bf16) {
        EXPECT_GT(reads, 0) << with << ": no branch read the residual gradient's rounding (did the switch engage?)";
      } else {
        EXPECT_EQ(reads, 0) << with;
      }
      ASSERT_EQ(on.logits.nbytes(), off.logits.nbytes()) << with;
      EXPECT_EQ(std::memcmp(on.logits.raw(), off.logits.raw(), on.logits.nbytes()), 0) << with << ": logits differ";
      EXPECT_EQ(std::memcmp(on.final_hidden.raw(), off.final_hidden.raw(), on.final_hidden.nbytes()), 0)
          << with << ": final hidden states differ";
      DecoderWeights on_grads = on.grads, off_grads = off.grads;
      size_t count = 0;
      const size_t differing = count_differing_gradients(c, cpu_model.mutable_weights(), off_grads, on_grads,
                                                         with + " vs both off", &count);
      std::printf("[check] %s: logits, final hidden and %zu gradients, %zu differ (want 0); %lld branch reads of "
                  "the residual gradient's rounding\n",
                  with.c_str(), count, differing, static_cast<long long>(reads));
    }
  }
}

}  // namespace

TEST(CudaNormBf16Out, OlmoHybridBitIdentical) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("olmo_hybrid_tiny"));
  expect_switch_changes_no_bit(m, "olmo_hybrid_tiny");
}

TEST(CudaNormBf16Out, ConvertedQwen3HybridBitIdentical) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = Model::load(cuda_golden_dir("qwen3_untied"));
  Model student = convert_to_hybrid(teacher, {1}, {.neg_eigval = true, .seed = 3});
  expect_switch_changes_no_bit(student, "qwen3_hybrid student");
}

TEST(CudaNormBf16Out, OverrideGoesBackToTheEnvironment) {
  const bool env = cuda_model_norm_bf16_out();  // the environment's choice (this test binary does not set it)
  cuda_model_set_norm_bf16_out(!env ? 1 : 0);
  EXPECT_NE(cuda_model_norm_bf16_out(), env);
  cuda_model_set_norm_bf16_out(-1);
  EXPECT_EQ(cuda_model_norm_bf16_out(), env);
  const bool env_dx = cuda_model_norm_bf16_dx();
  cuda_model_set_norm_bf16_dx(!env_dx ? 1 : 0);
  EXPECT_NE(cuda_model_norm_bf16_dx(), env_dx);
  cuda_model_set_norm_bf16_dx(-1);
  EXPECT_EQ(cuda_model_norm_bf16_dx(), env_dx);
}
