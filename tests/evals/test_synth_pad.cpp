// synth_pad_batch (evals/synth/synth_train.h): the GPU path's padding of a step's packed items to a multiple of a
// bucket of tokens. The padding must leave the items' tokens, targets and sequence boundaries as they were, add only
// pad-token sequences of at most 64 tokens with no targets, and reach the next multiple of the bucket exactly; and on
// the CPU, the loss of the padded batch through the same model equals the unpadded one's (the pad sequences carry no
// target, and packed sequences never see each other).
#include <gtest/gtest.h>

#include <cmath>

#include "evals/synth/synth_models.h"
#include "evals/synth/synth_task.h"
#include "evals/synth/synth_train.h"
#include "models/model.h"
#include "train/trainer_batch.h"

using namespace hlm;

namespace {

PackedBatch items_batch(int64_t n_items, int64_t length0) {
  PackedBatch b;
  b.rows = 1;
  for (int64_t i = 0; i < n_items; ++i) {
    std::vector<int32_t> seq;
    for (int64_t t = 0; t < length0 + 3 * i; ++t) seq.push_back(static_cast<int32_t>(11 + (7 * t + i) % 13));
    b.batch.add_sequence(seq);
    for (int64_t t = 0; t + 1 < static_cast<int64_t>(seq.size()); ++t) b.targets.push_back(-100);
    b.targets.push_back(SynthVocab::kBit0 + static_cast<int32_t>(i % 2));
  }
  b.language.assign(b.targets.size(), 0);
  return b;
}

}  // namespace

TEST(SynthPad, ReachesTheNextMultipleWithShortTargetlessPadSequences) {
  for (const int64_t bucket : {0, 1, 64, 128, 256, 1000}) {
    for (const int64_t length0 : {5, 17, 40}) {
      const PackedBatch before = items_batch(9, length0);
      PackedBatch after = before;
      synth_pad_batch(after, bucket);
      const int64_t T0 = before.batch.total_tokens(), T = after.batch.total_tokens();
      SCOPED_TRACE(testing::Message() << "bucket " << bucket << " T0 " << T0);
      if (bucket <= 0) {
        EXPECT_EQ(T, T0);
        continue;
      }
      EXPECT_EQ(T % bucket, 0);
      EXPECT_LT(T - T0, bucket);
      EXPECT_GE(T, T0);
      ASSERT_EQ(static_cast<int64_t>(after.targets.size()), T);
      ASSERT_EQ(static_cast<int64_t>(after.language.size()), T);
      // The items are untouched.
      for (int64_t s = 0; s <= before.batch.num_sequences(); ++s)
        EXPECT_EQ(after.batch.cu_seqlens[s], before.batch.cu_seqlens[s]);
      for (int64_t t = 0; t < T0; ++t) {
        EXPECT_EQ(after.batch.ids[t], before.batch.ids[t]);
        EXPECT_EQ(after.targets[t], before.targets[t]);
      }
      // What was added: pad tokens without targets, in sequences of 1..64 tokens.
      for (int64_t t = T0; t < T; ++t) {
        EXPECT_EQ(after.batch.ids[t], SynthVocab::kPad);
        EXPECT_EQ(after.targets[t], -100);
        EXPECT_EQ(after.language[t], 0);
      }
      for (int64_t s = before.batch.num_sequences(); s < after.batch.num_sequences(); ++s) {
        const int64_t len = after.batch.cu_seqlens[s + 1] - after.batch.cu_seqlens[s];
        EXPECT_GE(len, 1);
        EXPECT_LE(len, 64);
      }
      after.batch.validate();
    }
  }
}

TEST(SynthPad, CpuLossOfThePaddedBatchEqualsTheItemsLoss) {
  SynthConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_heads = 2;
  c.head_dim = 16;
  c.gdn_value_head_dim = 16;
  c.max_address = 16;
  const ModelConfig mc = synth_model_config(c, SynthArch::HybridNeg, SynthTask::StateTracking);
  Model model = Model::create(mc, 3);
  const PackedBatch before = items_batch(5, 7);
  PackedBatch after = before;
  synth_pad_batch(after, 128);
  ASSERT_GT(after.batch.total_tokens(), before.batch.total_tokens());
  // The answer rows' logits: the padded forward's rows at the items' positions equal the unpadded forward's.
  ForwardOptions o;
  o.all_logits = true;
  const Tensor a = model.forward(before.batch, o), b = model.forward(after.batch, o);
  const int64_t V = mc.vocab_size;
  double worst = 0.0;
  for (int64_t t = 0; t < before.batch.total_tokens(); ++t)
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(double(a.f32()[t * V + v]) - double(b.f32()[t * V + v])));
  // Same rows through the same CPU ops; only the GEMMs' row count differs (OpenBLAS may block rows differently, which
  // does not change a row's own dot products' order): 1e-5 of logits of order 1 is a generous bound.
  EXPECT_LE(worst, 1e-5);
}
