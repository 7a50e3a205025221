// The two host holders shaped like a model (models/model_train.h): zero_grads_like (zero-filled gradients) and
// unfilled_weights_like (shapes only, for a device upload that never reads them: CudaModel::zeros_like, the host
// AdamW of a GPU run). They must list the same tensors at the same shapes as the model's own weights, in f32, with a
// tied head sharing the embedding and an untied one apart; zero_grads_like's every element is +0. Models: a tied
// qwen3, a MoE qwen3 (expert tensors) and OLMo-Hybrid (GDN tensors).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "models/model_train.h"
#include "support/golden.h"

using namespace hlm;

TEST(WeightsShapedLike, SameTensorsAsTheModelAndZerosWhereFilled) {
  for (const char* name : {"qwen3_tied", "qwen3_moe_tiny", "olmo_hybrid_tiny", "qwen3_untied"}) {
    Model m = Model::load(test::golden_dir(name));
    const ModelConfig& c = m.config();
    DecoderWeights zeros = zero_grads_like(c), unfilled = unfilled_weights_like(c);
    const std::vector<NamedParameter> own = named_parameters(c, m.mutable_weights(), zeros);
    const std::vector<NamedParameter> shaped = named_parameters(c, unfilled, unfilled);
    ASSERT_EQ(own.size(), shaped.size()) << name;
    for (size_t i = 0; i < own.size(); ++i) {
      EXPECT_EQ(own[i].name, shaped[i].name) << name;
      EXPECT_EQ(own[i].value.shape(), own[i].grad.shape()) << name << " " << own[i].name << ": zero_grads_like";
      EXPECT_EQ(own[i].value.shape(), shaped[i].value.shape()) << name << " " << own[i].name << ": unfilled";
      EXPECT_EQ(shaped[i].value.dtype(), DType::F32) << name << " " << own[i].name;
      EXPECT_TRUE(shaped[i].value.is_contiguous()) << name << " " << own[i].name;
      const float* g = own[i].grad.f32();
      int64_t nonzero = 0;
      for (int64_t j = 0; j < own[i].grad.numel(); ++j) {
        uint32_t bits = 0;
        std::memcpy(&bits, &g[j], sizeof bits);
        nonzero += bits != 0 ? 1 : 0;
      }
      EXPECT_EQ(nonzero, 0) << name << " " << own[i].name << ": zero_grads_like is not +0 everywhere";
    }
    const bool tied = c.tie_word_embeddings;
    for (DecoderWeights* w : {&zeros, &unfilled}) {
      ASSERT_TRUE(w->lm_head.weight.defined()) << name;
      EXPECT_EQ(w->lm_head.weight.raw() == w->embed_tokens.raw(), tied) << name << ": head sharing";
    }
  }
}
