// The GDN layers' q/k l2norms fused into the causal conv's kernels (ops/causal_conv1d/causal_conv1d_cuda.h,
// HLM_CONV_L2NORM; session 41) inside a whole model: a qwen3_hybrid student converted from a created Qwen3 teacher with
// head_dim 128, so its GDN layers have 128-wide key heads (the fusion's shape; the golden tiny models' heads are
// 16 wide and never take it). One forward_train + backward with the fusion on and off, fp32 and bf16 compute modes,
// kept activations and the recompute: the final hidden states and every parameter gradient BIT-IDENTICAL (the fused
// kernels promise the two launches' bits), and the fused launches counted (it engaged: 2 forwards and 2 backwards per GDN
// layer with kept activations, the recompute's rerun forward adding 2 more).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "cuda_models/cuda_train_support.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_train.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "models/model_train.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"

using namespace hlm;
using namespace hlm::test;

namespace {

Model teacher_with_wide_heads() {
  const nlohmann::json j = {{"model_type", "qwen3"},
                            {"vocab_size", 80},
                            {"hidden_size", 64},
                            {"intermediate_size", 96},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 2},
                            {"num_key_value_heads", 1},
                            {"head_dim", 128},
                            {"max_position_embeddings", 256},
                            {"rms_norm_eps", 1e-6},
                            {"tie_word_embeddings", false},
                            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  return Model::create(parse_model_config(j, "test"), 41);
}

}  // namespace

TEST(CudaGdnL2normFusion, StudentWithWideHeadsGradientsBitIdentical) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = teacher_with_wide_heads();
  Model student = convert_to_hybrid(teacher, {1}, {.seed = 5});  // layer 0 becomes GDN with key heads of 128
  const ModelConfig& c = student.config();
  const TokenBatch batch = odd_length_batch(c.vocab_size);
  CudaContext& ctx = cuda_context();
  const CudaTensor d_final = random_final_gradient(ctx, batch.total_tokens(), c.hidden_size, /*stream=*/17);
  CudaModel gpu = CudaModel::upload(student, ctx);
  for_each_train_mode(gpu, "gdn student", [&](const std::string& mode, Recompute recompute) {
    causal_conv1d_cuda_set_l2norm_fused(0);
    CudaTrainResult unfused = cuda_forward_backward(gpu, batch, d_final, recompute);
    causal_conv1d_cuda_set_l2norm_fused(1);
    const int64_t before = causal_conv1d_l2norm_fused_launches();
    CudaTrainResult fused = cuda_forward_backward(gpu, batch, d_final, recompute);
    const int64_t launches = causal_conv1d_l2norm_fused_launches() - before;
    causal_conv1d_cuda_set_l2norm_fused(-1);
    EXPECT_EQ(launches, recompute == Recompute::None ? 4 : 6) << mode << ": fused launches (one GDN layer)";
    EXPECT_EQ(std::memcmp(fused.final_hidden.raw(), unfused.final_hidden.raw(), fused.final_hidden.nbytes()), 0)
        << mode << ": final hidden states";
    size_t count = 0;
    const size_t differing = count_differing_gradients(c, student.mutable_weights(), unfused.grads, fused.grads,
                                                       mode + " l2norm fused vs unfused", &count);
    EXPECT_EQ(differing, 0u) << mode;
    std::printf("[check] gdn l2norm fusion %s: %lld fused launches, %zu gradients, %zu differ (want 0)\n",
                mode.c_str(), static_cast<long long>(launches), count, differing);
  });
}
