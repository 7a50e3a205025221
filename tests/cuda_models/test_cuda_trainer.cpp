// The trainer with its steps on the GPU (train_run with a CudaTrainDevice; `hybridlm distill|pretrain --device
// cuda`) against the same runs on the CPU: the tiny distillation and pretraining of tests/train/test_trainer_fixture.h
// (4 languages, rows of 64 bytes, B = 4, b = 2, so every step accumulates two micro-batches), 20 steps each.
//
// Bounds and their reasons:
// - Step 1 (kFirstStepBound = 1e-5 relative, the loss): step 1's loss comes from the initial weights, so the two
//   sides differ by the forward's summation order only; the one-step test (test_cuda_train_step.cpp) measured ≤ 3e-7
//   for a KL loss of the same kind (30× margin). The per-language means of step 1 within kLanguageBound = 1e-4: each
//   averages a quarter of the tokens, and a language whose mean KL is several times below the batch's has a
//   correspondingly larger relative error for the same absolute one; a wrong weight or language id misses by O(1).
//   The gradient norm of step 1 within kNormBound = 1e-4 (measured ≤ 2.2e-5 there: ~10^4 squared gradients, each
//   ~1e-5 relative apart).
// - Every step (kTrajectoryBound = 1e-2 relative): the two runs are free-running trajectories. AdamW moves an element
//   whose gradient sits within rounding noise of zero by about ±lr either way, so the two sides' weights drift apart
//   from step 1 on and the losses follow: the H200 measured ~2e-3 after 20 steps for a similar setup
//   (test_cuda_train_step.cpp), at lr 1e-3; the flips move weights by about lr, so this test keeps the peak rates at
//   2e-3 (rec) and 1e-3 (rest) rather than the fixture's 3e-3 / 1e-3 (5× margin at 1e-3). A wrong loss weight, lr,
//   decay or clip misses by far more within a few steps.
// - Final validation and test KL / CE (kTrajectoryBound too): the GPU run evaluates on the GPU from its own weights
//   (TrainDevice::evaluate_pass), so they differ by the weights' drift (and the evaluation's rounding, far smaller).
// - Step-0 validation (before any step, the same weights on both sides), per language: CE and teacher CE within
//   kEvalCeBound = 2e-5 relative, KL within kEvalKlBound = 2e-4 relative (the bounds of test_cuda_eval.cpp, reasons
//   there): this is the GPU evaluation inside the trainer against the CPU's.
// - GPU vs GPU (stop after 10 steps, resume for 10 in a fresh device, vs 20 straight): exactly equal losses,
//   byte-identical model.safetensors and an equal test KL: the GPU step is deterministic (no float atomics) and a
//   checkpoint holds the full fp32 state (weights, m, v, step count).
// - The loss chunked as one vocabulary chunk with row blocks of 16 (CudaTrainDevice::set_loss_chunking, "16xfull"):
//   the same bounds as the default chunking (another summation order of the log-sum-exp, far below them).
// - `distill --loss-chunking 16xfull` on the command line against train_run given "16xfull" in code with the CLI
//   run's saved settings: exactly equal losses and gradient norms (the same deterministic GPU step either way).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/device_query.h"
#include "core/error.h"
#include "cuda_models/cuda_model_support.h"
#include "ops/matmul/matmul_cuda.h"
#include "support/run_binary.h"
#include "train/cuda/cuda_train_device.h"
#include "train/lm_head_chunking_text.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

constexpr double kFirstStepBound = 1e-5;   // reasons in the header comment
constexpr double kLanguageBound = 1e-4;
constexpr double kNormBound = 1e-4;
constexpr double kTrajectoryBound = 1e-2;
constexpr double kEvalCeBound = 2e-5;
constexpr double kEvalKlBound = 2e-4;
constexpr int64_t kSteps = 20;


double rel(double gpu, double cpu) { return std::abs(gpu - cpu) / std::max(std::abs(cpu), 1e-30); }

