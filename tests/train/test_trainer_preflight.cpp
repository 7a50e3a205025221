// Issue #27: everything checkable is checked before the first step, and a finished run is never lost.
// - a corpus whose documents alternate long and very short, --held-out-docs 1, rows of 512: the test split of one
//   language has no full row. The trainer used to train every step and fail at the end ("held-out set of eng_Latn
//   has no tokens to evaluate"), writing no model; now it refuses before step 1, naming the split and the options,
//   and writes nothing. Same for an empty validation split;
// - a teacher whose vocabulary differs from the student's, an --out that cannot be created, too little free space
//   (a stubbed statvfs), too little device memory (a stub TrainDevice): input errors, nothing written;
// - a second trainer into a locked --out is refused;
// - a final evaluation that fails leaves the final checkpoint and model/ in place, reports how to evaluate later,
//   and `--resume` redoes only the evaluation;
// - NaN/Inf in loaded weights is an input error naming the tensor (allowed by the explicit switch);
// - a truncated or altered checkpoint file is an input error naming it on resume, never a restart from scratch.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "models/finite_weights.h"
#include "support/run_binary.h"
#include "train/checkpoint_io.h"
#include "train/train_device.h"
#include "train/alternating_corpus.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

// A stand-in accelerator: reports its free memory; anything else is an error (the checks must stop the run first).
class StubDevice final : public TrainDevice {
 public:
  explicit StubDevice(size_t free) : free_(free) {}
  std::string describe() const override { return "stub"; }
  size_t free_memory_bytes() const override { return free_; }
  void attach(Model&, Model*, AdamW&) override { ADD_FAILURE() << "attach after a failed memory check"; }
  BatchLoss step(const PackedBatch&, int64_t, double, double, double*, size_t) override {
    throw std::logic_error("stub device: no steps");
  }
  void evaluate_pass(const PackedBatch&, EvalSums&) override { throw std::logic_error("stub device: no passes"); }
  void sync_to_host() override {}

 private:
  size_t free_;
};

class TrainerPreflight : public ::testing::Test {
 protected:
  void SetUp() override { test::use_one_thread(); }
  fs::path dir() const { return scratch.path(); }
  // A pretrain run of `steps` steps of 2 x 64 tokens on the tiny corpus (written on first use).
  TrainConfig pretrain(const std::string& out, int64_t steps = 4) {
    if (!fs::exists(dir() / "corpus")) test::write_tiny_corpus(dir() / "corpus", 60);
    TrainConfig c = test::tiny_train_config(TrainJob::Pretrain, dir() / "corpus", dir() / out);
    c.model_config = test::write_tiny_teacher_config(dir() / "configs").string();
    c.batch_rows = 2;
    c.micro_batch_rows = 1;
    c.tokens = steps * 2 * 64;
    c.held_out_docs = 4;
    c.eval_tokens = 128;
    c.eval_every_tokens = 0;
    c.lr_rec = c.lr_rest = 1e-3;
    c.warmup_steps = 1;
    return c;
  }
  // Runs `config` expecting an input error that contains every piece of `needles`; returns the message.
  static std::string expect_input_error(const TrainConfig& config, const std::vector<std::string>& needles,
                                        const TrainHooks& hooks = {}, TrainDevice* device = nullptr) {
    try {
      train_run(config, hooks, device);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
      for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }
  test::ScratchDir scratch{"trainer-preflight"};
};

}  // namespace

