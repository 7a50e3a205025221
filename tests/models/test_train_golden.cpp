// Gradient parity with torch autograd (goldens written by tools/goldens/make_train_goldens.py from the committed tiny
// HF models): the loss, the per-token losses and EVERY parameter gradient of
//   CE on qwen3_untied (biases, untied head), granite (multipliers), olmo_hybrid_tiny (GDN + post-norm attention);
//   forward KL (τ = 1 and 2) from qwen3_untied into qwen3_tied (tied head) and into olmo_hybrid_tiny.
// Path under test: model_forward_train -> train/lm_head_loss (chunked, small chunks to cross chunk borders) ->
// model_backward, with per-layer recomputation and again with kept activations (bit-identical gradients).
// Tolerance: max |ours − torch| ≤ 1e-4 · max |torch| per gradient tensor. Both sides run fp32; ours accumulates some
// sums in double, HF's GDN uses its chunked torch path where we use the token recurrence, and gradients pass back
// through up to four layers of different summation orders. Dense cases measure ~2e-6, the OLMo-Hybrid ones up to
// 4.8e-5 (in the first GDN layer's q/k/v projections, at the end of the longest backward chain; printed).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "models/model_train.h"
#include "support/golden.h"
#include "support/random.h"
#include "train/lm_head_loss.h"

using namespace hlm;

namespace {

constexpr double kMaxRelError = 1e-4;

LmHead<float> head_of(const Model& m) {
  const ModelConfig& c = m.config();
  return {m.weights().lm_head.weight.f32(), c.vocab_size, c.hidden_size, c.logits_scaling};
}

// Next-token targets inside each packed sequence; the last token of a sequence predicts nothing (-100).
std::vector<int32_t> next_token_targets(const TokenBatch& b) {
  std::vector<int32_t> t(b.ids.size(), -100);
  for (int64_t s = 0; s < b.num_sequences(); ++s)
    for (int64_t i = b.cu_seqlens[s]; i + 1 < b.cu_seqlens[s + 1]; ++i) t[i] = b.ids[i + 1];
  return t;
}

class TrainGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGolden, LossAndEveryGradientMatchTorch) {
  const std::string case_name = GetParam();
  const SafetensorsFile golden = test::open_golden(case_name);
  const auto& meta = golden.metadata();
  Model student = Model::load(test::golden_dir(meta.at("student")));
  const TokenBatch batch = test::golden_batch(golden);
  const int64_t N = batch.total_tokens(), H = student.config().hidden_size;
  const LmHeadChunking chunking{.vocab_chunk = 96, .row_block = 16};  // V = 320, N = 38: several chunks each way

  const ForwardTrace trace = model_forward_train(student, batch);
  DecoderWeights grads = zero_grads_like(student.config());
  Tensor d_hidden = Tensor::zeros({N, H});
  LmHeadGrad<float> grad{d_hidden.f32(), grads.lm_head.weight.f32()};
  std::vector<float> per_token(static_cast<size_t>(N));
  TokenLossResult result;
  if (meta.at("loss") == "ce") {
    const std::vector<int32_t> targets = next_token_targets(batch);
    result = lm_head_cross_entropy(per_token.data(), trace.final_hidden.f32(), N, head_of(student), targets.data(),
                                   static_cast<const float*>(nullptr), &grad, chunking);
  } else {
    Model teacher = Model::load(test::golden_dir(meta.at("teacher")));
    const ForwardTrace teacher_trace = model_forward_train(teacher, batch);
    const double tau = std::stod(meta.at("tau"));
    result = lm_head_forward_kl(per_token.data(), teacher_trace.final_hidden.f32(), head_of(teacher),
                                trace.final_hidden.f32(), head_of(student), N, tau,
                                static_cast<const float*>(nullptr), &grad, chunking);
    for (float& v : per_token) v = static_cast<float>(v * tau * tau);  // the golden stores τ²·KL_t
  }
  model_backward(student, batch, trace, d_hidden, grads);

  const float golden_loss = golden.tensor_f32("loss").f32()[0];
  EXPECT_NEAR(result.loss, golden_loss, 1e-5 * std::abs(golden_loss)) << case_name;
  const Tensor golden_per_token = golden.tensor_f32("per_token");
  EXPECT_LE(test::max_rel_error(per_token.data(), golden_per_token.f32(), per_token.size()), 1e-5);

  DecoderWeights& weights = student.mutable_weights();
  double worst = 0.0;
  std::string worst_name;
  int compared = 0;
  for (const NamedParameter& p : named_parameters(student.config(), weights, grads)) {
    const std::string key = "grad." + p.name;
    ASSERT_NE(golden.find(key), nullptr) << case_name << ": golden lacks " << key;
    const Tensor expect = golden.tensor_f32(key);
    ASSERT_EQ(expect.numel(), p.grad.numel()) << key;
    const double err = test::max_rel_error(p.grad.f32(), expect.f32(), static_cast<size_t>(expect.numel()));
    EXPECT_LE(err, kMaxRelError) << case_name << " " << key;
    if (err >= worst) worst = err, worst_name = p.name;
    ++compared;
  }
  // Every golden gradient was compared (no parameter of the HF model is missing on our side).
  int golden_grads = 0;
  for (const SafetensorsEntry& e : golden.entries()) golden_grads += e.name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, golden_grads) << case_name;
  std::printf("%s: loss %.6f (torch %.6f), %d gradients, worst max-relative error %.3g (%s)\n", case_name.c_str(),
              result.loss, golden_loss, compared, worst, worst_name.c_str());

  // Kept activations (--recompute none): the same operations in the same order, so the model backward from the same
  // d_hidden gives bit-identical gradients (both from zero, without the loss's own LM-head term), while keeping more
  // memory than the per-layer recomputation's residual streams.
  const ForwardTrace kept = model_forward_train(student, batch, Recompute::None);
  ASSERT_EQ(0, std::memcmp(kept.final_hidden.f32(), trace.final_hidden.f32(), kept.final_hidden.nbytes()));
  EXPECT_GT(kept.kept_bytes(), trace.kept_bytes());
  DecoderWeights recomputed_grads = zero_grads_like(student.config()), kept_grads = zero_grads_like(student.config());
  model_backward(student, batch, trace, d_hidden, recomputed_grads);
  model_backward(student, batch, kept, d_hidden, kept_grads);
  const std::vector<NamedParameter> a = named_parameters(student.config(), weights, recomputed_grads);
  const std::vector<NamedParameter> b = named_parameters(student.config(), weights, kept_grads);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[i].grad.f32(), b[i].grad.f32(), a[i].grad.nbytes()))
        << case_name << " " << a[i].name << ": kept activations changed the gradient";
}

INSTANTIATE_TEST_SUITE_P(Torch, TrainGolden,
                         ::testing::Values("train_ce_qwen3_untied", "train_ce_granite", "train_ce_olmo_hybrid",
                                           "train_kl_qwen3_tied", "train_kl_olmo_hybrid"));

}  // namespace
