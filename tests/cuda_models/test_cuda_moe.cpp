// Routed-expert (MoE) models on CUDA (layers/cuda/moe_layer_cuda.h) against the CPU forward: the HF goldens
// qwen3_moe_tiny (8 experts top-3, renormalised, a dense layer 0) and qwen3_5_moe_tiny (shared expert with its sigmoid
// gate, gated attention, GDN), and a created qwen3_moe with Qwen3-30B-A3B's routing shape (128 experts, top-8) at toy
// widths, where most experts get a token or two and many none. Every capture point (mlp_delta.i isolates each MoE
// layer) and the logits; the CUDA engine's prefill and decode steps; `generate --device cuda` ids; training refused.
//
// Bounds: fp32 — max |gpu − cpu| / max |cpu| ≤ 1e-4 per tensor, as test_cuda_model_forward.cpp (GEMM summation
// order: the grouped GEMM's fmaf chain vs OpenBLAS; routing agrees exactly unless two probabilities sit within an
// ulp, which these inputs do not hit: a flipped pick would show as O(1e-1)). bf16 compute mode — ≤ 4e-2 on the
// logits, as test_cuda_bf16.cpp (the router stays fp32, so the picks match; each expert adds two bf16 products), and
// ≥ 1e-5 so the mode is seen to engage. Engine: 2e-4 · (1 + max |cpu|) per row, test_cuda_engine.cpp's bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_context.h"
#include "core/error.h"
#include "cuda_models/cuda_forward_parity.h"
#include "cuda_models/cuda_model_support.h"
#include "infer/cpu_engine.h"
#include "infer/cuda/cuda_engine.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_train.h"
#include "models/model.h"

using namespace hlm;
using namespace hlm::test;

namespace {

constexpr double kEngineTol = 2e-4;

Model created_wide_routing() {
  const nlohmann::json j = {{"model_type", "qwen3_moe"},  {"vocab_size", 96},
                            {"hidden_size", 40},          {"num_hidden_layers", 2},
                            {"num_attention_heads", 4},   {"num_key_value_heads", 2},
                            {"head_dim", 10},             {"max_position_embeddings", 64},
                            {"intermediate_size", 48},    {"num_experts", 128},
                            {"num_experts_per_tok", 8},   {"moe_intermediate_size", 24},
                            {"norm_topk_prob", true},     {"rope_theta", 10000.0}};
  return Model::create(parse_model_config(j, "test"), 23);
}

void expect_forward_match(Model& cpu_model, const std::string& label, bool check_bf16) {
  expect_cuda_forward_match(cpu_model, odd_length_batch(cpu_model.config().vocab_size), "moe", label, check_bf16);
}

}  // namespace

TEST(CudaMoe, GoldenQwen3MoeForwardMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("qwen3_moe_tiny"));
  expect_forward_match(m, "qwen3_moe_tiny", /*check_bf16=*/true);
}

TEST(CudaMoe, WideRoutingForwardMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = created_wide_routing();
  expect_forward_match(m, "qwen3_moe 128 experts top-8", /*check_bf16=*/true);
}

TEST(CudaMoe, GoldenQwen35MoeSharedExpertForwardMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("qwen3_5_moe_tiny"));
  expect_forward_match(m, "qwen3_5_moe_tiny", /*check_bf16=*/false);
}

TEST(CudaMoe, EnginePrefillAndDecodeMatchTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  Model model = Model::load(cuda_golden_dir("qwen3_moe_tiny"));
  CudaModel gpu_model = CudaModel::upload(model, ctx);
  const std::vector<int32_t> ids = ids_for(21, model.config().vocab_size, 7);
  const int64_t V = model.config().vocab_size, L = static_cast<int64_t>(ids.size()), prompt = 13;
  MemoryRequest r;
  r.max_sequences = 1;
  r.block_size = 4;
  r.kv_blocks = (L + 3) / 4;
  const MemoryPlan plan = memory_plan_build(model.config(), r);
  auto gpu = make_cuda_engine(gpu_model, plan);
  auto cpu = make_cpu_engine(model, plan);
  const int gs = gpu->open_sequence(L), cs = cpu->open_sequence(L);
  double worst = 0.0;
  for (int64_t begin = 0; begin < L;) {
    const int64_t end = begin < prompt ? prompt : begin + 1;
    TokenBatch b;
    b.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
    const int gslot[] = {gs}, cslot[] = {cs};
    const Tensor g = gpu->step(gslot, b), c = cpu->step(cslot, b);
    const double e = row_error(g.f32(), c.f32(), V);
    EXPECT_LE(e, kEngineTol) << "step ending at " << end;
    worst = std::max(worst, e);
    begin = end;
  }
  std::printf("[engine] qwen3_moe_tiny prefill 13 + decode 8: worst row error vs the CPU engine %.3g (bound %.0e)\n",
              worst, kEngineTol);
}

TEST(CudaMoe, GenerateCliGreedyIdsEqualTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  const std::string args = "generate " + cuda_golden_dir("qwen3_moe_tiny").string() +
                           " --ids 3,1,4,1,5,9,2,6 --max-new-tokens 12 --json";
  const RunResult cpu = run_cli(args + " --device cpu");
  const RunResult gpu = run_cli(args + " --device cuda --precision fp32");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const auto ids_of = [](const std::string& out) {
    const nlohmann::json j = nlohmann::json::parse(out);
    if (j.contains("ids")) return j["ids"];
    return j.at("results").at(0).at("ids");
  };
  EXPECT_EQ(ids_of(cpu.out), ids_of(gpu.out));
  std::printf("[engine] generate qwen3_moe_tiny --device cuda: %s\n", ids_of(gpu.out).dump().c_str());
}

TEST(CudaMoe, TrainingIsRefusedClearly) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = created_wide_routing();
  CudaModel gpu = CudaModel::upload(m, cuda_context());
  try {
    gpu.forward_train(odd_length_batch(m.config().vocab_size));
    ADD_FAILURE() << "forward_train ran an MoE model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MoE"), std::string::npos) << e.what();
  }
}
