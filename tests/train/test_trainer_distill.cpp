// The [train] DONE criterion end to end on the CPU: a tiny full-attention teacher (bytes vocabulary, hidden 32,
// 2 layers) is pretrained on a small multilingual corpus the test writes, converted with convert_to_hybrid (layer 0
// keeps full attention, layer 1 becomes Gated DeltaNet: Algorithm 1's initialisation) and distilled with forward KL;
// the validation KL must go down by a clear margin, and the run leaves every file docs/training.md promises.
#include <gtest/gtest.h>

#include <chrono>

#include "support/run_binary.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(TrainerDistill, PretrainConvertDistillValidationKlGoesDown) {
  test::use_one_thread();
  test::ScratchDir scratch("trainer-distill");
  const fs::path corpus = scratch.path() / "corpus";
  test::write_tiny_corpus(corpus);

  // 1. Pretrain the teacher from scratch (CE).
  TrainConfig pre = test::tiny_train_config(TrainJob::Pretrain, corpus, scratch.path() / "teacher_run");
  pre.model_config = test::write_tiny_teacher_config(scratch.path()).string();
  pre.batch_rows = 4;
  pre.micro_batch_rows = 4;
  pre.tokens = 250 * 4 * 64;
  pre.lr_rec = pre.lr_rest = 1e-2;
  pre.min_lr = 1e-3;
  pre.warmup_steps = 5;
  pre.eval_every_tokens = 50 * 4 * 64;
  auto t0 = std::chrono::steady_clock::now();
  const TrainResult teacher_run = train_run(pre);
  const double pretrain_seconds = seconds_since(t0);
  ASSERT_EQ(teacher_run.status, TrainStatus::Completed) << teacher_run.message;
  ASSERT_TRUE(teacher_run.test.has_value());
  const auto pre_valid = test::read_metrics(scratch.path() / "teacher_run" / "metrics.jsonl", "valid");
  ASSERT_GE(pre_valid.size(), 2u);
  const double ce_first = pre_valid.front()["mean"]["ce"], ce_last = pre_valid.back()["mean"]["ce"];
  std::printf("pretrain: %lld steps in %.2fs, validation CE %.3f -> %.3f nats/token, test CE %.3f\n",
              static_cast<long long>(teacher_run.step), pretrain_seconds, ce_first, ce_last,
              teacher_run.test->mean_ce);
  EXPECT_LT(ce_last, 0.6 * ce_first);  // from ~ln 256 = 5.5 to well below

  // 2. Convert: one full-attention layer (layer 0), layer 1 becomes Gated DeltaNet.
  const fs::path student_dir = scratch.path() / "student";
  convert_to_hybrid(Model::load(scratch.path() / "teacher_run" / "model"), {0}, {}).save(student_dir);

  // 3. Distill with forward KL.
  TrainConfig dis = test::tiny_train_config(TrainJob::Distill, corpus, scratch.path() / "student_run");
  dis.teacher = (scratch.path() / "teacher_run" / "model").string();
  dis.student = student_dir.string();
  dis.batch_rows = 4;
  dis.micro_batch_rows = 2;
  dis.tokens = 240 * 4 * 64;
  dis.lr_rec = 5e-3;
  dis.lr_rest = 1e-3;
  dis.min_lr = 1e-4;
  dis.warmup_steps = 10;
  dis.eval_every_tokens = 60 * 4 * 64;
  dis.checkpoint_every_steps = 120;
  t0 = std::chrono::steady_clock::now();
  const TrainResult student_run = train_run(dis);
  const double distill_seconds = seconds_since(t0);
  ASSERT_EQ(student_run.status, TrainStatus::Completed) << student_run.message;
  const fs::path out = scratch.path() / "student_run";
  const auto valid = test::read_metrics(out / "metrics.jsonl", "valid");
  ASSERT_EQ(valid.size(), 5u);  // steps 0, 60, 120, 180, 240
  EXPECT_EQ(valid.front()["step"], 0);
  EXPECT_EQ(valid.back()["step"], 240);
  const double kl_first = valid.front()["mean"]["kl"], kl_last = valid.back()["mean"]["kl"];
  std::printf("distill: %lld steps in %.2fs, validation KL %.4f -> %.4f nats/token (CE gap %.4f -> %.4f), "
              "test KL %.4f\n",
              static_cast<long long>(student_run.step), distill_seconds, kl_first, kl_last,
              valid.front()["mean"]["ce_gap"].get<double>(), valid.back()["mean"]["ce_gap"].get<double>(),
              *student_run.test->mean_kl);
  EXPECT_LT(kl_last, 0.5 * kl_first);
  for (const std::string code : {"eng_Latn", "fra_Latn", "deu_Latn", "rus_Cyrl"})  // every language improves
    EXPECT_LT(valid.back()["kl"][code].get<double>(), valid.front()["kl"][code].get<double>()) << code;

  // Files: config, metrics (one step record per step), newest checkpoint only, final model, test evaluation.
  EXPECT_EQ(test::read_metrics(out / "metrics.jsonl", "step").size(), 240u);
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_TRUE(fs::exists(out / "checkpoint-00000240" / "optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(out / "checkpoint-00000120"));
  EXPECT_EQ(student_run.last_checkpoint.filename(), "checkpoint-00000240");
  const Model final_model = Model::load(out / "model");
  EXPECT_EQ(final_model.config().model_type, "qwen3_hybrid");
  const auto test_json = nlohmann::json::parse(test::read_text(out / "test.json"));
  EXPECT_EQ(test_json["format"], "hybridlm-eval");
  EXPECT_EQ(test_json["languages"].size(), 4u);
  EXPECT_EQ(test_json["languages"][0]["tier"], "anchor");
  EXPECT_EQ(test_json["languages"][0]["tokens"], 512);  // test split: twice the 256 validation tokens
}
