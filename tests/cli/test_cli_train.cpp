// `hybridlm pretrain / distill / eval / compare` end to end, each command a fresh process:
// - distill for 8 steps straight == distill stopped after 4 (--stop-after-steps) + `--resume` in a new process for
//   the other 4: identical per-step losses, bitwise-identical final weights, identical test evaluation;
// - `eval --out` reproduces the run's test.json; `compare` writes the Table C.4 files (R = 1 for identical runs);
// - pretrain writes a model and checkpoints that `inspect` reads;
// - bad input exits 2 with one clear message and leaves no output behind; --help shows examples.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "support/help_examples.h"
#include "support/run_binary.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
using test::run_hybridlm;
namespace fs = std::filesystem;

namespace {

class CliTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();  // also for the child processes (environment)
    test::write_tiny_corpus(dir() / "corpus", 200);
    test::write_tiny_teacher_and_student(dir());
  }
  fs::path dir() const { return scratch.path(); }
  std::string p(const std::string& name) const { return (scratch.path() / name).string(); }
  // The small distillation of these tests: 8 steps of 4 x 64 tokens; `changes` replace or add options.
  std::string distill_args(const std::string& out,
                           const std::vector<std::pair<std::string, std::string>>& changes = {}) const {
    std::vector<std::pair<std::string, std::string>> options = {
        {"--teacher", p("teacher")}, {"--student", p("student")}, {"--data", p("corpus")},
        {"--tokenizer", "bytes"},    {"--out", p(out)},           {"--tokens", "2048"},
        {"--seq-len", "64"},         {"--batch", "4"},            {"--micro-batch", "2"},
        {"--lr-rec", "3e-3"},        {"--lr-rest", "1e-3"},       {"--min-lr", "1e-4"},
        {"--warmup-steps", "2"},     {"--held-out-docs", "20"},   {"--eval-tokens", "256"},
        {"--eval-every", "768"},     {"--log-every", "2"}};
    for (const auto& [key, value] : changes) {
      auto it = std::find_if(options.begin(), options.end(), [&](const auto& o) { return o.first == key; });
      if (it == options.end()) options.emplace_back(key, value);
      else it->second = value;
    }
    std::string args = "distill";
    for (const auto& [key, value] : options) args += " " + key + " " + value;
    return args;
  }
  test::ScratchDir scratch{"cli-train"};
};

std::vector<double> step_losses(const fs::path& run) {
  std::vector<double> out;
  for (const auto& r : test::read_metrics(run / "metrics.jsonl", "step")) out.push_back(r["loss"].get<double>());
  return out;
}

}  // namespace

