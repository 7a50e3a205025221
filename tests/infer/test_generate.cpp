// The generation loop (infer/generate.h) on the CPU engine: greedy ids are the full forward's argmax at every step;
// a batch of requests of different lengths (and sampling settings) gives each request the ids it gets alone, also when
// the plan runs them one at a time; EOS, stop callbacks, max_new_tokens and max positions end a request with the
// right reason; bad requests are refused with a message while the others run.
#include <gtest/gtest.h>

#include "infer/cpu_engine.h"
#include "infer/generate.h"
#include "infer_models.h"

using namespace hlm;
using namespace hlm::test;

namespace {

MemoryPlan plan_for(const Model& model, const std::vector<GenerateRequest>& requests, int64_t max_sequences,
                    int64_t block_size = 8) {
  MemoryRequest r;
  r.max_sequences = max_sequences;
  r.block_size = block_size;
  const MemoryPlan shape = memory_plan_shape(model.config(), block_size);
  r.kv_blocks = 0;
  for (const GenerateRequest& q : requests) r.kv_blocks += shape.blocks_for(generate_max_tokens(model.config(), q));
  return memory_plan_build(model.config(), r);
}

std::vector<GenerateResult> run(Model& model, const std::vector<GenerateRequest>& requests, int64_t max_sequences,
                                GenerateOptions options = {}) {
  auto engine = make_cpu_engine(model, plan_for(model, requests, max_sequences));
  return generate(*engine, requests, options);
}

GenerateRequest request(std::vector<int32_t> prompt, int64_t new_tokens, double temperature = 0.0) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = new_tokens;
  r.sampling.temperature = temperature;
  r.sampling.top_p = temperature > 0 ? 0.9 : 1.0;
  r.sampling.seed = 3;
  return r;
}

class GenerateArch : public ::testing::TestWithParam<InferModelCase> {};

}  // namespace

TEST_P(GenerateArch, GreedyIsTheFullForwardsArgmax) {
  Model model = GetParam().make();
  const int64_t V = model.config().vocab_size;
  const GenerateRequest r = request(random_ids(7, V, 30), 12);
  const std::vector<GenerateResult> out = run(model, {r}, 1);
  ASSERT_EQ(out[0].ids.size(), 12u);
  EXPECT_EQ(out[0].finish, FinishReason::Length);
  std::vector<int32_t> seq = r.prompt;
  for (const int32_t id : out[0].ids) {
    TokenBatch b;
    b.add_sequence(seq);
    const Tensor logits = model.forward(b);  // last token's logits
    const float* row = logits.f32();
    float best = row[0], scale = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
      best = std::max(best, row[v]);
      scale = std::max(scale, std::abs(row[v]));
    }
    // The chosen id is an argmax of the full forward up to the engine-vs-forward tolerance (test_engine_parity.cpp).
    EXPECT_GE(row[id], best - 2e-4f * (1.0f + scale)) << "step " << seq.size() - r.prompt.size();
    seq.push_back(id);
  }
}

TEST_P(GenerateArch, BatchEqualsEachAloneWhateverTheSlotsAndPrefillChunk) {
  Model model = GetParam().make();
  const int64_t V = model.config().vocab_size;
  const std::vector<GenerateRequest> requests{request(random_ids(5, V, 31), 9),
                                              request(random_ids(13, V, 32), 4, 0.8),
                                              request(random_ids(2, V, 33), 11, 1.2), request(random_ids(9, V, 34), 6)};
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < requests.size(); ++i) {
    // Alone, the request must keep its index as the sampling stream: pad with empty-budget requests before it.
    std::vector<GenerateRequest> one(i + 1, request({1}, 0));
    one[i] = requests[i];
    alone.push_back(run(model, one, 1)[i].ids);
  }
  for (const int64_t slots : {4, 2, 1})
    for (const int64_t chunk : {512, 5}) {  // 5: prompts share prefill steps and span several
      GenerateOptions options;
      options.prefill_chunk = chunk;
      const std::vector<GenerateResult> together = run(model, requests, slots, options);
      for (size_t i = 0; i < requests.size(); ++i)
        EXPECT_EQ(together[i].ids, alone[i]) << "request " << i << " with " << slots << " slots, chunk " << chunk;
    }
}

