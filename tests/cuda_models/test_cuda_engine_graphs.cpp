// CUDA graphs: the allocator's private pools (backend/cuda/cuda_allocator.h), the inference engine's decode graphs
// (infer/cuda/cuda_engine.h) against its eager decode, and the synth GPU path's padded steps against unpadded ones.
//
// 1. Pools: a block freed while its pool exists is never handed to a general allocation; a general block freed during
//    a pool's activity joins the pool; release_pool gives the pool's blocks back.
// 2. Decode graphs: two engines over the same CudaModel, one with graphs and one without, run the same greedy
//    generation (each feeds back its own argmax) for three sequences of different lengths: a prefill step, decode
//    steps across a 256-token context bucket (goldens: prompts of 240-250 tokens), one sequence closed half-way (the
//    batch shrinks: a new shape), and slots that are not consecutive. The logits of every step must be bit-identical
//    (the same kernels with the same arguments run in the same order; a replay only skips the host), hence the ids;
//    fp32 and bf16; and the graph engine must really have replayed graphs.
// 3. Synth padding (`hybridlm synth --bucket-tokens`): 5 GPU training steps of a small hybrid on the state-based
//    recall task with and without padding to 128 tokens. The pad sequences carry no target, so only summation order
//    changes (cuBLASLt may pick another algorithm for another row count, and weight gradients sum over more, all-zero,
//    rows). Bounds: step 1 (same weights) 1e-5 relative — one fp32 step's summation-order noise is ~3e-7
//    (test_cuda_train_step.cpp); steps 2-5 1e-3 relative — AdamW's first steps move near-zero-gradient weights by ±lr
//    whichever side of zero the noise puts them (test_cuda_train_step.cpp measured ~2e-3 loss drift after 20 steps
//    between CPU and GPU), while a pad token leaking into the loss or attention changes the loss by O(1e-2) or more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cli/train_device_cli.h"
#include "cuda_models/cuda_model_support.h"
#include "evals/synth/synth_train.h"
#include "infer/cuda/cuda_engine.h"
#include "infer/infer_models.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"

using namespace hlm;
using namespace hlm::test;

namespace {

TEST(CudaAllocatorPools, PoolBlocksStayPrivateUntilReleased) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaAllocator a;
  const uint64_t pool = a.create_pool();
  void* general = a.allocate(4096);
  a.begin_pool(pool);
  void* p1 = a.allocate(4096);  // a new block of the pool (the general free list is empty anyway)
  a.deallocate(general);        // freed during the pool's activity: adopted by the pool
  a.end_pool();
  EXPECT_NE(p1, general);
  a.deallocate(p1);  // back to the pool
  void* g2 = a.allocate(4096);
  EXPECT_NE(g2, p1);
  EXPECT_NE(g2, general);
  EXPECT_GE(a.pool_bytes(pool), 2 * CudaAllocator::size_class(4096));
  a.begin_pool(pool);  // the pool hands its own idle blocks out again
  void* p2 = a.allocate(4096);
  a.end_pool();
  EXPECT_TRUE(p2 == p1 || p2 == general);
  a.deallocate(p2);
  a.release_pool(pool);
  EXPECT_EQ(a.pool_bytes(pool), 0u);
  void* g3 = a.allocate(4096);  // now from the general lists
  EXPECT_TRUE(g3 == p1 || g3 == general);
  a.deallocate(g3);
  a.deallocate(g2);
}

MemoryPlan plan_for(const Model& model, int64_t sequences, int64_t tokens_each, int64_t kv_element_bytes) {
  MemoryRequest r;
  r.max_sequences = sequences;
  r.block_size = 16;
  r.kv_element_bytes = kv_element_bytes;
  r.kv_blocks = sequences * ((tokens_each + r.block_size - 1) / r.block_size);
  return memory_plan_build(model.config(), r);
}

int32_t argmax(const float* row, int64_t V) { return static_cast<int32_t>(std::max_element(row, row + V) - row); }