TEST_F(CliTrain, ResumeInAFreshProcessIsBitIdentical) {
  const auto straight = run_hybridlm(distill_args("straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  EXPECT_NE(straight.out.find("S = 8 steps of B x n = 4 x 64"), std::string::npos) << straight.out;
  EXPECT_NE(straight.err.find("step 8/8"), std::string::npos) << straight.err;

  const auto first = run_hybridlm(distill_args("split", {{"--stop-after-steps", "4"}}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("stopped"), std::string::npos) << first.out;
  ASSERT_TRUE(fs::exists(dir() / "split" / "checkpoint-00000004" / "trainer_state.json"));

  // Changing a setting that decides the trajectory is refused, naming it; nothing is touched.
  const auto conflict = run_hybridlm("distill --resume " + p("split") + " --out " + p("split") + " --batch 8");
  EXPECT_EQ(conflict.exit_code, 2);
  EXPECT_NE(conflict.err.find("--batch: checkpoint 4, command line 8"), std::string::npos) << conflict.err;

  const auto second = run_hybridlm("distill --resume " + p("split") + " --out " + p("split") + " --log-every 1");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("resuming at step 4 of 8"), std::string::npos) << second.out;

  EXPECT_EQ(step_losses(dir() / "split"), step_losses(dir() / "straight"));
  EXPECT_EQ(step_losses(dir() / "split").size(), 8u);
  EXPECT_EQ(test::read_text(dir() / "split" / "model" / "model.safetensors"),
            test::read_text(dir() / "straight" / "model" / "model.safetensors"));
  const auto a = nlohmann::json::parse(test::read_text(dir() / "straight" / "test.json"));
  const auto b = nlohmann::json::parse(test::read_text(dir() / "split" / "test.json"));
  EXPECT_EQ(a["languages"], b["languages"]);
  const auto config = nlohmann::json::parse(test::read_text(dir() / "split" / "config.json"));
  EXPECT_EQ(config["batch_rows"], 4);
  EXPECT_EQ(config["job"], "distill");
  EXPECT_EQ(config["resume"], (dir() / "split" / "checkpoint-00000004").string());

  // eval --out reproduces test.json; compare of two identical runs gives R = 1.
  const auto eval = run_hybridlm("eval --model " + p("straight/model") + " --teacher " + p("teacher") + " --data " +
                                 p("corpus") + " --split test --seq-len 64 --held-out-docs 20 --eval-tokens 256" +
                                 " --rows 2 --out " + p("eval.json"));
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_NE(eval.out.find("rus_Cyrl"), std::string::npos) << eval.out;
  const auto e = nlohmann::json::parse(test::read_text(dir() / "eval.json"));
  ASSERT_EQ(e["languages"].size(), a["languages"].size());
  for (size_t i = 0; i < a["languages"].size(); ++i) {
    EXPECT_EQ(e["languages"][i]["code"], a["languages"][i]["code"]);
    EXPECT_NEAR(e["languages"][i]["ce"].get<double>(), a["languages"][i]["ce"].get<double>(), 1e-9);
    EXPECT_NEAR(e["languages"][i]["kl"].get<double>(), a["languages"][i]["kl"].get<double>(), 1e-9);
  }
  const auto cmp = run_hybridlm("compare " + p("split") + " " + p("eval.json") + " --baseline " + p("straight") +
                                " --exclude rus_Cyrl --out " + p("tables"));
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  EXPECT_NE(cmp.out.find("| Mean |  | R | 1.000 | 1.000 | 1.000 |"), std::string::npos) << cmp.out;
  EXPECT_NE(cmp.out.find("rus_Cyrl†"), std::string::npos) << cmp.out;
  for (const char* f : {"compare.csv", "compare.md", "compare.json"}) EXPECT_TRUE(fs::exists(dir() / "tables" / f));
  const auto refused = run_hybridlm("compare " + p("split") + " --baseline " + p("straight") + " --out " + p("tables"));
  EXPECT_EQ(refused.exit_code, 2);  // --out exists and is not empty
}

// --passes across processes: on a corpus with 20 training documents per language, 40 steps need more than one pass.
// One pass runs out (exit 0 with the data_exhausted warning); six passes train to the end, say when the second pass
// starts, and a run stopped two steps into the second pass and resumed in a new process equals the straight run.
TEST_F(CliTrain, PassesResumeInTheSecondPassInAFreshProcess) {
  test::write_tiny_corpus(dir() / "small", 60);
  const std::vector<std::pair<std::string, std::string>> small = {
      {"--data", p("small")}, {"--tokens", "10240"}, {"--eval-every", "0"}, {"--log-every", "100"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> extra) {
    extra.insert(extra.begin(), small.begin(), small.end());
    return extra;
  };
  const auto one = run_hybridlm(distill_args("one", small));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.err.find("the training data ran out after step"), std::string::npos) << one.err;
  EXPECT_NE(one.err.find("1 of --passes 1"), std::string::npos) << one.err;

  const auto straight = run_hybridlm(distill_args("straight", with({{"--passes", "6"}})));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const size_t at = straight.err.find("data: pass 2 of 6 starts at step ");
  ASSERT_NE(at, std::string::npos) << straight.err;
  const int64_t second = std::stoll(straight.err.substr(at + std::string("data: pass 2 of 6 starts at step ").size()));
  EXPECT_EQ(step_losses(dir() / "straight").size(), 40u);

  const auto first =
      run_hybridlm(distill_args("split", with({{"--passes", "6"}, {"--stop-after-steps", std::to_string(second + 2)}})));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto conflict = run_hybridlm("distill --resume " + p("split") + " --out " + p("split") + " --passes 2");
  EXPECT_EQ(conflict.exit_code, 2);
  EXPECT_NE(conflict.err.find("--passes: checkpoint 6, command line 2"), std::string::npos) << conflict.err;
  const auto rest = run_hybridlm("distill --resume " + p("split") + " --out " + p("split"));
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(step_losses(dir() / "split"), step_losses(dir() / "straight"));
  EXPECT_EQ(test::read_text(dir() / "split" / "model" / "model.safetensors"),
            test::read_text(dir() / "straight" / "model" / "model.safetensors"));
  const auto meta = nlohmann::json::parse(test::read_text(dir() / "split" / "test.json"))["meta"];
  EXPECT_EQ(meta["passes"], 6);
  EXPECT_GE(meta["passes_used"].get<int64_t>(), 2);
}

TEST_F(CliTrain, PretrainWritesWhatInspectReads) {
  const fs::path config = test::write_tiny_teacher_config(dir() / "configs");
  const auto r = run_hybridlm("pretrain --model-config " + config.string() + " --data " + p("corpus") + " --out " +
                              p("pre") + " --tokens 1024 --seq-len 64 --batch 4 --micro-batch 4 --lr 3e-3" +
                              " --held-out-docs 20 --eval-tokens 256 --checkpoint-every 2 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pretrain (cross-entropy"), std::string::npos) << r.out;
  const auto saved = nlohmann::json::parse(test::read_text(dir() / "pre" / "config.json"));
  EXPECT_EQ(saved["lr_rec"], 3e-3);  // --lr sets both groups
  EXPECT_EQ(saved["lr_rest"], 3e-3);
  EXPECT_EQ(saved["init_seed"], 3);
  for (const std::string sub : {"model", "checkpoint-00000004"}) {
    const auto inspect = run_hybridlm("inspect --json " + p("pre/" + sub));
    ASSERT_EQ(inspect.exit_code, 0) << sub << ": " << inspect.err;
    EXPECT_EQ(nlohmann::json::parse(inspect.out)["model_type"], "qwen3") << sub;
  }
  const auto valid = test::read_metrics(dir() / "pre" / "metrics.jsonl", "valid");
  ASSERT_EQ(valid.size(), 2u);  // start and end (--eval-every larger than the run)
  EXPECT_LT(valid.back()["mean"]["ce"].get<double>(), valid.front()["mean"]["ce"].get<double>());
}

TEST_F(CliTrain, BadInputExitsTwoWithoutOutput) {
  const std::string base = distill_args("out");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"distill --student " + p("student") + " --data " + p("corpus") + " --out " + p("out") + " --tokens 2048",
       "--teacher is required"},
      {distill_args("out", {{"--batch", "6"}, {"--micro-batch", "4"}}),
       "--batch 6 is not a multiple of --micro-batch 4"},
      {distill_args("out", {{"--tokens", "100"}}), "less than one step"},
      {distill_args("out", {{"--tau", "0"}}), "--tau must be positive"},
      {distill_args("out", {{"--data", p("nowhere")}}), "nowhere"},
      {distill_args("out", {{"--tokenizer", "gpt9"}}), "gpt9"},
      {distill_args("out", {{"--teacher", p("corpus")}}), "corpus"},
      {distill_args("out", {{"--resume", p("nowhere")}}), "nowhere"},
      {distill_args("out", {{"--batch", "banana"}}), "banana"},
      {distill_args("out", {{"--loss-chunking", "2048xfull"}}), "--loss-chunking 2048xfull needs --device cuda"},
      {distill_args("out", {{"--loss-chunking", "2048"}}), "expected ROWSxCOLS or ROWSxfull"},
      {"pretrain --model-config " + p("missing.json") + " --data " + p("corpus") + " --out " + p("out") +
           " --tokens 2048 --seq-len 64 --batch 4",
       "missing.json"},
      {"eval --model " + p("student") + " --data " + p("corpus") + " --split train", "train"},
      {"eval --model " + p("student") + " --data " + p("corpus") + " --split test --out " + p("no/dir/e.json"),
       "does not exist"},
      {"compare " + p("student") + " --out " + p("out"), "--baseline"},
      {"compare " + p("teacher") + " --baseline " + p("teacher") + " --out " + p("out"), "no evaluation found"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_hybridlm(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": stderr lacks '" << needle << "': " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir() / "out")) << args;
  }
  fs::create_directories(dir() / "out");
  std::ofstream(dir() / "out" / "keep.txt") << "x";
  const auto r = run_hybridlm(base);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--out exists and is not empty"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_text(dir() / "out" / "keep.txt"), "x");
}

