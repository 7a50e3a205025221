// The CUDA inference engine (infer/cuda/cuda_engine.h) against the CPU: for the four architectures (goldens qwen3
// untied, granite, olmo_hybrid_tiny, and a random qwen3_hybrid student with GQA and Hk ≠ Hv, dk ≠ dv), a prompt
// prefilled in one chunk, in chunks of 5, or token by token, then decoded token by token (teacher-forced), gives at
// every step the logits of the CPU full forward's row at that position and of the CPU engine's same step; several
// sequences of different lengths prefilled in one step and decoded together (consecutive slots: in-place state; slots
// with a hole and in reverse order: gathered state) give each one's logits alone; and greedy `hybridlm generate
// --device cuda --ids ... --json` generates the CPU's ids.
//
// Tolerance: max |gpu − cpu| over a row ≤ 2e-4 · (1 + max |cpu|). Both sides are fp32 with the same dataflow; the
// sums run in different orders (cuBLASLt vs OpenBLAS, fp32 block sums in the norms, the online softmax of the paged
// attention kernels vs the CPU's full max, the fp32 gated delta recurrence vs the CPU's double), which the CUDA model
// forward test bounds at 1e-4 of max |cpu| for a full forward (tests/cuda_models/test_cuda_model_forward.cpp); the
// engine's per-step projections over fewer rows add the CPU engine's own ~1e-6 (tests/infer/test_engine_parity.cpp),
// so 2e-4 keeps the margin, while a wrong position, head, block, state row or sequence moves logits by O(1e-2..1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "core/error.h"
#include "cuda_models/cuda_model_support.h"
#include "infer/cpu_engine.h"
#include "infer/cuda/cuda_engine.h"
#include "infer/infer_models.h"  // the CPU inference tests' student config
#include "models/cuda/cuda_model.h"
#include "models/model.h"
#include "ops/attention/attention_cache_cuda.h"

using namespace hlm;
using namespace hlm::test;

namespace {

constexpr double kRelTol = 2e-4;  // header comment

struct ModelCase {
  std::string name;
  bool golden;
};
const ModelCase kModels[] = {
    {"qwen3_untied", true}, {"granite", true}, {"olmo_hybrid_tiny", true}, {"qwen3_hybrid_student", false},
    {"olmo3_swa", true}};  // sliding windows (5) shorter than the prompts: windowed paged chunk and decode kernels

Model make_model(const ModelCase& m) {
  if (m.golden) return Model::load(cuda_golden_dir(m.name));
  return Model::create(parse_model_config(student_config_json(), "test"), 11);
}

Tensor full_logits(Model& model, const std::vector<int32_t>& ids) {
  TokenBatch b;
  b.add_sequence(ids);
  ForwardOptions o;
  o.all_logits = true;
  return model.forward(b, o);
}

MemoryPlan plan_for(const Model& model, int64_t sequences, int64_t tokens_each, int64_t block_size) {
  MemoryRequest r;
  r.max_sequences = sequences;
  r.block_size = block_size;
  r.kv_blocks = sequences * ((tokens_each + block_size - 1) / block_size);
  return memory_plan_build(model.config(), r);
}

// Prefill [0, prompt) in chunks of `chunk`, then one token at a time; every step's logits against the full forward's
// row and the CPU engine's same step. Returns the worst error against either.
double prefill_then_decode(Model& model, CudaModel& gpu_model, const std::vector<int32_t>& ids, int64_t prompt,
                           int64_t chunk, int64_t block_size) {
  const Tensor expect = full_logits(model, ids);
  const int64_t V = model.config().vocab_size, L = static_cast<int64_t>(ids.size());
  const MemoryPlan plan = plan_for(model, 1, L, block_size);
  auto gpu = make_cuda_engine(gpu_model, plan);
  auto cpu = make_cpu_engine(model, plan);
  const int gs = gpu->open_sequence(L), cs = cpu->open_sequence(L);
  EXPECT_GE(gs, 0);
  EXPECT_GE(cs, 0);
  double worst = 0.0;
  for (int64_t begin = 0; begin < L;) {
    const int64_t end = begin < prompt ? std::min(prompt, begin + chunk) : begin + 1;
    TokenBatch b;
    b.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
    const int gslot[] = {gs}, cslot[] = {cs};
    const Tensor g = gpu->step(gslot, b), c = cpu->step(cslot, b);
    EXPECT_EQ(g.shape(), Shape({1, V}));
    const double e_full = row_error(g.f32(), expect.f32() + (end - 1) * V, V);
    const double e_cpu = row_error(g.f32(), c.f32(), V);
    EXPECT_LE(e_full, kRelTol) << "step ending at " << end;
    EXPECT_LE(e_cpu, kRelTol) << "step ending at " << end;
    worst = std::max({worst, e_full, e_cpu});
    EXPECT_EQ(gpu->sequence_length(gs), end);
    begin = end;
  }
  const StateUsage gu = gpu->state_usage(), cu = cpu->state_usage();
  EXPECT_EQ(gu.bytes_in_use(), cu.bytes_in_use());
  EXPECT_EQ(gu.bytes_reserved(), cu.bytes_reserved());
  EXPECT_EQ(gu.bytes_reserved(), plan.total_bytes());
  return worst;
}

}  // namespace

