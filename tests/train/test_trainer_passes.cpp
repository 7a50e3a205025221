// Several passes over the training documents (--passes, TrainConfig::passes; the stream's side is tested in
// tests/data/test_data_stream.cpp): on a corpus too small for the planned steps,
// - passes 1 ends the run with DataExhausted, as before passes existed;
// - more passes train to the planned step, with a "pass" record when each later pass starts, the passes and the
//   per-language tokens in test.json and the end record; the steps before the second pass are those of the one-pass
//   run, bit for bit;
// - a run stopped in the second pass and resumed equals the uninterrupted run bit for bit (the checkpoint's cursor
//   holds the pass).
#include <gtest/gtest.h>

#include <algorithm>

#include "support/run_binary.h"
#include "train/checkpoint_io.h"
#include "train/test_trainer_fixture.h"
#include "train/trainer_options.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kSteps = 40;  // 10,240 tokens; one pass of the 60-document corpus holds about half

class TrainerPasses : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();
    // 60 documents per language, 20 + 20 held out: 20 training documents (~1.5-3 kB) per language.
    test::write_tiny_corpus(scratch.path() / "corpus", 60);
    model_config = test::write_tiny_teacher_config(scratch.path());
  }
  TrainConfig config(const std::string& out, int64_t passes) const {
    TrainConfig c = test::tiny_train_config(TrainJob::Pretrain, scratch.path() / "corpus", scratch.path() / out);
    c.model_config = model_config.string();
    c.tokens = kSteps * c.batch_rows * c.seq_len;
    c.eval_every_tokens = 0;
    c.passes = passes;
    return c;
  }
  nlohmann::json test_meta(const std::string& out) const {
    return nlohmann::json::parse(test::read_text(scratch.path() / out / "test.json")).at("meta");
  }
  test::ScratchDir scratch{"trainer-passes"};
  fs::path model_config;
};

}  // namespace