TEST_F(TrainerPreflight, AlternatingLengthCorpusFailsBeforeTheFirstStepNotAfterTheLast) {
  for (const Split split : {Split::Test, Split::Valid}) {
    const fs::path corpus = dir() / (split == Split::Test ? "alt_test" : "alt_valid");
    test::write_alternating_corpus(corpus, split);
    // The settings: --held-out-docs 1 --eval-tokens 512 --seq-len 512 --checkpoint-every 0.
    TrainConfig c = pretrain(split == Split::Test ? "run_test" : "run_valid");
    c.data = corpus.string();
    c.held_out_docs = 1;
    c.eval_tokens = 512;
    c.seq_len = 512;
    c.tokens = 4 * 2 * 512;
    c.checkpoint_every_steps = 0;
    TrainHooks hooks;
    hooks.on_step_begin = [](int64_t step, Model&) { ADD_FAILURE() << "step " << step << " ran"; };
    expect_input_error(c,
                       {split == Split::Test ? "the test split of eng_Latn" : "the validation split of eng_Latn",
                        "no full row of --seq-len 512", "1 held-out document(s) (--held-out-docs 1)",
                        "hold 12 token(s)", "larger --held-out-docs or a smaller --seq-len"},
                       hooks);
    EXPECT_FALSE(fs::exists(c.out));  // nothing written
  }
}

TEST_F(TrainerPreflight, TeacherWithAnotherVocabularyIsRefusedBeforeAnythingIsWritten) {
  test::write_tiny_corpus(dir() / "corpus", 60);
  test::write_tiny_teacher_and_student(dir());
  std::string config = test::tiny_teacher_config_json();
  config.replace(config.find("\"vocab_size\": 256"), 17, "\"vocab_size\": 300");
  fs::create_directories(dir() / "big");
  std::ofstream(dir() / "big" / "config.json") << config;
  Model::create(load_model_config(dir() / "big" / "config.json"), 3).save(dir() / "big_teacher");
  TrainConfig c = pretrain("distill_run");
  c.job = TrainJob::Distill;
  c.teacher = (dir() / "big_teacher").string();
  c.student = (dir() / "student").string();
  expect_input_error(c, {"--teacher " + c.teacher, "vocabulary (300) differs from the student's (256"});
  EXPECT_FALSE(fs::exists(c.out));
}

TEST_F(TrainerPreflight, TokenizerLargerThanTheModelVocabularyIsRefused) {
  std::string config = test::tiny_teacher_config_json();
  config.replace(config.find("\"vocab_size\": 256"), 17, "\"vocab_size\": 100");
  fs::create_directories(dir() / "small");
  std::ofstream(dir() / "small" / "config.json") << config;
  TrainConfig c = pretrain("small_vocab");
  c.model_config = (dir() / "small" / "config.json").string();
  expect_input_error(c, {"tokenizer bytes has 256 tokens but the model's vocabulary is 100"});
  EXPECT_FALSE(fs::exists(c.out));
}

TEST_F(TrainerPreflight, OutThatCannotBeCreatedIsRefused) {
  TrainConfig c = pretrain("x");
  std::ofstream(dir() / "a_file") << "not a directory";
  c.out = (dir() / "a_file" / "run").string();
  expect_input_error(c, {"--out " + c.out, "a_file is not a directory"});
  if (::geteuid() != 0) {  // root writes anywhere: the permission case needs an ordinary user
    fs::create_directories(dir() / "read_only");
    fs::permissions(dir() / "read_only", fs::perms::owner_read | fs::perms::owner_exec);
    c.out = (dir() / "read_only" / "run").string();
    expect_input_error(c, {"--out " + c.out, "cannot create it in"});
    fs::permissions(dir() / "read_only", fs::perms::owner_all);
  }
}

TEST_F(TrainerPreflight, TooLittleFreeSpaceIsRefusedWithThePlan) {
  TrainConfig c = pretrain("full_disk");
  c.checkpoint_every_steps = 1;
  TrainHooks hooks;
  uint64_t asked = 0;
  hooks.free_bytes = [&](const fs::path& where) {
    EXPECT_EQ(where, dir());  // the nearest existing directory of --out
    ++asked;
    return uint64_t{1} << 20;
  };
  expect_input_error(c, {"--out " + c.out, "GiB free, the run needs about",
                         "two checkpoints of", "free some space or choose another --out"},
                     hooks);
  EXPECT_EQ(asked, 1u);
  EXPECT_FALSE(fs::exists(c.out));
  // The plan itself: 12 bytes per parameter per checkpoint, 4 for the model; two checkpoints with periodic ones.
  const TrainDiskPlan plan = train_disk_plan(1000000, true);
  EXPECT_EQ(plan.checkpoint_bytes, 12000000u);
  EXPECT_EQ(plan.model_bytes, 4000000u);
  EXPECT_GE(plan.peak_bytes, 28000000u);
  EXPECT_LT(train_disk_plan(1000000, false).peak_bytes, plan.peak_bytes);
  // Enough room: the same run goes through.
  hooks.free_bytes = [](const fs::path&) { return uint64_t{1} << 40; };
  EXPECT_EQ(train_run(c, hooks).status, TrainStatus::Completed);
}