INSTANTIATE_TEST_SUITE_P(Architectures, GenerateArch, ::testing::ValuesIn(infer_model_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Generate, StopsAtEosAndAtTheCallback) {
  Model model = load_golden_model("olmo_hybrid_tiny");
  const GenerateRequest r = request(random_ids(6, model.config().vocab_size, 40), 10);
  const std::vector<int32_t> free_run = run(model, {r}, 1)[0].ids;
  ASSERT_EQ(free_run.size(), 10u);
  // EOS = the 4th generated id (first occurrence): the request ends there, EOS included in the ids.
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  GenerateOptions eos;
  eos.eos_ids = {free_run[3]};
  const GenerateResult e = run(model, {r}, 1, eos)[0];
  EXPECT_EQ(e.finish, FinishReason::Eos);
  EXPECT_EQ(e.ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  GenerateOptions stop;
  int calls = 0;
  stop.on_token = [&](size_t, int32_t) { return ++calls < 5; };
  const GenerateResult s = run(model, {r}, 1, stop)[0];
  EXPECT_EQ(s.finish, FinishReason::Stop);
  EXPECT_EQ(s.ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + 5));
  EXPECT_TRUE(run(model, {request(r.prompt, 0)}, 1)[0].ids.empty());
}

TEST(Generate, MaxPositionsEndsOrRefuses) {
  Model model = load_golden_model("qwen3_yarn");  // max_position_embeddings 64
  ASSERT_EQ(model.config().max_position_embeddings, 64);
  const int64_t V = model.config().vocab_size;
  const std::vector<GenerateResult> out =
      run(model, {request(random_ids(60, V, 41), 10), request(random_ids(64, V, 42), 3),
                  request(random_ids(65, V, 43), 3)}, 3);
  EXPECT_EQ(out[0].finish, FinishReason::MaxPositions);
  EXPECT_EQ(out[0].ids.size(), 5u);  // fed positions 60..63, the 5th token is never fed
  EXPECT_EQ(out[1].finish, FinishReason::MaxPositions);
  EXPECT_EQ(out[1].ids.size(), 1u);
  EXPECT_EQ(out[2].finish, FinishReason::Refused);
  EXPECT_NE(out[2].error.find("max_position_embeddings"), std::string::npos) << out[2].error;
}

TEST(Generate, BadRequestsAreRefusedOthersRun) {
  Model model = load_golden_model("olmo_hybrid_tiny");
  const int64_t V = model.config().vocab_size;
  const GenerateRequest good = request(random_ids(5, V, 44), 4);
  std::vector<GenerateRequest> requests{request({}, 4), good, request({1, static_cast<int32_t>(V), 2}, 4),
                                        request({-1, 3}, 4)};
  auto engine = make_cpu_engine(model, plan_for(model, {good}, 1));
  // A request whose worst case exceeds the whole plan: refused, never started.
  requests.push_back(request(random_ids(5, V, 45), engine->plan().num_blocks * engine->plan().block_size + 1));
  const std::vector<GenerateResult> out = generate(*engine, requests, {});
  const char* expect[] = {"empty", nullptr, "outside the vocabulary", "outside the vocabulary", "memory plan"};
  for (size_t i = 0; i < requests.size(); ++i) {
    if (expect[i] == nullptr) {
      EXPECT_EQ(out[i].finish, FinishReason::Length);
      EXPECT_EQ(out[i].ids.size(), 4u);
      continue;
    }
    EXPECT_EQ(out[i].finish, FinishReason::Refused) << i;
    EXPECT_TRUE(out[i].ids.empty()) << i;
    EXPECT_NE(out[i].error.find(expect[i]), std::string::npos) << i << ": " << out[i].error;
  }
  EXPECT_EQ(engine->state_usage().running_sequences, 0);
}