std::vector<nlohmann::json> steps_of(const fs::path& run) { return test::read_metrics(run / "metrics.jsonl", "step"); }

class CudaTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();  // the CPU side: as the CPU trainer tests (tiny models)
    test::write_tiny_corpus(scratch.path() / "corpus", 200);
    test::write_tiny_teacher_and_student(scratch.path());
  }
  TrainConfig config(TrainJob job, const std::string& out, const std::string& device) const {
    TrainConfig c = test::tiny_train_config(job, scratch.path() / "corpus", scratch.path() / out);
    if (job == TrainJob::Distill) {
      c.teacher = (scratch.path() / "teacher").string();
      c.student = (scratch.path() / "student").string();
    } else {
      c.model_config = (scratch.path() / "tiny_qwen3.json").string();  // written by write_tiny_teacher_and_student
    }
    c.tokens = kSteps * c.batch_rows * c.seq_len;
    c.eval_every_tokens = 10 * c.batch_rows * c.seq_len;
    c.lr_rec = 2e-3;  // see the header comment (trajectory bound)
    c.device = device;
    return c;
  }
  TrainResult run(const TrainConfig& c, const std::optional<LmHeadChunking>& loss_chunking = std::nullopt) {
    if (c.device == "cpu") return train_run(c);
    CudaTrainDevice device;
    if (loss_chunking) device.set_loss_chunking(loss_chunking);
    return train_run(c, {}, &device);
  }
  // Runs job on the CPU and on the GPU (its loss chunked as given, else by default) and checks the bounds of the
  // header comment.
  void compare_with_cpu(TrainJob job, const std::optional<LmHeadChunking>& loss_chunking = std::nullopt) {
    const TrainResult cpu = run(config(job, "cpu", "cpu"));
    const TrainResult gpu = run(config(job, "gpu", "cuda"), loss_chunking);
    ASSERT_EQ(cpu.status, TrainStatus::Completed) << cpu.message;
    ASSERT_EQ(gpu.status, TrainStatus::Completed) << gpu.message;
    const std::vector<nlohmann::json> c = steps_of(scratch.path() / "cpu"), g = steps_of(scratch.path() / "gpu");
    ASSERT_EQ(c.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(g.size(), c.size());
    const char* name = job == TrainJob::Distill ? "distill" : "pretrain";
    double worst = 0.0;
    for (size_t s = 0; s < c.size(); ++s) {
      ASSERT_FALSE(g[s]["loss"].is_null()) << "step " << s + 1 << " not finite on the GPU";
      ASSERT_FALSE(g[s]["skipped"].get<bool>()) << "step " << s + 1;
      const double lc = c[s]["loss"].get<double>(), lg = g[s]["loss"].get<double>();
      const double nc = c[s]["grad_norm"].get<double>(), ng = g[s]["grad_norm"].get<double>();
      worst = std::max(worst, rel(lg, lc));
      EXPECT_LE(rel(lg, lc), s == 0 ? kFirstStepBound : kTrajectoryBound) << "step " << s + 1;
      if (s == 0) {
        EXPECT_LE(rel(ng, nc), kNormBound);
      }
      EXPECT_EQ(g[s]["lr"], c[s]["lr"]) << "step " << s + 1;
      std::printf("[step] %s %2zu loss cpu %.8f gpu %.8f (rel %.3g)  grad norm cpu %.6g gpu %.6g (rel %.3g)\n", name,
                  s + 1, lc, lg, rel(lg, lc), nc, ng, rel(ng, nc));
    }
    // Per-language means of step 1 (the same languages).
    ASSERT_EQ(g[0]["by_language"].size(), c[0]["by_language"].size());
    for (const auto& [code, value] : c[0]["by_language"].items()) {
      ASSERT_TRUE(g[0]["by_language"].contains(code)) << code;
      EXPECT_LE(rel(g[0]["by_language"][code].get<double>(), value.get<double>()), kLanguageBound) << code;
    }
    // Step-0 validation: the same weights, evaluated on the CPU and (inside the GPU run) on the GPU.
    const auto v0c = test::read_metrics(scratch.path() / "cpu" / "metrics.jsonl", "valid").front();
    const auto v0g = test::read_metrics(scratch.path() / "gpu" / "metrics.jsonl", "valid").front();
    ASSERT_EQ(v0c["step"], 0);
    ASSERT_EQ(v0g["step"], 0);
    double worst_eval = 0.0;
    for (const char* key : {"ce", "teacher_ce", "kl"}) {
      if (!v0c.contains(key)) continue;  // pretraining has no teacher
      ASSERT_TRUE(v0g.contains(key)) << key;
      ASSERT_EQ(v0g[key].size(), v0c[key].size()) << key;
      for (const auto& [code, value] : v0c[key].items()) {
        const double r = rel(v0g[key][code].get<double>(), value.get<double>());
        EXPECT_LE(r, std::string(key) == "kl" ? kEvalKlBound : kEvalCeBound) << "step-0 valid " << key << " " << code;
        worst_eval = std::max(worst_eval, r);
      }
    }
    std::printf("[check] cuda_trainer %s step-0 validation on the GPU vs CPU: worst rel=%.3g (bounds ce %.0e, kl "
                "%.0e)\n",
                name, worst_eval, kEvalCeBound, kEvalKlBound);
    // Final validation and test evaluation (each side on its own device, from its own weights).
    const auto vc = test::read_metrics(scratch.path() / "cpu" / "metrics.jsonl", "valid").back();
    const auto vg = test::read_metrics(scratch.path() / "gpu" / "metrics.jsonl", "valid").back();
    EXPECT_EQ(vg["step"], kSteps);
    const double valid_c = vc["mean"][job == TrainJob::Distill ? "kl" : "ce"].get<double>();
    const double valid_g = vg["mean"][job == TrainJob::Distill ? "kl" : "ce"].get<double>();
    EXPECT_LE(rel(valid_g, valid_c), kTrajectoryBound);
    ASSERT_TRUE(cpu.test && gpu.test);
    const double test_c = job == TrainJob::Distill ? *cpu.test->mean_kl : cpu.test->mean_ce;
    const double test_g = job == TrainJob::Distill ? *gpu.test->mean_kl : gpu.test->mean_ce;
    EXPECT_LE(rel(test_g, test_c), kTrajectoryBound);
    EXPECT_TRUE(fs::exists(scratch.path() / "gpu" / "model" / "model.safetensors"));
    std::printf("[check] cuda_trainer %s %lld steps: worst loss rel=%.3g (bound %.0e; step 1 bound %.0e); final valid "
                "%s cpu %.6f gpu %.6f, test cpu %.6f gpu %.6f\n",
                name, static_cast<long long>(kSteps), worst, kTrajectoryBound, kFirstStepBound,
                job == TrainJob::Distill ? "kl" : "ce", valid_c, valid_g, test_c, test_g);
  }
  test::ScratchDir scratch{"cuda-trainer"};
};

}  // namespace