TEST(CudaEngine, PrefillChunkingsAndDecodeMatchTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  for (const ModelCase& m : kModels) {
    SCOPED_TRACE(m.name);
    Model model = make_model(m);
    CudaModel gpu_model = CudaModel::upload(model, ctx);
    const std::vector<int32_t> ids = ids_for(23, model.config().vocab_size, 7);
    for (const auto& [chunk, block_size] : {std::pair<int64_t, int64_t>{17, 16}, {5, 4}, {1, 3}}) {
      const double worst = prefill_then_decode(model, gpu_model, ids, 17, chunk, block_size);
      std::printf("[engine] %s prefill chunk %lld block %lld: worst row error %.3g\n", m.name.c_str(),
                  static_cast<long long>(chunk), static_cast<long long>(block_size), worst);
    }
  }
}

// advance_uncomputed (bench_generate --search-context's last-chunk measurement), as the CPU engine's test
// (tests/infer/test_engine_parity.cpp): a sequence prefills P (11 tokens) and a chunk C and is closed; the next one
// takes the same blocks, advances 11 positions without computing them and steps C over P's K/V rows left in the pool.
// Full-attention models only (recurrent state restarts at zero), fp32 and bf16 (a bf16 KV cache; C runs the paged
// chunk kernel either way since its sequence holds positions): C's logits must equal the first sequence's bit for bit.
TEST(CudaEngine, AdvanceUncomputedRunsTheNextChunkAtTheSkippedPositions) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  for (const ModelCase& m : {kModels[0], kModels[4]}) {
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(m.name + (bf16 ? " bf16" : " fp32"));
      Model model = make_model(m);
      CudaModel gpu_model = CudaModel::upload(model, ctx);
      if (bf16) gpu_model.drop_fp32_weights();
      const int64_t V = model.config().vocab_size, n = 11;
      const std::vector<int32_t> p = ids_for(n, V, 30), chunk = ids_for(6, V, 31);
      const int64_t L = n + static_cast<int64_t>(chunk.size());
      MemoryRequest r;  // plan_for's request, with a bf16 KV cache in the bf16 mode
      r.max_sequences = 1;
      r.block_size = 4;
      r.kv_blocks = (L + 3) / 4;
      if (bf16) r.kv_element_bytes = 2;
      auto engine = make_cuda_engine(gpu_model, memory_plan_build(model.config(), r));
      int slot = engine->open_sequence(L);
      ASSERT_EQ(slot, 0);
      step_one(*engine, slot, p);
      const Tensor expect = step_one(*engine, slot, chunk);
      engine->close_sequence(slot);
      slot = engine->open_sequence(L);
      ASSERT_EQ(slot, 0);
      EXPECT_THROW(engine->advance_uncomputed(slot, L + 1, SkippedRows::kAsTheyAre), Error);
      engine->advance_uncomputed(slot, n, SkippedRows::kAsTheyAre);
      EXPECT_EQ(engine->sequence_length(slot), n);
      const Tensor got = step_one(*engine, slot, chunk);
      int64_t differing = 0;
      for (int64_t v = 0; v < V; ++v) differing += got.f32()[v] != expect.f32()[v];
      EXPECT_EQ(differing, 0) << "of " << V << " logits";
    }
  }
}