// Greedy generation of `steps` tokens for three prompts on one engine; returns every step's logits, concatenated.
// Slots: with `hole`, slot 0 is opened and closed first and the sequences run in reverse slot order (gathered state).
// Sequence 1 is closed after half the steps.
std::vector<float> run_greedy(InferenceEngine& e, const std::vector<std::vector<int32_t>>& prompts, int64_t steps,
                              bool hole, std::vector<std::vector<int32_t>>& generated) {
  const int64_t V = e.config().vocab_size;
  std::vector<int> slots;
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  const int first = hole ? e.open_sequence(8) : -1;
  for (size_t i = 0; i < prompts.size(); ++i) slots.push_back(e.open_sequence(longest + steps));
  if (hole) {
    e.close_sequence(first);
    std::reverse(slots.begin(), slots.end());
  }
  std::vector<size_t> who(prompts.size());  // sequence served by slots[i]
  for (size_t i = 0; i < who.size(); ++i) who[i] = hole ? who.size() - 1 - i : i;
  std::vector<float> all;
  generated.assign(prompts.size(), {});
  std::vector<int32_t> next(prompts.size());
  for (int64_t step = -1; step < steps; ++step) {
    if (step == steps / 2) {  // sequence 1 stops: the batch shrinks
      const auto it = std::find(who.begin(), who.end(), size_t{1});
      const size_t i = static_cast<size_t>(it - who.begin());
      e.close_sequence(slots[i]);
      slots.erase(slots.begin() + static_cast<std::ptrdiff_t>(i));
      who.erase(it);
    }
    TokenBatch b;
    for (size_t i = 0; i < slots.size(); ++i)
      b.add_sequence(step < 0 ? prompts[who[i]] : std::vector<int32_t>{next[who[i]]});
    const Tensor logits = e.step(slots, b);
    all.insert(all.end(), logits.f32(), logits.f32() + logits.numel());
    for (size_t i = 0; i < slots.size(); ++i) {
      next[who[i]] = argmax(logits.f32() + static_cast<int64_t>(i) * V, V);
      generated[who[i]].push_back(next[who[i]]);
    }
  }
  return all;
}

TEST(CudaEngineGraphs, GraphDecodeEqualsEagerBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  struct Case {
    const char* name;
    bool golden;
    int64_t prompt0;  // prompts prompt0, prompt0 − 7, prompt0 + 3 tokens
  };
  for (const Case& m : {Case{"qwen3_untied", true, 243}, Case{"olmo_hybrid_tiny", true, 243},
                        Case{"qwen3_hybrid_student", false, 20}}) {
    Model model = m.golden ? Model::load(cuda_golden_dir(m.name))
                           : Model::create(parse_model_config(student_config_json(), "test"), 11);
    const int64_t V = model.config().vocab_size, steps = 14;
    std::vector<std::vector<int32_t>> prompts;
    for (const int64_t len : {m.prompt0, m.prompt0 - 7, m.prompt0 + 3})
      prompts.push_back(ids_for(len, V, 40 + static_cast<uint32_t>(len)));
    for (const bool bf16 : {false, true}) {
      CudaModel gpu = CudaModel::upload(model, ctx);
      if (bf16) gpu.drop_fp32_weights();
      for (const bool hole : {false, true}) {
        SCOPED_TRACE(testing::Message() << m.name << (bf16 ? " bf16" : " fp32") << (hole ? " gathered" : " in place"));
        const MemoryPlan plan = plan_for(model, 4, m.prompt0 + 3 + steps, bf16 ? 2 : 4);
        CudaEngineOptions on, off;
        off.cuda_graphs = false;
        auto eg = make_cuda_engine(gpu, plan, on);
        auto ee = make_cuda_engine(gpu, plan, off);
        std::vector<std::vector<int32_t>> ids_g, ids_e;
        const std::vector<float> lg = run_greedy(*eg, prompts, steps, hole, ids_g);
        const std::vector<float> le = run_greedy(*ee, prompts, steps, hole, ids_e);
        ASSERT_EQ(lg.size(), le.size());
        EXPECT_EQ(std::memcmp(lg.data(), le.data(), lg.size() * sizeof(float)), 0) << "logits differ";
        EXPECT_EQ(ids_g, ids_e);
        const CudaEngineGraphStats st = cuda_engine_graph_stats(*eg), se = cuda_engine_graph_stats(*ee);
        std::printf("[graphs] %s %s %s: %lld captures, %lld replays, %lld failures, %lld eager decode steps\n", m.name,
                    bf16 ? "bf16" : "fp32", hole ? "gathered" : "in place", static_cast<long long>(st.captures),
                    static_cast<long long>(st.replays), static_cast<long long>(st.failures),
                    static_cast<long long>(st.eager_decode_steps));
        EXPECT_EQ(st.failures, 0);
        EXPECT_GE(st.captures, 2);  // the 3-sequence and the 2-sequence shapes at least
        EXPECT_GE(st.replays, steps / 2);
        EXPECT_EQ(se.replays + se.captures, 0);
      }
    }
  }
}

