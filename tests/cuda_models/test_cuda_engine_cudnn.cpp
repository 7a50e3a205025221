// The CUDA inference engine with the cuDNN attention engine (ops/attention/attention_cudnn.h) against the same engine
// with the native kernels, bf16 precision: two sequences of one length prefilled together in chunks of 16 (the first
// chunk through attention_forward_cuda's cuDNN path, later chunks through the gathered-context path with the diagonal
// at the bottom right), then decoded (native either way). Every step's logits must agree within the bf16 engine
// bound of test_cuda_engine_bf16.cpp: 4e-2 · (1 + max |logit|) per row (both engines keep fp32 scores and round P to
// bf16 or to a hi + lo pair; the difference is a few bf16 roundings carried through ≤ 4 layers, while a wrong mask
// offset, key row or head moves the logits by O(1) of their scale). The cuDNN executions are counted, so the test
// fails if the chunks never reached cuDNN. Skips without cuDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "infer/cuda/cuda_engine.h"
#include "infer/infer_models.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"
#include "ops/attention/attention_cudnn.h"

using namespace hlm;
using namespace hlm::test;

namespace {

// Teacher-forced steps of both sequences together: prefill [0, prompt) in chunks of `chunk`, then one token each.
std::vector<Tensor> run(CudaModel& g, const Model& model, const std::vector<std::vector<int32_t>>& seqs, int64_t prompt,
                        int64_t chunk) {
  const int64_t L = static_cast<int64_t>(seqs[0].size());
  MemoryRequest r;
  r.max_sequences = static_cast<int64_t>(seqs.size());
  r.block_size = 16;
  r.kv_element_bytes = 2;
  r.kv_blocks = r.max_sequences * ((L + r.block_size - 1) / r.block_size);
  auto e = make_cuda_engine(g, memory_plan_build(model.config(), r));
  std::vector<int> slots;
  for (size_t i = 0; i < seqs.size(); ++i) slots.push_back(e->open_sequence(L));
  std::vector<Tensor> out;
  for (int64_t begin = 0; begin < L;) {
    const int64_t end = begin < prompt ? std::min(prompt, begin + chunk) : begin + 1;
    TokenBatch b;
    for (const auto& s : seqs) b.add_sequence(std::vector<int32_t>(s.begin() + begin, s.begin() + end));
    out.push_back(e->step(slots, b));
    begin = end;
  }
  return out;
}

}  // namespace

TEST(CudaEngineCudnn, ChunkedPrefillMatchesTheNativeKernels) {
  HLM_REQUIRE_CUDA_MODEL();
  std::string why;
  if (!attention_cudnn_available(&why)) GTEST_SKIP() << "cuDNN not loadable: " << why;
  CudaContext ctx;
  nlohmann::json j = student_config_json();  // qwen3_hybrid student, head_dim 64 (cuDNN needs a multiple of 8)
  j["hidden_size"] = 96;
  j["intermediate_size"] = 160;
  j["head_dim"] = 64;
  const Model model = Model::create(parse_model_config(j, "test"), 21);
  CudaModel g = CudaModel::upload(model, ctx);
  g.drop_fp32_weights();
  const int64_t V = model.config().vocab_size;
  const std::vector<std::vector<int32_t>> seqs = {ids_for(72, V, 3), ids_for(72, V, 4)};
  attention_set_engine(AttentionEngine::kNative);
  const std::vector<Tensor> native = run(g, model, seqs, 64, 16);
  attention_set_engine(AttentionEngine::kCudnn);
  const int64_t before = attention_cudnn_executions();
  const std::vector<Tensor> cudnn = run(g, model, seqs, 64, 16);
  const int64_t executions = attention_cudnn_executions() - before;
  attention_clear_engine_override();
  // 4 prefill chunks × the student's attention layers (one first chunk, three over the gathered context).
  int64_t attention_layers = 0;
  for (const LayerKind k : model.config().layer_kinds) attention_layers += k == LayerKind::FullAttention ? 1 : 0;
  EXPECT_EQ(executions, 4 * attention_layers);
  ASSERT_EQ(native.size(), cudnn.size());
  double worst = 0;
  for (size_t s = 0; s < native.size(); ++s) {
    const int64_t rows = native[s].numel() / V;
    for (int64_t r = 0; r < rows; ++r) {
      const float *a = cudnn[s].f32() + r * V, *b = native[s].f32() + r * V;
      double diff = 0, scale = 0;
      for (int64_t v = 0; v < V; ++v) {
        diff = std::max(diff, std::abs(double(a[v]) - double(b[v])));
        if (!std::isfinite(a[v])) diff = INFINITY;
        scale = std::max(scale, std::abs(double(b[v])));
      }
      const double e = diff / (1.0 + scale);
      worst = std::max(worst, e);
      EXPECT_LE(e, 4e-2) << "step " << s << " row " << r;
    }
  }
  std::printf("[cudnn] engine: %lld cuDNN executions, worst row error %.3g (bound 4e-2)\n",
              static_cast<long long>(executions), worst);
}
