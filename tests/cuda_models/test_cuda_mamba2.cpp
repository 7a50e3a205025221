// Granite-4.0-H (granitemoehybrid: Mamba-2 mixers, NoPE attention, shared MLP, optional routed experts) on CUDA
// (layers/cuda/mamba2_layer_cuda.h) against the CPU: the HF goldens granitemoehybrid_tiny (layers M A M M A, nh 8,
// P 16, N 12, G 2, chunk 8) and granitemoehybrid_moe_tiny (M M A M, 6 experts top-2 + shared MLP). Every capture point
// and the logits of the model forward (three sequences of 7, 13, 5 tokens: chunks of 8 cut the 13); a long sequence
// of 70 tokens (nine chunks); the bf16 compute mode; the CUDA engine's prefill chunks and decode steps (two sequences
// in non-consecutive slots, so the states are gathered and scattered; decode steps captured as CUDA graphs) against
// the CPU engine; `generate --device cuda` greedy ids against `--device cpu`; training refused.
//
// Bounds, as the other CUDA model tests (test_cuda_moe.cpp, test_cuda_model_forward.cpp): fp32 — max |gpu − cpu| /
// max |cpu| ≤ 1e-4 per tensor (the CPU sums the scan in double and the GEMMs in OpenBLAS order; the CUDA scan's fp32
// chains are ~1e-6 relative at these sizes, tests/cuda/cases_mamba2_ssd.cpp; a wrong state hand-over or group is
// O(1e-2) or more, see docs/families.md); bf16 compute mode — ≤ 4e-2 on the logits and ≥ 1e-5 (the mode engaged);
// engine — 2e-4 · (1 + max |cpu row|) per row (test_cuda_engine.cpp's bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

void expect_forward_match(Model& cpu_model, const TokenBatch& batch, const std::string& label, bool check_bf16) {
  expect_cuda_forward_match(cpu_model, batch, "mamba2", label, check_bf16);
}

// Two sequences (lengths 21 and 17) teacher-forced through both engines: prefill chunks of 5 and 8 tokens, then one
// token per step, both sequences in every step, in slots 2 and 0 of three (not consecutive: gathered states).
void expect_engine_match(const std::string& golden) {
  CudaContext ctx;
  Model model = Model::load(cuda_golden_dir(golden));
  CudaModel gpu_model = CudaModel::upload(model, ctx);
  const int64_t V = model.config().vocab_size;
  const std::vector<std::vector<int32_t>> seqs = {ids_for(21, V, 7), ids_for(17, V, 8)};
  MemoryRequest r;
  r.max_sequences = 3;
  r.block_size = 4;
  r.kv_blocks = 18;  // three slots reserving 24 tokens each: 6 blocks of 4 apiece
  const MemoryPlan plan = memory_plan_build(model.config(), r);
  auto gpu = make_cuda_engine(gpu_model, plan);
  auto cpu = make_cpu_engine(model, plan);
  std::vector<int> gslots, cslots;
  for (int i = 0; i < 3; ++i) {
    gslots.push_back(gpu->open_sequence(24));
    cslots.push_back(cpu->open_sequence(24));
  }
  const int gs[] = {gslots[2], gslots[0]}, cs[] = {cslots[2], cslots[0]};
  std::vector<int64_t> pos(2, 0);
  double worst_prefill = 0.0, worst_decode = 0.0;
  int steps = 0;
  while (pos[0] < 17) {  // both sequences still have tokens
    const int64_t n = pos[0] < 5 ? 5 : pos[0] < 13 ? 8 : 1;
    TokenBatch b;
    for (size_t s = 0; s < 2; ++s)
      b.add_sequence(std::vector<int32_t>(seqs[s].begin() + pos[s], seqs[s].begin() + pos[s] + n));
    const Tensor g = gpu->step(gs, b), c = cpu->step(cs, b);
    for (int64_t s = 0; s < 2; ++s) {
      const double e = row_error(g.f32() + s * V, c.f32() + s * V, V);
      EXPECT_LE(e, kEngineTol) << golden << " step " << steps << " sequence " << s;
      (n > 1 ? worst_prefill : worst_decode) = std::max(n > 1 ? worst_prefill : worst_decode, e);
    }
    for (int64_t& p : pos) p += n;
    ++steps;
  }
  const CudaEngineGraphStats st = cuda_engine_graph_stats(*gpu);
  std::printf("[engine] %s: prefill chunks 5 + 8, then %d decode steps, 2 sequences in slots 2, 0: worst row error "
              "vs the CPU engine prefill %.3g, decode %.3g (bound %.0e); graphs captured %lld, replays %lld\n",
              golden.c_str(), steps - 2, worst_prefill, worst_decode, kEngineTol,
              static_cast<long long>(st.captures), static_cast<long long>(st.replays));
  EXPECT_GT(st.replays, 0) << "no decode step ran as a CUDA graph";
}