// SkippedRows::kRandom on the GPU: the same rows as the CPU engine's (skipped_row_values; fp32 caches hold them
// exactly), so the chunk stepped after the advance must match the CPU engine's logits within the engines' bound
// (kRelTol), on every model (n = 4,101 positions: two write pieces of kSkippedRowsBlock, not whole); and where the
// model has an attention layer the GPU's logits must be far nearer the CPU's over the random rows than its own over
// untouched zero rows (the rows' effect on the logits is model-dependent: 1.3e-3 on granite, whose attention is scaled
// down, session 48; an engine that wrote no rows gives the zero-row logits exactly).
TEST(CudaEngine, AdvanceUncomputedWithRandomRowsMatchesTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  for (const ModelCase& m : kModels) {
    SCOPED_TRACE(m.name);
    Model model = make_model(m);
    CudaModel gpu_model = CudaModel::upload(model, ctx);
    const int64_t V = model.config().vocab_size, n = 4101;
    const std::vector<int32_t> chunk = ids_for(5, V, 33);
    const int64_t L = n + static_cast<int64_t>(chunk.size());
    const MemoryPlan plan = plan_for(model, 1, L, 16);
    const auto run = [&](InferenceEngine& e, SkippedRows rows) {
      const int slot = e.open_sequence(L);
      e.advance_uncomputed(slot, n, rows);
      return step_one(e, slot, chunk);
    };
    auto cpu = make_cpu_engine(model, plan);
    auto gpu = make_cuda_engine(gpu_model, plan);
    auto gpu_zero = make_cuda_engine(gpu_model, plan);
    const Tensor c = run(*cpu, SkippedRows::kRandom), g = run(*gpu, SkippedRows::kRandom);
    const Tensor z = run(*gpu_zero, SkippedRows::kAsTheyAre);
    const double e = row_error(g.f32(), c.f32(), V);
    std::printf("[engine] %s after 4,101 random skipped rows: row error against the CPU %.3g\n", m.name.c_str(), e);
    EXPECT_LE(e, kRelTol);
    if (has_attention_layer(model.config())) {
      EXPECT_GT(row_error(g.f32(), z.f32(), V), 100 * std::max(e, 1e-9)) << "the rows were not written";
    }
  }
}

// The decode steps with each decode attention kernel (attention_cache_cuda_set_decode_kernel): the kernels sum in
// different orders, so each is held to the same bound against the CPU; the warp kernel writes the output rows itself
// when a step has one split (no merge launch), which these one-sequence steps exercise.
TEST(CudaEngine, EveryDecodeAttentionKernelMatchesTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  const DecodeKernel saved = attention_cache_cuda_decode_kernel();
  for (const ModelCase& m : kModels) {
    SCOPED_TRACE(m.name);
    Model model = make_model(m);
    CudaModel gpu_model = CudaModel::upload(model, ctx);
    const std::vector<int32_t> ids = ids_for(23, model.config().vocab_size, 7);
    for (const DecodeKernel kernel : {DecodeKernel::tiled, DecodeKernel::streams, DecodeKernel::warps}) {
      const char* name = kernel == DecodeKernel::warps     ? "warps"
                         : kernel == DecodeKernel::streams ? "streams"
                                                           : "tiled";
      SCOPED_TRACE(name);
      attention_cache_cuda_set_decode_kernel(kernel);
      const double worst = prefill_then_decode(model, gpu_model, ids, 17, 17, 16);
      std::printf("[engine] %s decode with the %s kernel: worst row error %.3g\n", m.name.c_str(), name, worst);
    }
  }
  attention_cache_cuda_set_decode_kernel(saved);
}