TEST_F(TrainerPreflight, TooLittleDeviceMemoryIsRefusedBeforeAttach) {
  TrainConfig c = pretrain("small_gpu");
  c.device = "cuda";
  StubDevice device(100000);  // the tiny model's 26816 parameters alone need 16 x 26816 = 429056 bytes
  expect_input_error(c, {"--device cuda: the run needs at least", "--micro-batch 1 x --seq-len 64",
                         "use a smaller model, --micro-batch or --seq-len"},
                     {}, &device);
  EXPECT_FALSE(fs::exists(c.out));
  // The floor: 16 bytes per student parameter, 4 per teacher parameter, the fp32 layer inputs (+ final norm input).
  EXPECT_EQ(train_device_memory_floor(10, 5, 2, 8, 100), 16u * 10 + 4 * 5 + 4 * 3 * 8 * 100);
}

TEST_F(TrainerPreflight, SecondTrainerIntoALockedOutIsRefused) {
  TrainConfig c = pretrain("locked");
  c.stop_after_steps = 2;
  c.checkpoint_every_steps = 2;
  ASSERT_EQ(train_run(c).status, TrainStatus::Stopped);
  // Another process holds the run's lock (flock on a second open file description behaves alike in one process).
  const fs::path lock = dir() / "locked" / ".hybridlm.lock";
  ASSERT_TRUE(fs::exists(lock));
  const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  TrainConfig again = c;
  again.stop_after_steps = 0;
  again.resume = c.out;
  const std::string before = test::read_text(dir() / "locked" / "metrics.jsonl");
  expect_input_error(again, {"another hybridlm process is training into this directory", ".hybridlm.lock"});
  EXPECT_EQ(test::read_text(dir() / "locked" / "metrics.jsonl"), before);  // untouched
  ::close(fd);
  EXPECT_EQ(train_run(again).status, TrainStatus::Completed);  // lock released: the resume goes through
}

TEST_F(TrainerPreflight, FailedFinalEvaluationKeepsTheModelAndResumeRedoesIt) {
  TrainConfig c = pretrain("eval_fails", 3);
  c.checkpoint_every_steps = 0;  // the case: no periodic checkpoint
  TrainHooks hooks;
  const fs::path out = dir() / "eval_fails";
  hooks.on_final_evaluation = [&] {
    // The model and the final checkpoint are on disk before any evaluation after the last step.
    EXPECT_TRUE(fs::exists(out / "model" / "model.safetensors"));
    EXPECT_TRUE(fs::exists(out / "checkpoint-00000003" / "optimizer.safetensors"));
    throw_input_error("evaluation device lost (test)");
  };
  const TrainResult r = train_run(c, hooks);
  ASSERT_EQ(r.status, TrainStatus::EvaluationFailed);
  EXPECT_EQ(r.step, 3);
  for (const char* part : {"training finished (step 3 of 3)", "the final model is written to",
                           "final evaluation failed: evaluation device lost (test)", "hybridlm eval --model ",
                           "--split test --seq-len 64 --held-out-docs 4 --eval-tokens 128",
                           "hybridlm pretrain --resume "})
    EXPECT_NE(r.message.find(part), std::string::npos) << part << "\n" << r.message;
  EXPECT_FALSE(fs::exists(out / "test.json"));
  const std::string model = test::read_text(out / "model" / "model.safetensors");

  // The same run without the failure writes the same model.
  TrainConfig straight = pretrain("eval_ok", 3);
  straight.checkpoint_every_steps = 0;
  ASSERT_EQ(train_run(straight).status, TrainStatus::Completed);
  EXPECT_EQ(test::read_text(dir() / "eval_ok" / "model" / "model.safetensors"), model);

  // --resume redoes only the final evaluation: no step, the model untouched, test.json as the straight run's.
  TrainConfig again = c;
  again.resume = out.string();
  const TrainResult resumed = train_run(again);
  ASSERT_EQ(resumed.status, TrainStatus::Completed) << resumed.message;
  EXPECT_TRUE(resumed.losses.empty());
  EXPECT_EQ(test::read_text(out / "model" / "model.safetensors"), model);
  EXPECT_EQ(nlohmann::json::parse(test::read_text(out / "test.json"))["languages"],
            nlohmann::json::parse(test::read_text(dir() / "eval_ok" / "test.json"))["languages"]);
  // Finished now: a further resume is refused.
  expect_input_error(again, {"the run has finished (test.json exists)"});
}