TEST_F(CudaTrainer, DistillTracksTheCpuRun) {
  HLM_REQUIRE_CUDA_MODEL();
  compare_with_cpu(TrainJob::Distill);
}

TEST_F(CudaTrainer, PretrainTracksTheCpuRun) {
  HLM_REQUIRE_CUDA_MODEL();
  compare_with_cpu(TrainJob::Pretrain);
}

// One chunk over the vocabulary and row blocks of 16 tokens (several per micro-batch): the loss's second pass takes the
// first pass's logits tiles (lm_head_loss_cuda.h); both jobs track the CPU within the same bounds.
TEST_F(CudaTrainer, DistillWithOneVocabularyChunkTracksTheCpuRun) {
  HLM_REQUIRE_CUDA_MODEL();
  compare_with_cpu(TrainJob::Distill, parse_lm_head_chunking("16xfull"));
}

TEST_F(CudaTrainer, PretrainWithOneVocabularyChunkTracksTheCpuRun) {
  HLM_REQUIRE_CUDA_MODEL();
  compare_with_cpu(TrainJob::Pretrain, parse_lm_head_chunking("16xfull"));
}

// A malformed HLM_LM_HEAD_CHUNKING, or a chunking with a zero part, is an input error when the device takes it.
TEST_F(CudaTrainer, BadLossChunkingIsAnInputError) {
  HLM_REQUIRE_CUDA_MODEL();
  const auto expect_input_error = [](const std::function<void()>& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << what << ": " << e.what();
    }
  };
  setenv("HLM_LM_HEAD_CHUNKING", "4096", 1);
  expect_input_error([] { CudaTrainDevice device; }, "HLM_LM_HEAD_CHUNKING=4096");
  unsetenv("HLM_LM_HEAD_CHUNKING");
  CudaTrainDevice device;
  expect_input_error([&] { device.set_loss_chunking(LmHeadChunking{.vocab_chunk = 0, .row_block = 16}); },
                     "vocab_chunk 0");
  expect_input_error([&] { device.set_loss_chunking(LmHeadChunking{.vocab_chunk = 4096, .row_block = 0}); },
                     "row_block 0");
}