// Each help lists an option and shows examples that the command accepts: they run here with the fixture's paths
// (and its language rus_Cyrl for the example's mnw_Mymr) substituted, plus only options that size the run to the
// fixture (held-out documents, validation tokens, one step); every option of the example is kept.
TEST_F(CliTrain, HelpExamplesAreAccepted) {
  const fs::path config = test::write_tiny_teacher_config(dir() / "configs");
  const auto examples_of = [&](const std::string& cmd, const char* option) {
    const auto help = run_hybridlm(cmd + " --help");
    EXPECT_EQ(help.exit_code, 0) << cmd;
    EXPECT_NE(help.out.find("hybridlm " + cmd), std::string::npos) << cmd << ": " << help.out;
    EXPECT_NE(help.out.find(option), std::string::npos) << cmd << ": " << help.out;
    return test::help_examples(help.out);
  };
  const auto on_fixture = [&](std::string e) {
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"runs/teacher/model", p("teacher")}, {"tiny_qwen3.json", config.string()}, {"students/rp", p("student")},
             {"corpus/", p("corpus") + "/"}, {"runs/", p("runs") + "/"}, {"valid_500.json", p("valid_500.json")},
             {"tables/", p("tables") + "/"}, {"mnw_Mymr", "rus_Cyrl"}})
      e = test::replace_all(e, from, to);
    return e;
  };
  const std::string sized = " --held-out-docs 20 --eval-tokens 256";
  const auto expect_runs = [&](const std::string& args) {
    const auto r = run_hybridlm(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    return r;
  };

  const std::vector<std::string> pretrain = examples_of("pretrain", "--model-config");
  ASSERT_FALSE(pretrain.empty());
  const auto pre = expect_runs(on_fixture(pretrain[0]) + sized + " --stop-after-steps 1");
  EXPECT_NE(pre.out.find("B x n = 16 x 256"), std::string::npos) << pre.out;  // the example's --batch and --seq-len

  const std::vector<std::string> distill = examples_of("distill", "--lr-rec");
  ASSERT_GE(distill.size(), 2u);
  ASSERT_EQ(distill[1].rfind("distill ", 0), 0u) << distill[1];
  expect_runs(on_fixture(distill[1]) + sized + " --stop-after-steps 1");
  ASSERT_TRUE(fs::exists(dir() / "runs" / "rp" / "checkpoint-00000001"));

  const std::vector<std::string> eval = examples_of("eval", "--split");
  ASSERT_GE(eval.size(), 2u);
  expect_runs(test::replace_all(on_fixture(eval[1]), "checkpoint-00000500", "checkpoint-00000001") + sized);
  EXPECT_TRUE(fs::exists(dir() / "valid_500.json"));

  // compare reads evaluations with KL: one of the distilled checkpoint against the teacher, copied, stands for both
  // runs (two files: compare keeps one column per distinct source, so one file for both would merge SP and RP).
  expect_runs("eval --model " + p("runs/rp/checkpoint-00000001") + " --teacher " + p("teacher") + " --data " +
              p("corpus") + " --split test --seq-len 64 --rows 2 --out " + p("kl.json") + sized);
  fs::copy_file(dir() / "kl.json", dir() / "kl_rp.json");
  const std::vector<std::string> compare = examples_of("compare", "--baseline");
  ASSERT_GE(compare.size(), 2u);
  std::string cmp =
      test::replace_all(test::replace_all(compare[1], "runs/sp", p("kl.json")), "runs/rp", p("kl_rp.json"));
  const auto table = expect_runs(on_fixture(cmp));
  EXPECT_NE(table.out.find("| SP | RP |"), std::string::npos) << table.out;  // the example's --labels SP,RP
  EXPECT_NE(table.out.find("rus_Cyrl†"), std::string::npos) << table.out;  // and its --exclude
}