// A TrainDevice that records the loss of every step of the device it wraps.
class RecordingDevice final : public TrainDevice {
 public:
  RecordingDevice(std::unique_ptr<TrainDevice> inner, std::vector<double>* losses)
      : inner_(std::move(inner)), losses_(losses) {}
  std::string describe() const override { return inner_->describe(); }
  void attach(Model& student, Model* teacher, AdamW& optimizer) override { inner_->attach(student, teacher, optimizer); }
  BatchLoss step(const PackedBatch& batch, int64_t micro_rows, double tau, double clip, double* grad_norm,
                 size_t num_languages) override {
    BatchLoss loss = inner_->step(batch, micro_rows, tau, clip, grad_norm, num_languages);
    losses_->push_back(loss.loss);
    return loss;
  }
  void evaluate_pass(const PackedBatch& batch, EvalSums& sums) override { inner_->evaluate_pass(batch, sums); }
  void sync_to_host() override { inner_->sync_to_host(); }

 private:
  std::unique_ptr<TrainDevice> inner_;
  std::vector<double>* losses_;
};

TEST(SynthPadding, PaddedGpuStepsMatchUnpaddedOnes) {
  HLM_REQUIRE_CUDA_MODEL();
  SynthConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_heads = 2;
  c.head_dim = 32;
  c.gdn_value_head_dim = 32;
  c.max_address = 64;
  c.train_min = 2;
  c.train_max = 16;
  c.steps = 5;
  c.batch_size = 16;
  c.log_every = 1;
  c.eval_items = 8;
  c.eval_batch = 8;
  c.eval_difficulties = {4};
  std::vector<double> runs[2];
  for (int padded = 0; padded < 2; ++padded) {
    SynthDevice device;
    device.name = "cuda";
    device.bucket_tokens = padded ? 128 : 0;
    std::vector<double>* out = &runs[padded];
    device.make_trainer = [out]() -> std::unique_ptr<TrainDevice> {
      return std::make_unique<RecordingDevice>(train_device_for("cuda", "fp32"), out);
    };
    synth_train_and_eval(c, SynthTask::StateBasedRecall, SynthArch::HybridNeg, [](const std::string&) {}, device);
  }
  ASSERT_EQ(runs[0].size(), 5u);
  ASSERT_EQ(runs[1].size(), 5u);
  for (size_t s = 0; s < 5; ++s) {
    const double rel = std::abs(runs[1][s] - runs[0][s]) / (1.0 + std::abs(runs[0][s]));
    std::printf("[synth pad] step %zu: loss %.9g unpadded, %.9g padded, relative difference %.3g\n", s + 1,
                runs[0][s], runs[1][s], rel);
    EXPECT_LE(rel, s == 0 ? 1e-5 : 1e-3) << "step " << s + 1;
  }
}

}  // namespace
