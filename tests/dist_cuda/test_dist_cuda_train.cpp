// The GPU trainer's data parallelism (train/cuda/cuda_data_parallel.h, docs/distributed.md) through the real command
// line, against the plain GPU run of the same tiny pretrain (8 steps x 6 rows x 64 tokens, micro-batch 1, fp32):
// - one rank, HYBRIDLM_GPU_COLLECTIVES=nccl (and =host), ZeRO-1 with buckets of 1000 elements (so parameters are
//   cut across buckets and chunks): the gradients go through the buckets, the shard (a one-rank reduce-scatter is a
//   copy) and the shard's AdamW. Bounds: weights and losses exactly equal (the same kernels on the same values; the
//   clip scale float(clip / norm) could differ only if the two norms straddled an fp32 rounding boundary); the norm
//   is summed in other groups (pieces instead of parameters): kOneRankNormTol relative (fp64 sums).
// - two ranks on ONE GPU (mpirun -np 2, HYBRIDLM_GPU_COLLECTIVES=host: NCCL refuses two ranks on one GPU), ZeRO-1 and
//   ZeRO-0: each rank adds its own micro-batches and the ranks' sums are added in rank order, so gradients differ
//   from one process by fp32 regrouping, as on the CPU (tests/dist/test_dist_train.cpp measured 2e-7 in weights
//   there); bounds kLossTol / kWeightTol.
// - a 2-rank ZeRO-1 run stopped after step 4 and resumed on 2 ranks equals the uninterrupted one exactly (the
//   moments gathered from the shards into the checkpoint and sliced again).
// - the overlap of the gradient sums with the last micro-batch's backward (HYBRIDLM_DP_OVERLAP, default on) against
//   the same run with it off, buckets of 1000 elements (so buckets become final layer by layer and mix parameters of
//   several layers): one rank through nccl and host staging (ZeRO-1), two ranks on one GPU (host staging, ZeRO-1 and
//   ZeRO-0). Bound: exactly equal losses, norms and weights (the same sums in the same order, only their timing
//   differs; a bucket summed before its last gradient was added, or read while being written, breaks it).
// - adam8 and lean plans are refused with the message naming them (not sharded on the GPU yet).
// $HLM_BINARY (the GPU machine's unpacked copy) when set. Label cuda: every test skips without a usable GPU (and
// the multi-rank ones without mpirun).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backend/cuda/device_query.h"
#include "cuda_models/cuda_model_support.h"
#include "dist/dist_launch.h"
#include "models/safetensors.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

constexpr double kOneRankNormTol = 1e-12;  // relative; reasons above (measured 1.6e-16 on the H200)
// Two ranks on one GPU against one process: measured on the H200 (2026-12-02, ZeRO-1 and ZeRO-0 alike) loss 7.8e-10
// relative, grad norm 1.4e-8 relative, weights 3.7e-8; the CPU test's bounds (tests/dist/test_dist_train.cpp) are
// 25-1000x those and 3000x below one step's update (lr 3e-3).
constexpr double kLossTol = 1e-6;    // relative, per step
constexpr double kNormTol = 1e-6;    // relative, per step
constexpr double kWeightTol = 1e-6;  // absolute

class GpuDataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cuda_available()) return;
    scratch_ = new test::ScratchDir("dist-cuda-train");
    test::write_tiny_corpus(dir() / "corpus", 300);
    test::write_tiny_teacher_and_student(dir());
  }
  static void TearDownTestSuite() {
    delete scratch_;
    scratch_ = nullptr;
  }
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_unavailable_reason();
  }
  static fs::path dir() { return scratch_->path(); }
  static std::string args(const std::string& out, const std::string& extra = "", const std::string& plan = "fp32",
                          const std::string& precision = "fp32") {
    return "pretrain --model-config " + (dir() / "tiny_qwen3.json").string() + " --lr 3e-3 --data " +
           (dir() / "corpus").string() + " --out " + (dir() / out).string() +
           " --tokens " + std::to_string(8 * 6 * 64) +
           " --seq-len 64 --batch 6 --micro-batch 1 --warmup-steps 2 --min-lr 1e-4 --held-out-docs 20"
           " --eval-tokens 256 --eval-every 0 --checkpoint-every 0 --log-every 1000 --device cuda --precision " +
           precision + " --memory-plan " + plan + " " + extra;
  }
  static test::RunResult one(const std::string& env, const std::string& a) {
    return test::run_shell(env + " " + test::cuda_test_binary() + " " + a);
  }
  static test::RunResult ranks(int n, const std::string& a) {
    return test::run_shell(test::mpirun_prefix() + "-x HYBRIDLM_GPU_COLLECTIVES=host -np " + std::to_string(n) + " " +
                           test::cuda_test_binary() + " " + a);
  }
  // Largest differences of run b against run a; exact (bounds 0) or within the bounds.
  static void expect_close(const std::string& a, const std::string& b, double loss_tol, double norm_tol,
                           double weight_tol) {
    const auto sa = test::read_metrics(dir() / a / "metrics.jsonl", "step");
    const auto sb = test::read_metrics(dir() / b / "metrics.jsonl", "step");
    ASSERT_EQ(sa.size(), 8u);
    ASSERT_EQ(sb.size(), sa.size());
    double worst_loss = 0.0, worst_norm = 0.0, worst = 0.0;
    for (size_t i = 0; i < sa.size(); ++i) {
      const double la = sa[i]["loss"], lb = sb[i]["loss"], na = sa[i]["grad_norm"], nb = sb[i]["grad_norm"];
      worst_loss = std::max(worst_loss, std::fabs(la - lb) / std::fabs(la));
      worst_norm = std::max(worst_norm, std::fabs(na - nb) / std::fabs(na));
      EXPECT_LE(std::fabs(la - lb), loss_tol * std::fabs(la)) << b << " step " << i + 1;
      EXPECT_LE(std::fabs(na - nb), norm_tol * std::fabs(na)) << b << " grad norm at step " << i + 1;
    }
    const SafetensorsFile fa = SafetensorsFile::open(dir() / a / "model" / "model.safetensors");
    const SafetensorsFile fb = SafetensorsFile::open(dir() / b / "model" / "model.safetensors");
    ASSERT_EQ(fa.entries().size(), fb.entries().size());
    for (const SafetensorsEntry& e : fa.entries()) {
      const Tensor ta = fa.tensor_f32(e.name), tb = fb.tensor_f32(e.name);
      ASSERT_EQ(ta.numel(), tb.numel()) << e.name;
      for (int64_t i = 0; i < ta.numel(); ++i) worst = std::max(worst, std::fabs(double(ta.f32()[i]) - tb.f32()[i]));
    }
    const double first = sa.front()["loss"], last = sa.back()["loss"];
    std::printf("%s vs %s: largest differences: loss %.3g (relative), grad norm %.3g (relative), weight %.3g; loss "
                "%.4f -> %.4f\n", b.c_str(), a.c_str(), worst_loss, worst_norm, worst, first, last);
    EXPECT_LE(worst, weight_tol) << b;
    EXPECT_GT(first - last, 0.0) << "the loss did not go down";
  }
  static test::ScratchDir* scratch_;
};

test::ScratchDir* GpuDataParallel::scratch_ = nullptr;

}  // namespace

TEST_F(GpuDataParallel, OneRankThroughTheCollectivesEqualsThePlainStep) {
  const test::RunResult plain = one("", args("plain"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const std::string backend : {"nccl", "host"}) {
    const test::RunResult r = one("HYBRIDLM_GPU_COLLECTIVES=" + backend + " HYBRIDLM_BUCKET_ELEMENTS=1000",
                                  args("one_" + backend, "--zero-stage 1"));
    if (backend == "nccl" && r.err.find("built without NCCL") != std::string::npos) continue;
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("data parallel rank 0 of 1, " + backend + " collectives, zero stage 1"), std::string::npos)
        << r.out;
    expect_close("plain", "one_" + backend, 0.0, kOneRankNormTol, 0.0);
  }
}