void expect_generate_match(const std::string& golden) {
  const std::string args = "generate " + cuda_golden_dir(golden).string() +
                           " --ids 5,17,200,3,44,9,8 --max-new-tokens 12 --prefill-chunk 3 --json";
  const RunResult cpu = run_cli(args + " --device cpu");
  const RunResult gpu = run_cli(args + " --device cuda --precision fp32");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const auto ids_of = [](const std::string& out) {
    const nlohmann::json j = nlohmann::json::parse(out);
    if (j.contains("ids")) return j["ids"];
    return j.at("results").at(0).at("ids");
  };
  EXPECT_EQ(ids_of(cpu.out), ids_of(gpu.out)) << golden;
  std::printf("[engine] generate %s --device cuda --precision fp32: %s (cpu %s)\n", golden.c_str(),
              ids_of(gpu.out).dump().c_str(), ids_of(cpu.out).dump().c_str());
  const RunResult bf16 = run_cli(args + " --device cuda --precision bf16");
  EXPECT_EQ(bf16.exit_code, 0) << bf16.err;
  if (bf16.exit_code == 0)
    std::printf("[engine] generate %s --device cuda --precision bf16: %s\n", golden.c_str(),
                ids_of(bf16.out).dump().c_str());
}

}  // namespace

TEST(CudaMamba2, GoldenDenseForwardMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("granitemoehybrid_tiny"));
  expect_forward_match(m, odd_length_batch(m.config().vocab_size), "granitemoehybrid_tiny", /*check_bf16=*/true);
}

TEST(CudaMamba2, GoldenMoeForwardMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("granitemoehybrid_moe_tiny"));
  // No bf16 check here: this golden's router has a near tie (2nd vs 3rd expert within 1.1e-5 in its last layer,
  // docs/families.md), so the bf16 mode's rounding of the routed input can move a token to another expert: the H200
  // run of 2026-12-02 gave 0.0459 vs fp32 on the logits (the dense golden: 0.0067). The bf16 path of the Mamba-2
  // layers is checked on the dense golden, and the experts' own bf16 path in test_cuda_moe.cpp.
  expect_forward_match(m, odd_length_batch(m.config().vocab_size), "granitemoehybrid_moe_tiny", /*check_bf16=*/false);
}

TEST(CudaMamba2, LongSequenceAcrossManyChunksMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("granitemoehybrid_tiny"));
  TokenBatch b;
  b.add_sequence(ids_for(70, m.config().vocab_size, 3));
  b.add_sequence(ids_for(1, m.config().vocab_size, 4));  // a one-token sequence beside it
  expect_forward_match(m, b, "granitemoehybrid_tiny 70 + 1 tokens", /*check_bf16=*/false);
}

TEST(CudaMamba2, EnginePrefillAndDecodeMatchTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_engine_match("granitemoehybrid_tiny");
  expect_engine_match("granitemoehybrid_moe_tiny");
}

TEST(CudaMamba2, GenerateCliGreedyIdsEqualTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_generate_match("granitemoehybrid_tiny");
  expect_generate_match("granitemoehybrid_moe_tiny");
}

TEST(CudaMamba2, TrainingIsRefusedClearly) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("granitemoehybrid_tiny"));
  CudaModel gpu = CudaModel::upload(m, cuda_context());
  try {
    gpu.forward_train(odd_length_batch(m.config().vocab_size));
    ADD_FAILURE() << "forward_train ran a Mamba-2 model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Mamba-2"), std::string::npos) << e.what();
  }
}