TEST_F(TrainerPreflight, NonFiniteWeightsAreAnErrorNamingTheTensor) {
  const ModelConfig config = load_model_config(test::write_tiny_teacher_config(dir() / "configs"));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    Model m = Model::create(config, 1);
    m.mutable_weights().layers[1].mlp.up_proj.weight.f32()[5] = bad;
    m.save(dir() / "bad_model");
    try {
      Model::load(dir() / "bad_model");
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      const std::string what = e.what();
      EXPECT_NE(what.find("model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' holds " +
                          std::string(std::isnan(bad) ? "NaN" : "-inf") + " (first at element 5 of"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("--allow-nonfinite-weights"), std::string::npos) << what;
    }
    set_allow_nonfinite_weights(true);
    const Model loaded = Model::load(dir() / "bad_model");
    set_allow_nonfinite_weights(false);
    const float v = loaded.weights().layers[1].mlp.up_proj.weight.f32()[5];
    EXPECT_TRUE(std::isnan(bad) ? std::isnan(v) : v == bad);
  }
}

TEST_F(TrainerPreflight, DamagedCheckpointIsAnErrorNamingTheFileNeverARestart) {
  TrainConfig c = pretrain("damaged", 4);
  c.checkpoint_every_steps = 2;
  c.stop_after_steps = 2;
  ASSERT_EQ(train_run(c).status, TrainStatus::Stopped);
  const fs::path ckpt = dir() / "damaged" / "checkpoint-00000002";
  ASSERT_TRUE(fs::exists(ckpt / kCheckpointManifestFile));
  fs::copy(ckpt, dir() / "pristine", fs::copy_options::recursive);
  TrainConfig again = c;
  again.stop_after_steps = 0;
  again.resume = (dir() / "damaged").string();
  const auto restore = [&] {
    fs::remove_all(ckpt);
    fs::copy(dir() / "pristine", ckpt, fs::copy_options::recursive);
  };
  // Truncated weights.
  fs::resize_file(ckpt / "model.safetensors", fs::file_size(ckpt / "model.safetensors") - 100);
  expect_input_error(again, {(ckpt / "model.safetensors").string(), "(truncated)", "the checkpoint is damaged"});
  restore();
  // One flipped bit deep inside the optimizer state (a valid file otherwise).
  {
    std::fstream f(ckpt / "optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-40, std::ios::end);
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x10);
    f.seekp(-40, std::ios::end);
    f.write(&b, 1);
  }
  expect_input_error(again, {(ckpt / "optimizer.safetensors").string(), "content differs from the manifest"});
  restore();
  // A missing file.
  fs::remove(ckpt / "trainer_state.json");
  try {
    train_run(again);
    ADD_FAILURE() << "resumed without trainer_state.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trainer_state.json"), std::string::npos) << e.what();
  }
  restore();
  // Nothing above restarted from scratch or advanced: the metrics still end at step 2; the intact one resumes.
  EXPECT_EQ(test::read_metrics(dir() / "damaged" / "metrics.jsonl", "step").size(), 2u);
  EXPECT_EQ(train_run(again).status, TrainStatus::Completed);
}