TEST_F(CudaTrainer, ResumeOnTheGpuIsBitIdentical) {
  HLM_REQUIRE_CUDA_MODEL();
  const TrainResult straight = run(config(TrainJob::Distill, "straight", "cuda"));
  ASSERT_EQ(straight.status, TrainStatus::Completed) << straight.message;
  TrainConfig first = config(TrainJob::Distill, "split", "cuda");
  first.stop_after_steps = kSteps / 2;
  const TrainResult a = run(first);
  ASSERT_EQ(a.status, TrainStatus::Stopped) << a.message;
  TrainConfig second = config(TrainJob::Distill, "split", "cuda");
  second.resume = (scratch.path() / "split").string();
  const TrainResult b = run(second);  // a fresh CudaTrainDevice: everything comes from the checkpoint
  ASSERT_EQ(b.status, TrainStatus::Completed) << b.message;

  std::vector<double> split = a.losses;
  split.insert(split.end(), b.losses.begin(), b.losses.end());
  ASSERT_EQ(split.size(), straight.losses.size());
  for (size_t s = 0; s < split.size(); ++s) EXPECT_EQ(split[s], straight.losses[s]) << "step " << s + 1;
  EXPECT_EQ(test::read_text(scratch.path() / "split" / "model" / "model.safetensors"),
            test::read_text(scratch.path() / "straight" / "model" / "model.safetensors"));
  ASSERT_TRUE(straight.test && b.test);
  EXPECT_EQ(*b.test->mean_kl, *straight.test->mean_kl);
  std::printf("[check] cuda_trainer resume on the GPU: %zu losses equal, model.safetensors byte-identical, test kl "
              "%.8f\n",
              split.size(), *straight.test->mean_kl);
}

