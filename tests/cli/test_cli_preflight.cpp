// Issue #27 through the command line, each command a fresh process: the checks before the first step exit 2 with
// one message naming the option or file and write nothing (pretrain, distill and eval on the alternating long/short
// corpus; a teacher with another vocabulary; an --out under a regular file; non-finite weights, and the global
// --allow-nonfinite-weights); a final evaluation that fails (HYBRIDLM_FAULT) exits 1 with the model in place, and the
// `hybridlm eval ...` command it prints evaluates that model to the same numbers as an unfailed run's test.json.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "support/run_binary.h"
#include "train/alternating_corpus.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
using test::run_hybridlm;
namespace fs = std::filesystem;

namespace {

class CliPreflight : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();
    test::write_alternating_corpus(dir() / "alternating", Split::Test);
    test::write_tiny_corpus(dir() / "corpus", 60);
    test::write_tiny_teacher_and_student(dir());
    config_ = test::write_tiny_teacher_config(dir() / "configs").string();
  }
  fs::path dir() const { return scratch.path(); }
  std::string p(const std::string& name) const { return (scratch.path() / name).string(); }
  std::string config_;
  test::ScratchDir scratch{"cli-preflight"};
};

// The issue's settings on the alternating corpus.
const std::string kIssueFlags =
    " --held-out-docs 1 --eval-tokens 512 --seq-len 512 --checkpoint-every 0 --tokens 4096 --batch 2 --micro-batch 1";
const std::string kEmptyTest = "the test split of eng_Latn has no full row of --seq-len 512 tokens to evaluate";

}  // namespace

TEST_F(CliPreflight, AlternatingCorpusIsRefusedBeforeStepOneByPretrainDistillAndEval) {
  const auto pre = run_hybridlm("pretrain --model-config " + config_ + " --data " + p("alternating") + " --out " +
                                p("pre") + kIssueFlags);
  EXPECT_EQ(pre.exit_code, 2) << pre.err;
  EXPECT_NE(pre.err.find(kEmptyTest), std::string::npos) << pre.err;
  EXPECT_EQ(pre.err.find("step 1/"), std::string::npos) << pre.err;  // no step ran
  EXPECT_FALSE(fs::exists(dir() / "pre"));

  const auto dis = run_hybridlm("distill --teacher " + p("teacher") + " --student " + p("student") + " --data " +
                                p("alternating") + " --out " + p("dis") + kIssueFlags);
  EXPECT_EQ(dis.exit_code, 2) << dis.err;
  EXPECT_NE(dis.err.find(kEmptyTest), std::string::npos) << dis.err;
  EXPECT_FALSE(fs::exists(dir() / "dis"));

  const auto ev = run_hybridlm("eval --model " + p("teacher") + " --data " + p("alternating") +
                               " --split test --held-out-docs 1 --eval-tokens 512 --seq-len 512 --out " +
                               p("eval.json"));
  EXPECT_EQ(ev.exit_code, 2) << ev.err;
  EXPECT_NE(ev.err.find(kEmptyTest), std::string::npos) << ev.err;
  EXPECT_FALSE(fs::exists(dir() / "eval.json"));
  // The validation split of the same corpus is fine: eval runs.
  const auto valid = run_hybridlm("eval --model " + p("teacher") + " --data " + p("alternating") +
                                  " --split valid --held-out-docs 1 --eval-tokens 512 --seq-len 512");
  EXPECT_EQ(valid.exit_code, 0) << valid.err;
}