TEST_F(TrainerPasses, MorePassesTrainToThePlannedStep) {
  const TrainResult one = train_run(config("one", 1));
  ASSERT_EQ(one.status, TrainStatus::DataExhausted) << one.message;
  EXPECT_LT(one.step, kSteps);
  EXPECT_EQ(one.passes_used, 1);
  EXPECT_NE(one.message.find("1 of --passes 1"), std::string::npos) << one.message;
  EXPECT_TRUE(test::read_metrics(scratch.path() / "one" / "metrics.jsonl", "pass").empty());

  const TrainResult many = train_run(config("many", 6));
  ASSERT_EQ(many.status, TrainStatus::Completed) << many.message;
  EXPECT_EQ(many.step, kSteps);
  EXPECT_GE(many.passes_used, 2);
  EXPECT_LE(many.passes_used, 6);
  // One "pass" record per later pass, numbered 2, 3, ... at non-decreasing steps; pass 2 starts where passes 1 ran out.
  const std::vector<nlohmann::json> passes = test::read_metrics(scratch.path() / "many" / "metrics.jsonl", "pass");
  ASSERT_EQ(static_cast<int64_t>(passes.size()), many.passes_used - 1);
  for (size_t i = 0; i < passes.size(); ++i) {
    EXPECT_EQ(passes[i]["pass"], static_cast<int64_t>(i) + 2);
    EXPECT_EQ(passes[i]["passes"], 6);
    if (i > 0) EXPECT_GE(passes[i]["step"].get<int64_t>(), passes[i - 1]["step"].get<int64_t>());
  }
  const int64_t second = passes.front()["step"].get<int64_t>();
  EXPECT_EQ(second, one.step + 1) << "the one-pass run should run out in the step where the second pass starts";
  // Steps before the second pass see the same rows as the one-pass run: the same losses, bit for bit.
  ASSERT_GE(many.losses.size(), static_cast<size_t>(second - 1));
  for (int64_t s = 1; s < second; ++s) EXPECT_EQ(many.losses[s - 1], one.losses[s - 1]) << "step " << s;

  const nlohmann::json meta = test_meta("many");
  EXPECT_EQ(meta["passes"], 6);
  EXPECT_EQ(meta["passes_used"], many.passes_used);
  EXPECT_EQ(meta["data_exhausted"], false);
  EXPECT_EQ(meta["tokens_trained"], kSteps * 4 * 64);
  int64_t sum = 0;
  for (const auto& item : meta["tokens_by_language"].items()) sum += item.value().get<int64_t>();
  EXPECT_EQ(sum, kSteps * 4 * 64);
  EXPECT_EQ(meta["tokens_by_language"].size(), 4u);
  EXPECT_EQ(test_meta("one")["data_exhausted"], true);
  EXPECT_EQ(test_meta("one")["passes_used"], 1);
  const auto end = test::read_metrics(scratch.path() / "many" / "metrics.jsonl", "end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["passes_used"], many.passes_used);
}

TEST_F(TrainerPasses, StopInTheSecondPassAndResumeIsBitIdentical) {
  const TrainResult straight = train_run(config("straight", 6));
  ASSERT_EQ(straight.status, TrainStatus::Completed) << straight.message;
  const auto passes = test::read_metrics(scratch.path() / "straight" / "metrics.jsonl", "pass");
  ASSERT_FALSE(passes.empty());
  const int64_t stop = passes.front()["step"].get<int64_t>() + 2;  // two steps into the second pass
  ASSERT_LT(stop, kSteps);
  ASSERT_TRUE(passes.size() == 1 || passes[1]["step"].get<int64_t>() > stop) << "choose a stop inside pass 2";

  TrainConfig first = config("split", 6);
  first.stop_after_steps = stop;
  const TrainResult half = train_run(first);
  ASSERT_EQ(half.status, TrainStatus::Stopped) << half.message;
  EXPECT_EQ(checkpoint_read(half.last_checkpoint).state.cursor.at("pass"), 1);

  TrainConfig second = config("split", 6);
  second.resume = (scratch.path() / "split").string();
  const TrainResult rest = train_run(second);
  ASSERT_EQ(rest.status, TrainStatus::Completed) << rest.message;
  EXPECT_EQ(rest.passes_used, straight.passes_used);

  std::vector<double> joined = half.losses;
  joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
  EXPECT_EQ(joined, straight.losses);
  EXPECT_EQ(test::read_text(scratch.path() / "split" / "model" / "model.safetensors"),
            test::read_text(scratch.path() / "straight" / "model" / "model.safetensors"));
  EXPECT_EQ(rest.test->mean_ce, straight.test->mean_ce);
  EXPECT_EQ(test_meta("split")["tokens_by_language"], test_meta("straight")["tokens_by_language"]);
  // The metrics of the resumed run hold the same pass records (the first from before the stop).
  EXPECT_EQ(test::read_metrics(scratch.path() / "split" / "metrics.jsonl", "pass"), passes);

  // --passes decides the trajectory: a resume with another value is refused.
  TrainConfig other = config("split", 3);
  other.resume = (scratch.path() / "split").string();  // its newest checkpoint (the stop's was replaced)
  try {
    train_run(other);
    ADD_FAILURE() << "a resume with another --passes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("passes: 6 vs 3"), std::string::npos) << e.what();
  }
  const std::vector<std::string> diff = train_config_fixed_differences(config("a", 6), config("a", 3));
  ASSERT_EQ(diff.size(), 1u);
  EXPECT_EQ(diff[0], "passes: 6 vs 3");
}

TEST(TrainerPassesOption, InTheTableForBothJobsAndChecked) {
  const auto options = train_options();
  const auto it = std::find_if(options.begin(), options.end(),
                               [](const TrainOption& o) { return std::string(o.key) == "passes"; });
  ASSERT_NE(it, options.end());
  EXPECT_STREQ(it->option, "--passes");
  EXPECT_EQ(it->jobs, kTrainJobBoth);
  EXPECT_TRUE(it->fixed);
  TrainConfig c = train_config_defaults(TrainJob::Distill);
  EXPECT_EQ(c.passes, 1);
  nlohmann::json j = train_config_to_json(c);
  EXPECT_EQ(j["passes"], 1);
  j["passes"] = 4;
  EXPECT_EQ(train_config_from_json(j, "test").passes, 4);
  c.out = "o";
  c.data = "d";
  c.teacher = c.student = "m";
  c.tokens = 1 << 20;
  c.passes = 0;
  try {
    train_config_validate(c);
    ADD_FAILURE() << "passes 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--passes"), std::string::npos) << e.what();
  }
}