// HLM_TEACHER_OVERLAP (train/cuda/cuda_train_device.h): each micro-batch's teacher forward queued on the context's
// side stream (beside the backward of the micro-batch before it, a step's first beside the student's forward) gives
// the serial step's bits, in fp32
// and in the bf16 mode (its head's rounding of the teacher's hidden states made on the side stream too), with the
// default loss chunking and with one vocabulary chunk (then the teacher's logits and lse are made on the side stream
// too, lm_head_teacher_logits_cuda): every step's loss, the saved model byte for byte, the test KL. Four micro-batches
// per step, so three of each step's teacher forwards overlap a backward and one the student's forward.
TEST_F(CudaTrainer, TeacherOverlapIsBitIdentical) {
  HLM_REQUIRE_CUDA_MODEL();
  for (const bool bf16 : {false, true})
  for (const char* chunking : {"", "16xfull"}) {
    std::vector<TrainResult> results;
    std::vector<std::string> outs;
    for (const int overlap : {0, 1}) {
      const std::string out = std::string(bf16 ? "bf16" : "fp32") + (*chunking ? "_full" : "") +
                              (overlap ? "_overlap" : "_serial");
      TrainConfig c = config(TrainJob::Distill, out, "cuda");
      c.micro_batch_rows = 1;
      cuda_train_set_teacher_overlap(overlap);
      CudaTrainDeviceOptions options;
      options.bf16 = bf16;
      CudaTrainDevice device(options);
      if (*chunking) device.set_loss_chunking(parse_lm_head_chunking(chunking));
      results.push_back(train_run(c, {}, &device));
      outs.push_back(out);
    }
    cuda_train_set_teacher_overlap(-1);
    for (const TrainResult& r : results) ASSERT_EQ(r.status, TrainStatus::Completed) << r.message;
    ASSERT_EQ(results[0].losses.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(results[1].losses.size(), results[0].losses.size());
    for (size_t s = 0; s < results[0].losses.size(); ++s)
      EXPECT_EQ(results[1].losses[s], results[0].losses[s]) << outs[1] << " step " << s + 1;
    EXPECT_EQ(test::read_text(scratch.path() / outs[1] / "model" / "model.safetensors"),
              test::read_text(scratch.path() / outs[0] / "model" / "model.safetensors"));
    ASSERT_TRUE(results[0].test && results[1].test);
    EXPECT_EQ(*results[1].test->mean_kl, *results[0].test->mean_kl);
    std::printf("[check] teacher overlap %s, loss chunking %s: %zu losses equal to the serial run's (last %.8f), "
                "model.safetensors byte-identical, test kl %.8f\n",
                bf16 ? "bf16" : "fp32", *chunking ? chunking : "default", results[0].losses.size(),
                results[1].losses.back(), *results[1].test->mean_kl);
  }
}

// The command line end to end: `hybridlm distill --device cuda` prints the GPU, records it in config.json and
// trains (exit 0); `eval --device cuda` of its model reproduces its test.json.
TEST_F(CudaTrainer, DistillCommandRunsOnTheGpu) {
  HLM_REQUIRE_CUDA_MODEL();
  const fs::path out = scratch.path() / "cli";
  const std::string args = "distill --teacher '" + (scratch.path() / "teacher").string() + "' --student '" +
                           (scratch.path() / "student").string() + "' --data '" +
                           (scratch.path() / "corpus").string() + "' --out '" + out.string() +
                           "' --tokens 1024 --seq-len 64 --batch 4 --micro-batch 2 --held-out-docs 20 "
                           "--eval-tokens 256 --device cuda";
  const test::RunResult r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("accelerator  cuda:0"), std::string::npos) << r.out;  // the GPU's name and memory follow
  const nlohmann::json config = nlohmann::json::parse(test::read_text(out / "config.json"));
  EXPECT_EQ(config["device"], "cuda");
  EXPECT_EQ(steps_of(out).size(), 4u);

  // `eval --device cuda` of the saved model with the run's held-out settings and --rows = --micro-batch reproduces
  // the run's test.json exactly: model/ holds the device's fp32 weights, and the GPU evaluation is deterministic.
  const fs::path eval_json = scratch.path() / "cli_eval.json";
  const test::RunResult eval =
      test::run_cli("eval --model '" + (out / "model").string() + "' --teacher '" + (scratch.path() / "teacher").string() +
              "' --data '" + (scratch.path() / "corpus").string() +
              "' --split test --seq-len 64 --held-out-docs 20 --eval-tokens 256 --rows 2 --device cuda --out '" +
              eval_json.string() + "'");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const nlohmann::json run_test = nlohmann::json::parse(test::read_text(out / "test.json"));
  const nlohmann::json again = nlohmann::json::parse(test::read_text(eval_json));
  ASSERT_EQ(again["languages"].size(), run_test["languages"].size());
  for (size_t i = 0; i < run_test["languages"].size(); ++i)
    for (const char* key : {"code", "tokens", "ce_tokens", "ce", "kl", "teacher_ce"})
      EXPECT_EQ(again["languages"][i][key], run_test["languages"][i][key]) << key << " of language " << i;
}

