// The training trace's residual snapshots (CudaTrainTrace::layer_in, mixer_out) written by the pre-norm adds
// themselves (cuda_model_direct_snapshots, HLM_RESIDUAL_SNAPSHOTS: rmsnorm_residual_into_forward_rounded_cuda, the add
// out of place into the next snapshot) against the copies from the one stream buffer: every snapshot, the final stream,
// the final hidden states and every parameter gradient BIT-IDENTICAL (memcmp), fp32 and bf16 compute modes, kept
// activations and the recompute. The same functions on the same inputs in the same order, so any difference is a bug
// (a snapshot overwritten by a later in-place add, a stale stream pointer); no tolerance.
// Models: a qwen3_hybrid student converted from qwen3_untied (every layer pre-norm: the direct form engages, 2 adds per
// layer, counted) and olmo_hybrid_tiny (post-norm attention blocks: the copies stay, no direct add counted).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "cuda_models/cuda_train_support.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_train.h"
#include "models/model_train.h"

using namespace hlm;
using namespace hlm::test;

namespace {

struct Run {
  std::vector<Tensor> layer_in, mixer_out;
  Tensor final_stream;
  CudaTrainResult result;  // final hidden states and gradients
};

Run forward_backward(CudaModel& model, const TokenBatch& batch, const CudaTensor& d_final, Recompute recompute) {
  CudaContext& ctx = cuda_context();
  Run out;
  out.result = cuda_forward_backward(model, batch, d_final, recompute, [&](const CudaTrainTrace& trace) {
    out.final_stream = cuda_download(ctx, trace.final_stream);
    for (const CudaTensor& t : trace.layer_in) out.layer_in.push_back(cuda_download(ctx, t));
    for (const CudaTensor& t : trace.mixer_out) out.mixer_out.push_back(cuda_download(ctx, t));
  });
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void expect_direct_equals_copies(Model& cpu_model, const std::string& label, bool pre_norm) {
  const ModelConfig& c = cpu_model.config();
  const TokenBatch batch = odd_length_batch(c.vocab_size);
  const int64_t L = c.num_hidden_layers;
  CudaContext& ctx = cuda_context();
  const CudaTensor d_final = random_final_gradient(ctx, batch.total_tokens(), c.hidden_size, /*stream=*/13);
  CudaModel gpu = CudaModel::upload(cpu_model, ctx);
  for_each_train_mode(gpu, label, [&](const std::string& mode, Recompute recompute) {
    cuda_model_set_direct_snapshots(0);
    Run copied = forward_backward(gpu, batch, d_final, recompute);
    cuda_model_set_direct_snapshots(1);
    const int64_t adds_before = cuda_model_direct_snapshot_adds();
    Run direct = forward_backward(gpu, batch, d_final, recompute);
    const int64_t adds = cuda_model_direct_snapshot_adds() - adds_before;
    cuda_model_set_direct_snapshots(-1);
    // Pre-norm: every layer's input norm but the first adds the previous MLP branch, every post-attention norm adds
    // the mixer's, and the final norm adds the last MLP's: 2·L adds.
    EXPECT_EQ(adds, pre_norm ? 2 * L : 0) << mode << ": direct snapshot adds";
    ASSERT_EQ(direct.layer_in.size(), static_cast<size_t>(L)) << mode;
    ASSERT_EQ(direct.mixer_out.size(), static_cast<size_t>(L)) << mode;
    ASSERT_EQ(copied.layer_in.size(), static_cast<size_t>(L)) << mode;
    ASSERT_EQ(copied.mixer_out.size(), static_cast<size_t>(L)) << mode;
    for (int64_t i = 0; i < L; ++i) {
      EXPECT_TRUE(same_bytes(direct.layer_in[i], copied.layer_in[i])) << mode << ": layer_in " << i;
      EXPECT_TRUE(same_bytes(direct.mixer_out[i], copied.mixer_out[i])) << mode << ": mixer_out " << i;
    }
    EXPECT_TRUE(same_bytes(direct.final_stream, copied.final_stream)) << mode << ": final stream";
    EXPECT_TRUE(same_bytes(direct.result.final_hidden, copied.result.final_hidden))
        << mode << ": final hidden states";
    size_t count = 0;
    const size_t differing = count_differing_gradients(c, cpu_model.mutable_weights(), copied.result.grads,
                                                       direct.result.grads, mode + " direct snapshots vs copies",
                                                       &count);
    EXPECT_EQ(differing, 0u) << mode;
    std::printf("[check] residual snapshots %s: %lld direct adds, %zu gradients, %zu differ (want 0)\n",
                mode.c_str(), static_cast<long long>(adds), count, differing);
  });
}

}  // namespace

TEST(CudaResidualSnapshots, PreNormStudentDirectEqualsCopiesBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = Model::load(cuda_golden_dir("qwen3_untied"));
  Model student = convert_to_hybrid(teacher, {1}, {.neg_eigval = true, .seed = 3});
  expect_direct_equals_copies(student, "qwen3_hybrid student", /*pre_norm=*/true);
}

TEST(CudaResidualSnapshots, PostNormModelKeepsTheCopies) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("olmo_hybrid_tiny"));
  expect_direct_equals_copies(m, "olmo_hybrid_tiny", /*pre_norm=*/false);
}