TEST_F(CliPreflight, OtherChecksExitTwoAndWriteNothing) {
  // A teacher with another vocabulary (distill and eval).
  std::string config = test::tiny_teacher_config_json();
  config.replace(config.find("\"vocab_size\": 256"), 17, "\"vocab_size\": 300");
  fs::create_directories(dir() / "big");
  std::ofstream(dir() / "big" / "config.json") << config;
  Model::create(load_model_config(dir() / "big" / "config.json"), 3).save(dir() / "big_teacher");
  const std::string common = " --data " + p("corpus") + " --tokens 1024 --seq-len 64 --batch 4 --micro-batch 2" +
                             " --held-out-docs 4 --eval-tokens 128";
  const auto dis = run_hybridlm("distill --teacher " + p("big_teacher") + " --student " + p("student") + " --out " +
                                p("dis") + common);
  EXPECT_EQ(dis.exit_code, 2) << dis.err;
  EXPECT_NE(dis.err.find("--teacher " + p("big_teacher") + ": its vocabulary (300) differs"), std::string::npos)
      << dis.err;
  EXPECT_FALSE(fs::exists(dir() / "dis"));
  const auto ev = run_hybridlm("eval --model " + p("student") + " --teacher " + p("big_teacher") + " --data " +
                               p("corpus") + " --split test --seq-len 64 --held-out-docs 4 --eval-tokens 128");
  EXPECT_EQ(ev.exit_code, 2) << ev.err;
  EXPECT_NE(ev.err.find("its vocabulary (300) differs from the model's (256)"), std::string::npos) << ev.err;

  // A model whose vocabulary is smaller than the tokenizer's (eval; the trainer: TrainerPreflight).
  config.replace(config.find("\"vocab_size\": 300"), 17, "\"vocab_size\": 100");
  fs::create_directories(dir() / "small");
  std::ofstream(dir() / "small" / "config.json") << config;
  Model::create(load_model_config(dir() / "small" / "config.json"), 3).save(dir() / "small_model");
  const auto small = run_hybridlm("eval --model " + p("small_model") + " --data " + p("corpus") +
                                  " --split test --seq-len 64 --held-out-docs 4 --eval-tokens 128");
  EXPECT_EQ(small.exit_code, 2) << small.err;
  EXPECT_NE(small.err.find("tokenizer bytes has 256 tokens but the model's vocabulary is 100"), std::string::npos)
      << small.err;

  // An --out that cannot be created.
  std::ofstream(dir() / "a_file") << "x";
  const auto out = run_hybridlm("pretrain --model-config " + config_ + " --out " + p("a_file/run") + common);
  EXPECT_EQ(out.exit_code, 2) << out.err;
  EXPECT_NE(out.err.find("--out " + p("a_file/run") + ": " + p("a_file") + " is not a directory"), std::string::npos)
      << out.err;

  // Non-finite weights: refused naming the tensor, loaded with the global flag (before or after the subcommand).
  Model m = Model::load(dir() / "teacher");
  Model bad = Model::create(m.config(), 1);
  bad.mutable_weights().norm.f32()[0] = std::numeric_limits<float>::infinity();
  bad.save(dir() / "bad");
  const std::string eval_bad = "eval --model " + p("bad") + " --data " + p("corpus") +
                               " --split valid --seq-len 64 --held-out-docs 4 --eval-tokens 128";
  const auto refused = run_hybridlm(eval_bad);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("tensor 'model.norm.weight' holds +inf (first at element 0"), std::string::npos)
      << refused.err;
  for (const std::string& args : {eval_bad + " --allow-nonfinite-weights", "--allow-nonfinite-weights " + eval_bad}) {
    const auto allowed = run_hybridlm(args);
    EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
    EXPECT_NE(allowed.err.find("loaded anyway (--allow-nonfinite-weights)"), std::string::npos) << allowed.err;
  }
}

TEST_F(CliPreflight, FailedFinalEvaluationKeepsTheModelAndPrintsHowToEvaluateIt) {
  const std::string args = "pretrain --model-config " + config_ + " --data " + p("corpus") +
                           " --tokens 768 --seq-len 64 --batch 4 --micro-batch 2 --held-out-docs 4 --eval-tokens 128" +
                           " --checkpoint-every 0 --out ";
  const auto ok = run_hybridlm(args + p("ok"));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  setenv("HYBRIDLM_FAULT", "train.final_evaluation@1:fail", 1);
  const auto failed = run_hybridlm(args + p("failed"));
  unsetenv("HYBRIDLM_FAULT");
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  EXPECT_NE(failed.err.find("training finished (step 3 of 3) and the final model is written to"), std::string::npos)
      << failed.err;
  EXPECT_TRUE(test::read_text(dir() / "failed" / "model" / "model.safetensors") ==
              test::read_text(dir() / "ok" / "model" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir() / "failed" / "checkpoint-00000003"));
  EXPECT_FALSE(fs::exists(dir() / "failed" / "test.json"));
  // The printed command evaluates the kept model: the numbers of the unfailed run's test.json.
  const size_t at = failed.err.find("\n  hybridlm eval ");
  ASSERT_NE(at, std::string::npos) << failed.err;
  const size_t begin = at + 3, end = failed.err.find('\n', begin);
  const std::string line = failed.err.substr(begin, end - begin);  // "hybridlm eval --model ..."
  const auto eval = run_hybridlm(line.substr(std::string("hybridlm ").size()));
  ASSERT_EQ(eval.exit_code, 0) << line << "\n" << eval.err;
  const auto a = nlohmann::json::parse(test::read_text(dir() / "ok" / "test.json"))["languages"];
  const auto b = nlohmann::json::parse(test::read_text(dir() / "failed" / "test.json"))["languages"];
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i]["ce"].get<double>(), b[i]["ce"].get<double>(), 1e-12);
}