// `distill --device cuda --loss-chunking 16xfull` takes the chunking to the device: it prints and saves it, and the
// run's losses equal, bit for bit, those of train_run on a CudaTrainDevice given the same chunking in code with the
// run's own saved settings (the GPU step is deterministic); without the option the device keeps its default.
TEST_F(CudaTrainer, DistillCommandTakesTheLossChunking) {
  HLM_REQUIRE_CUDA_MODEL();
  const fs::path out = scratch.path() / "cli_chunked";
  const std::string common = "distill --teacher '" + (scratch.path() / "teacher").string() + "' --student '" +
                             (scratch.path() / "student").string() + "' --data '" +
                             (scratch.path() / "corpus").string() +
                             "' --tokens 1024 --seq-len 64 --batch 4 --micro-batch 2 --held-out-docs 20 "
                             "--eval-tokens 256 --device cuda";
  // Both runs with the GEMM autotune off: with it on, each process times its own algorithm choices and two processes
  // may choose differently (other bits), which is not what this test is about (matmul_cuda.h).
  const test::RunResult r = test::run_shell("HLM_MATMUL_AUTOTUNE=off " + test::cuda_test_binary() + " " + common +
                                            " --out '" + out.string() + "' --loss-chunking 16xfull");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loss tiles   16 logits rows by the whole vocabulary"), std::string::npos) << r.out;
  const nlohmann::json saved = nlohmann::json::parse(test::read_text(out / "config.json"));
  EXPECT_EQ(saved["loss_chunking"], "16xfull");

  TrainConfig again = train_config_from_json(saved, "config.json");
  again.out = (scratch.path() / "api_chunked").string();
  CudaTrainDevice device;
  device.set_loss_chunking(parse_lm_head_chunking("16xfull"));
  matmul_cuda_set_autotune(0);
  const TrainStatus status = train_run(again, {}, &device).status;
  matmul_cuda_set_autotune(-1);
  ASSERT_EQ(status, TrainStatus::Completed);
  const std::vector<nlohmann::json> cli = steps_of(out), api = steps_of(scratch.path() / "api_chunked");
  ASSERT_EQ(cli.size(), 4u);
  ASSERT_EQ(api.size(), cli.size());
  for (size_t s = 0; s < cli.size(); ++s) {
    EXPECT_EQ(cli[s]["loss"], api[s]["loss"]) << "step " << s + 1;
    EXPECT_EQ(cli[s]["grad_norm"], api[s]["grad_norm"]) << "step " << s + 1;
  }
  std::printf("[check] cuda_trainer --loss-chunking 16xfull: %zu steps equal to the in-code chunking\n", cli.size());

  const test::RunResult bad =
      test::run_cli(common + " --out '" + (scratch.path() / "bad").string() + "' --loss-chunking 16");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("expected ROWSxCOLS or ROWSxfull"), std::string::npos) << bad.err;
}

// The bf16 compute mode (CudaTrainDeviceOptions::bf16, `--precision bf16`) against the fp32 GPU run of the same
// config, step by step. Both start from the same weights; bf16 rounds the operands of every linear, the attention
// and the LM head (2^-9 relative each), so the losses differ by a small relative amount that the shared optimizer
// trajectory keeps small over 20 steps. Bounds: pretraining CE (~5.5 nats, errors relative to the value):
// kBf16CeBound = 1e-2 per step; distillation KL (a small difference of two nearly equal distributions, so its
// relative error is larger): kBf16KlBound = 0.1 relative + 1e-4 nats. Either mode silently computing in fp32 is
// caught by requiring some step to differ (a bf16 run that equals the fp32 run bit for bit is not bf16). Both runs
// must learn (last loss below the first).
constexpr double kBf16CeBound = 1e-2, kBf16KlBound = 0.1, kBf16KlFloor = 1e-4;

