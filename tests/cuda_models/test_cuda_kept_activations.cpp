// Kept activations on the GPU (Recompute::None, models/cuda/cuda_model_train.h) against the recomputing default: one
// forward_train + backward from the same d_final_hidden must give the same final hidden states and every parameter
// gradient BIT-IDENTICAL (memcmp), in fp32 and in the bf16 compute mode (bf16 linears, bf16 attention operands).
// Models: olmo_hybrid_tiny (GDN and post-norm attention blocks: the kept branch outputs) and a qwen3_hybrid student
// converted from qwen3_untied (pre-norm blocks with attention and GDN: the kept normed inputs, biases, neg_eigval).
// The recompute is deterministic and the kept tensors come from the same functions on the same inputs, so any
// difference at all is a bug (a missed kept tensor, a stale buffer, a different operation order); no tolerance.
// Also checked: the kept trace holds one CudaKeptLayer per layer and counts more bytes than the streams alone, in
// the bf16 mode every GDN layer kept its chunked rule's forward (so the bit-identity covers the backward from it),
// and the memory plan's kept_intermediate_bytes equals the kept layers' bytes exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "models/convert.h"
#include "models/cuda/cuda_model_train.h"
#include "models/model_train.h"
#include "train/memory_plan.h"

using namespace hlm;
using namespace hlm::test;

namespace {

struct GpuGradients {
  Tensor final_hidden;     // [T, hidden], host
  DecoderWeights grads;    // every parameter's gradient, host
  size_t kept_bytes = 0;   // the trace's count
  size_t kept_layers = 0;  // CudaTrainTrace::kept.size()
  size_t kept_rule_scratches = 0;  // GDN layers whose chunked rule's forward was kept for the backward
};

GpuGradients forward_backward(CudaModel& model, const TokenBatch& batch, const CudaTensor& d_final,
                              Recompute recompute) {
  CudaContext& ctx = cuda_context();
  CudaModel grads = CudaModel::zeros_like(model.config(), ctx);
  const CudaTrainTrace trace = model.forward_train(batch, recompute);
  model.backward(trace, d_final.data<float>(), grads);
  GpuGradients out{cuda_download(ctx, trace.final_hidden), zero_grads_like(model.config()), trace.kept_bytes(),
                   trace.kept.size()};
  for (const CudaKeptLayer& k : trace.kept) out.kept_rule_scratches += k.gdn.rule_scratch.raw() != nullptr ? 1 : 0;
  grads.download_into(out.grads);
  return out;
}

void expect_kept_matches_recompute(Model& cpu_model, const std::string& label) {
  const ModelConfig& c = cpu_model.config();
  const TokenBatch batch = odd_length_batch(c.vocab_size);
  const int64_t T = batch.total_tokens(), H = c.hidden_size, L = c.num_hidden_layers;
  CudaContext& ctx = cuda_context();
  const CudaTensor d_final = random_final_gradient(ctx, T, H, /*stream=*/11);
  CudaModel gpu = CudaModel::upload(cpu_model, ctx);

  for (const bool bf16 : {false, true}) {
    gpu.set_bf16_compute(bf16);
    const std::string mode = label + (bf16 ? " bf16" : " fp32");
    GpuGradients recomputed = forward_backward(gpu, batch, d_final, Recompute::Layer);
    GpuGradients kept = forward_backward(gpu, batch, d_final, Recompute::None);

    EXPECT_EQ(recomputed.kept_layers, 0u) << mode;
    EXPECT_EQ(kept.kept_layers, static_cast<size_t>(L)) << mode;
    EXPECT_EQ(recomputed.kept_bytes, static_cast<size_t>(2 * L + 2) * sizeof(float) * T * H) << mode;
    EXPECT_GT(kept.kept_bytes, recomputed.kept_bytes) << mode;
    // The bf16 mode's chunked rule keeps its forward for the backward (no prep / state rerun); fp32 runs the
    // recurrence, which has nothing to keep.
    const auto gdn_layers = static_cast<size_t>(
        std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::LinearAttention));
    ASSERT_GT(gdn_layers, 0u) << mode;
    EXPECT_EQ(kept.kept_rule_scratches, bf16 ? gdn_layers : 0u) << mode;
    // The memory plan's arithmetic for --recompute none (train/memory_plan.h) is exact for the GPU's kept layers.
    const int64_t n_seqs = static_cast<int64_t>(batch.cu_seqlens.size()) - 1;
    EXPECT_EQ(kept.kept_bytes - recomputed.kept_bytes, kept_intermediate_bytes(c, T, n_seqs, bf16))
        << mode << ": the memory plan's kept_intermediate_bytes differs from the trace's kept layers";
    EXPECT_EQ(std::memcmp(kept.final_hidden.raw(), recomputed.final_hidden.raw(), kept.final_hidden.nbytes()), 0)
        << mode << ": final hidden states differ";

    size_t count = 0;
    const size_t differing = count_differing_gradients(c, cpu_model.mutable_weights(), recomputed.grads, kept.grads,
                                                       mode + " kept activations vs the recompute", &count);
    std::printf("[check] kept activations %s: %zu gradients, %zu differ (want 0); kept %.1f KiB vs %.1f KiB\n",
                mode.c_str(), count, differing, kept.kept_bytes / 1024.0, recomputed.kept_bytes / 1024.0);
  }
}

}  // namespace

TEST(CudaKeptActivations, OlmoHybridPostNormAndGdnBitIdentical) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("olmo_hybrid_tiny"));
  expect_kept_matches_recompute(m, "olmo_hybrid_tiny");
}

TEST(CudaKeptActivations, ConvertedQwen3HybridBitIdentical) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = Model::load(cuda_golden_dir("qwen3_untied"));
  // Layer 1 keeps attention, layers 0 and 2 become GDN; neg_eigval exercises β = 2σ(b).
  Model student = convert_to_hybrid(teacher, {1}, {.neg_eigval = true, .seed = 3});
  expect_kept_matches_recompute(student, "qwen3_hybrid student");
}