TEST(CudaEngine, BatchedDecodeOfDifferentLengths) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  for (const ModelCase& m : kModels) {
    SCOPED_TRACE(m.name);
    Model model = make_model(m);
    CudaModel gpu_model = CudaModel::upload(model, ctx);
    const int64_t V = model.config().vocab_size;
    const std::vector<int64_t> prompts{5, 11, 17};
    const int64_t decode_steps = 6;
    std::vector<std::vector<int32_t>> seqs;
    std::vector<Tensor> expect;
    for (size_t i = 0; i < prompts.size(); ++i) {
      seqs.push_back(ids_for(prompts[i] + decode_steps, V, 100 + static_cast<uint32_t>(i)));
      expect.push_back(full_logits(model, seqs.back()));
    }
    for (const bool with_hole : {false, true}) {
      SCOPED_TRACE(with_hole ? "slots with a hole, reversed order" : "consecutive slots");
      auto gpu = make_cuda_engine(gpu_model, plan_for(model, 4, 32, 4));
      std::vector<int> slots;
      if (with_hole) {
        const int hole = gpu->open_sequence(8);  // slot 0, closed again below: the sequences get 1, 2, 3
        for (size_t i = 0; i < prompts.size(); ++i) slots.push_back(gpu->open_sequence(32));
        gpu->close_sequence(hole);
        std::reverse(slots.begin(), slots.end());
      } else {
        for (size_t i = 0; i < prompts.size(); ++i) slots.push_back(gpu->open_sequence(32));
      }
      // slots[i] serves sequence order[i]
      std::vector<size_t> order(prompts.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = with_hole ? order.size() - 1 - i : i;
      // One prefill step with every prompt, then decode steps with one token each.
      double worst = 0.0;
      for (int64_t step = -1; step < decode_steps; ++step) {
        TokenBatch b;
        for (size_t i = 0; i < slots.size(); ++i) {
          const auto& s = seqs[order[i]];
          const int64_t p = prompts[order[i]];
          if (step < 0)
            b.add_sequence(std::vector<int32_t>(s.begin(), s.begin() + p));
          else
            b.add_sequence(std::vector<int32_t>{s[static_cast<size_t>(p + step)]});
        }
        const Tensor g = gpu->step(slots, b);
        ASSERT_EQ(g.shape(), Shape({static_cast<int64_t>(slots.size()), V}));
        for (size_t i = 0; i < slots.size(); ++i) {
          const int64_t pos = prompts[order[i]] + std::max<int64_t>(step, -1);  // the row of the last new token
          const double e = row_error(g.f32() + i * V, expect[order[i]].f32() + pos * V, V);
          EXPECT_LE(e, kRelTol) << "sequence " << order[i] << " step " << step;
          worst = std::max(worst, e);
        }
      }
      std::printf("[engine] %s batched decode (%s): worst row error %.3g\n", m.name.c_str(),
                  with_hole ? "gathered state" : "in-place state", worst);
    }
  }
}

TEST(CudaEngine, GenerateCliGreedyIdsEqualTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  for (const char* name : {"qwen3_untied", "olmo_hybrid_tiny"}) {
    SCOPED_TRACE(name);
    const std::string dir = cuda_golden_dir(name).string();
    const std::string args = "generate " + dir + " --ids 3,1,4,1,5,9,2,6 --max-new-tokens 12 --json";
    const RunResult cpu = run_cli(args + " --device cpu");
    const RunResult gpu = run_cli(args + " --device cuda --precision fp32");  // bf16: test_cuda_engine_bf16.cpp
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    const auto ids_of = [](const std::string& out) {
      const nlohmann::json j = nlohmann::json::parse(out);
      if (j.contains("ids")) return j["ids"];
      return j.at("results").at(0).at("ids");
    };
    const nlohmann::json cpu_ids = ids_of(cpu.out), gpu_ids = ids_of(gpu.out);
    EXPECT_EQ(cpu_ids, gpu_ids);
    EXPECT_FALSE(cpu_ids.empty());
    std::printf("[engine] generate %s: %s\n", name, gpu_ids.dump().c_str());
    EXPECT_NE(gpu.out.find("cuda:"), std::string::npos);  // the summary names the device
  }
}