TEST_F(CudaTrainer, Bf16TracksFp32) {
  HLM_REQUIRE_CUDA_MODEL();
  for (TrainJob job : {TrainJob::Pretrain, TrainJob::Distill}) {
    const char* name = job == TrainJob::Distill ? "distill" : "pretrain";
    TrainConfig fp32 = config(job, std::string(name) + "_fp32", "cuda");
    TrainConfig bf16 = config(job, std::string(name) + "_bf16", "cuda");
    bf16.precision = "bf16";
    CudaTrainDevice fp32_device, bf16_device(CudaTrainDeviceOptions{.bf16 = true});
    ASSERT_EQ(train_run(fp32, {}, &fp32_device).status, TrainStatus::Completed);
    ASSERT_EQ(train_run(bf16, {}, &bf16_device).status, TrainStatus::Completed);
    const std::vector<nlohmann::json> a = steps_of(scratch.path() / (std::string(name) + "_fp32")),
                                      b = steps_of(scratch.path() / (std::string(name) + "_bf16"));
    ASSERT_EQ(a.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(b.size(), a.size());
    double worst = 0.0;
    bool differs = false;
    for (size_t s = 0; s < a.size(); ++s) {
      ASSERT_FALSE(b[s]["loss"].is_null()) << name << " step " << s + 1 << " not finite in bf16";
      const double la = a[s]["loss"].get<double>(), lb = b[s]["loss"].get<double>();
      differs = differs || la != lb;
      const double err = std::abs(lb - la);
      if (job == TrainJob::Pretrain) {
        EXPECT_LE(err, kBf16CeBound * std::abs(la)) << name << " step " << s + 1 << ": fp32 " << la << " bf16 " << lb;
        worst = std::max(worst, err / std::abs(la));
      } else {
        EXPECT_LE(err, kBf16KlBound * std::abs(la) + kBf16KlFloor)
            << name << " step " << s + 1 << ": fp32 " << la << " bf16 " << lb;
        worst = std::max(worst, err / std::max(std::abs(la), 1e-30));
      }
    }
    EXPECT_TRUE(differs) << name << ": the bf16 run equals the fp32 run bit for bit";
    EXPECT_LT(b.back()["loss"].get<double>(), b.front()["loss"].get<double>()) << name << ": bf16 did not learn";
    const nlohmann::json cfg = nlohmann::json::parse(test::read_text(scratch.path() / (std::string(name) + "_bf16") /
                                                                     "config.json"));
    EXPECT_EQ(cfg["precision"], "bf16");
    std::printf("[check] bf16 vs fp32 %s, %lld steps: worst relative loss difference %.3g (first %.6g vs %.6g)\n",
                name, static_cast<long long>(kSteps), worst, a.front()["loss"].get<double>(),
                b.front()["loss"].get<double>());
  }
}

// Input errors (exit 2), with or without a GPU: an unknown device; `--device cuda` where no GPU is usable.
TEST_F(CudaTrainer, DeviceErrorsAreInputErrors) {
  const std::string common = " --teacher '" + (scratch.path() / "teacher").string() + "' --student '" +
                             (scratch.path() / "student").string() + "' --data '" +
                             (scratch.path() / "corpus").string() + "' --tokens 1024 --seq-len 64 --batch 4";
  const test::RunResult bad =
      test::run_cli("distill" + common + " --out '" +
                                                               (scratch.path() / "bad").string() + "' --device tpu");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--device"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(scratch.path() / "bad"));
  if (cuda_available()) return;
  const test::RunResult none =
      test::run_cli("distill" + common + " --out '" +
                                                               (scratch.path() / "none").string() + "' --device cuda");
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("no usable GPU"), std::string::npos) << none.err;
  EXPECT_FALSE(fs::exists(scratch.path() / "none"));
}