TEST_F(GpuDataParallel, TwoRanksOnOneGpuEqualOneProcess) {
  if (!test::mpirun_usable()) GTEST_SKIP() << "this build has no MPI or mpirun is not installed";
  if (!fs::exists(dir() / "plain" / "model")) {
    ASSERT_EQ(one("", args("plain")).exit_code, 0);
  }
  const test::RunResult z1 = ranks(2, args("two_z1", "--zero-stage 1"));
  ASSERT_EQ(z1.exit_code, 0) << z1.out << z1.err;
  const test::RunResult z0 = ranks(2, args("two_z0", "--zero-stage 0"));
  ASSERT_EQ(z0.exit_code, 0) << z0.out << z0.err;
  expect_close("plain", "two_z1", kLossTol, kNormTol, kWeightTol);
  expect_close("plain", "two_z0", kLossTol, kNormTol, kWeightTol);
  EXPECT_TRUE(fs::exists(dir() / "two_z1" / "test.json"));
}

TEST_F(GpuDataParallel, TwoRankResumeIsExact) {
  if (!test::mpirun_usable()) GTEST_SKIP() << "this build has no MPI or mpirun is not installed";
  if (!fs::exists(dir() / "two_z1" / "model")) {
    ASSERT_EQ(ranks(2, args("two_z1", "--zero-stage 1")).exit_code, 0);
  }
  const test::RunResult stop = ranks(2, args("two_stop", "--zero-stage 1 --stop-after-steps 4"));
  ASSERT_EQ(stop.exit_code, 0) << stop.out << stop.err;
  const test::RunResult resume = ranks(2, args("two_stop", "--zero-stage 1") + " --resume " +
                                              (dir() / "two_stop").string());
  ASSERT_EQ(resume.exit_code, 0) << resume.out << resume.err;
  expect_close("two_z1", "two_stop", 0.0, 0.0, 0.0);
}

TEST_F(GpuDataParallel, OverlapOnAndOffAreBitIdentical) {
  const std::string buckets = "HYBRIDLM_BUCKET_ELEMENTS=1000 ";
  const auto said = [](const test::RunResult& r, const std::string& on) {
    return r.out.find("gradient sums overlapped with the backward: " + on) != std::string::npos;
  };
  for (const std::string backend : {"nccl", "host"}) {
    std::string names[2];
    for (const std::string on : {"on", "off"}) {
      const std::string name = "overlap_" + backend + "_" + on;
      const test::RunResult r = one(buckets + "HYBRIDLM_GPU_COLLECTIVES=" + backend + " HYBRIDLM_DP_OVERLAP=" + on,
                                    args(name, "--zero-stage 1"));
      if (backend == "nccl" && r.err.find("built without NCCL") != std::string::npos) break;
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_TRUE(said(r, on)) << r.out;
      names[on == "on" ? 0 : 1] = name;
    }
    if (!names[1].empty()) expect_close(names[1], names[0], 0.0, 0.0, 0.0);
  }
  if (!test::mpirun_usable()) GTEST_SKIP() << "this build has no MPI or mpirun is not installed";
  for (const int zero : {1, 0}) {
    for (const std::string on : {"on", "off"}) {
      const std::string name = "overlap_two_z" + std::to_string(zero) + "_" + on;
      const test::RunResult r = test::run_shell(
          buckets + "HYBRIDLM_DP_OVERLAP=" + on + " " + test::mpirun_prefix() +
          "-x HYBRIDLM_GPU_COLLECTIVES=host -x HYBRIDLM_DP_OVERLAP -x HYBRIDLM_BUCKET_ELEMENTS -np 2 " +
          test::cuda_test_binary() + " " + args(name, "--zero-stage " + std::to_string(zero)));
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_TRUE(said(r, on)) << r.out;
    }
    const std::string z = "overlap_two_z" + std::to_string(zero);
    expect_close(z + "_off", z + "_on", 0.0, 0.0, 0.0);
  }
}

TEST_F(GpuDataParallel, PlansThatAreNotShardedAreRefused) {
  for (const std::string plan : {"adam8", "lean"}) {
    const test::RunResult r =
        one("HYBRIDLM_GPU_COLLECTIVES=host", args("refused_" + plan, "", plan, "bf16"));
    EXPECT_EQ(r.exit_code, 2) << plan << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("not sharded"), std::string::npos) << r.err;
  }
}
