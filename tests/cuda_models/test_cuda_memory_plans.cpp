// The memory plans on the GPU (issue #28; docs/memory.md), with the tiny distillation of
// tests/train/test_trainer_fixture.h (4 languages, rows of 64 bytes, B = 4, b = 2), --precision bf16:
// 1. The lean optimizer step (CudaAdamW over bf16 masters and bf16 linear gradients, 8-bit moments; the layout of
//    train/cuda/cuda_bf16_masters.h) against the host
//    AdamW of the same config (the CPU reference of the lean plan), three steps from the same state with the same
//    gradients (the linears' at bf16 values, as the GPU holds them): every weight, every 8-bit code and block scale
//    equal BIT FOR BIT (same fp32 operations, same stochastic-rounding bits: adamw_sr_base(seed, step, name)), and the
//    gradient norm within 1e-12 relative (both fp64 sums of the same squares, in different orders).
// 2. Stop and resume under lean on the GPU: 10 + 10 steps equal 20 straight (losses and model.safetensors bytes);
//    a lean checkpoint resumes under adam8 and an fp32-plan checkpoint under lean (the host converts: docs/memory.md).
// 3. Quality (issue item 3): 300 steps under each memory-saving plan (teacher-bf16, adam8, lean) against the fp32
//    plan (the fp32-master baseline) on the same data, each a free-running trajectory. Bound, per window of 30 steps:
//    |mean loss / mean loss(fp32) − 1| ≤ kWindowBound = 0.10, and every plan learns (last window below the first).
//    Why 10%: the CPU test of adam8 and lean (test_memory_plan.cpp) holds 5% at every step over 30 steps; over 300
//    steps the trajectories separate further (8-bit moments, stochastic rounding and bf16 gradients each perturb
//    every step, as AdamW's sign flips do between any two fp32 implementations), and windows of 30 steps average the
//    per-batch noise. A plan that drops updates (weights stuck under a bf16 ulp), mis-scales the moments or the
//    gradients, or trains on other data misses by far more than 10% within a few windows. The measured worst ratios
//    are printed ([check] lines) for docs/memory.md. It trains on its own corpus of 500 documents per language (300
//    steps of 4 × 64 tokens need ~77k tokens; the fixture's 200 ran out after step 183 on the H200, 2026-12-02).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"
#include "cuda_models/cuda_model_support.h"
#include "models/cuda/cuda_adamw.h"
#include "models/model_train.h"
#include "support/run_binary.h"
#include "train/adamw.h"
#include "train/checkpoint_io.h"
#include "train/cuda/cuda_bf16_masters.h"
#include "train/cuda/cuda_train_device.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

constexpr double kWindowBound = 0.10;  // reasons in the header comment
constexpr int64_t kQualitySteps = 300, kWindow = 30;

bool bytes_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class CudaMemoryPlans : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();
    test::write_tiny_corpus(scratch.path() / "corpus", 200);
    test::write_tiny_teacher_and_student(scratch.path());
  }
  TrainConfig config(const std::string& out, int64_t steps, const std::string& plan) const {
    TrainConfig c = test::tiny_train_config(TrainJob::Distill, scratch.path() / "corpus", scratch.path() / out);
    c.teacher = (scratch.path() / "teacher").string();
    c.student = (scratch.path() / "student").string();
    c.tokens = steps * c.batch_rows * c.seq_len;
    c.eval_every_tokens = 0;  // validation at the start and the end only
    c.device = "cuda";
    c.precision = "bf16";
    c.memory_plan = plan;
    return c;
  }
  static TrainResult run(const TrainConfig& c) {
    CudaTrainDevice device(CudaTrainDeviceOptions{.bf16 = true});
    return train_run(c, {}, &device);
  }
  test::ScratchDir scratch{"cuda-memory-plans"};
};

}  // namespace

// The segmentation fault of 2026-12-01 (H200) was this test's own: it loaded the student with Model::load, whose
// tensors view the read-only mmap of model.safetensors, and the host AdamW of the lean plan rounds the weights to bf16
// in place (cuda-gdb backtrace: AdamW::AdamW, 2026-12-02). The trainer loads students writable
// (model_load_trainable), as here now.
TEST_F(CudaMemoryPlans, LeanOptimizerStepEqualsTheCpuStepBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  Model student = model_load_trainable(scratch.path() / "student");
  const ModelConfig& config = student.config();
  DecoderWeights host_grads = zero_grads_like(config);
  std::vector<AdamWParam> params;
  for (const NamedParameter& p : named_parameters(config, student.mutable_weights(), host_grads))
    params.push_back({p.name, p.value, p.grad, 0});
  AdamWConfig ac;
  ac.state = AdamWStateFormat::Q8;
  ac.master = MasterFormat::Bf16Sr;
  ac.sr_seed = 1234;
  AdamW host({{"all", 1e-3, 0.01, 1e-3}}, params, ac);  // rounds every weight to its nearest bf16 value

  CudaContext& ctx = cuda_context();
  CudaModel weights = CudaModel::upload(student, ctx);
  weights.set_bf16_compute(true);
  cuda_hold_bf16_masters(ctx, weights);
  CudaModel grads = CudaModel::zeros_like(config, ctx);
  cuda_hold_bf16_linear_grads(ctx, grads);
  CudaAdamW device(ctx, weights, grads, 0.9, 0.999, 1e-8, ac.state, ac.master, ac.sr_seed);
  ASSERT_EQ(device.params().size(), host.params().size());
  for (CudaAdamWParam& p : device.params()) {
    p.lr = 1e-3;
    p.weight_decay = 0.01;
  }
  const auto host_index = [&](const std::string& name) {
    for (size_t j = 0; j < host.params().size(); ++j)
      if (host.params()[j].name == name) return j;
    ADD_FAILURE() << "no host parameter " << name;
    return size_t{0};
  };
  size_t bf16_grads = 0, bf16_params = 0;
  for (int step = 1; step <= 3; ++step) {
    // Gradients: deterministic values of a few 1e-2; the linears' rounded to bf16 (the GPU holds them in bf16).
    double sum_sq = 0.0;
    for (const AdamWParam& p : host.params()) {
      float* g = p.grad.f32();
      const bool linear = p.name.find("_proj.weight") != std::string::npos;
      for (int64_t i = 0; i < p.grad.numel(); ++i) {
        float v = 1e-2f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(step) +
                                   static_cast<float>(p.name.size()));
        if (linear) v = bf16_to_f32(f32_to_bf16(v));
        g[i] = v;
        sum_sq += static_cast<double>(v) * v;
      }
    }
    bf16_grads = 0;
    for (const CudaModel::NamedTensor& t : grads.named_tensors()) {
      const Tensor& g = host.params()[host_index(t.name)].grad;
      if (t.tensor->dtype() == DType::BF16) {
        ++bf16_grads;
        cuda_copy(ctx, *t.tensor, g.to(DType::BF16).reshape(t.tensor->shape()));
      } else {
        cuda_copy(ctx, *t.tensor, g.reshape(t.tensor->shape()));
      }
    }
    host.step();
    const double norm = device.step(0.0);  // no clipping: the host step above takes the gradients as they are
    EXPECT_LE(std::abs(norm - std::sqrt(sum_sq)), 1e-12 * std::sqrt(sum_sq)) << "step " << step;
    // Every weight (downloaded: bf16 masters widened) and every 8-bit state, bit for bit.
    DecoderWeights got = zero_grads_like(config), got_grads = zero_grads_like(config);
    std::vector<AdamWParam> got_params;
    for (const NamedParameter& p : named_parameters(config, got, got_grads))
      got_params.push_back({p.name, p.value, p.grad, 0});
    cuda_download_bf16_masters(ctx, weights, got_params);
    size_t compared = 0;
    for (const AdamWParam& p : got_params) {
      const Tensor& want = host.params()[host_index(p.name)].param;
      ASSERT_TRUE(bytes_equal(p.param.contiguous(), want.contiguous())) << "step " << step << ": " << p.name;
      ++compared;
    }
    bf16_params = 0;
    for (size_t i = 0; i < device.params().size(); ++i) {
      const CudaAdamWParam& p = device.params()[i];
      bf16_params += p.param->dtype() == DType::BF16 ? 1 : 0;
      const AdamWQ8State d = device.q8_state(i);
      const AdamWQ8State& h = host.q8_state(host_index(p.name));
      ASSERT_TRUE(d.q_m == h.q_m && d.q_v == h.q_v && d.absmax_m == h.absmax_m && d.absmax_v == h.absmax_v)
          << "step " << step << ": 8-bit state of " << p.name;
    }
    EXPECT_EQ(compared, host.params().size());
  }
  // The layout under test: the linears' masters and gradients in bf16, an untied head's master in bf16 (its gradient
  // stays f32: the LM-head loss writes it), the rest f32. The tiny student has an untied head (models/convert.h).
  EXPECT_GT(bf16_grads, 0u);
  EXPECT_EQ(bf16_params, bf16_grads + (config.tie_word_embeddings ? 0u : 1u));
  std::printf("[check] lean optimizer GPU vs CPU: 3 steps, %zu parameters (%zu bf16 masters with bf16 gradients), "
              "weights and 8-bit states bit-identical\n",
              host.params().size(), bf16_params);
}

TEST_F(CudaMemoryPlans, LeanResumesExactlyAndAcrossPlans) {
  HLM_REQUIRE_CUDA_MODEL();
  const TrainResult straight = run(config("straight", 20, "lean"));
  ASSERT_EQ(straight.status, TrainStatus::Completed) << straight.message;
  TrainConfig first = config("split", 20, "lean");
  first.stop_after_steps = 10;
  const TrainResult a = run(first);
  ASSERT_EQ(a.status, TrainStatus::Stopped) << a.message;
  TrainConfig second = config("split", 20, "lean");
  second.resume = (scratch.path() / "split").string();
  const TrainResult b = run(second);
  ASSERT_EQ(b.status, TrainStatus::Completed) << b.message;
  std::vector<double> split = a.losses;
  split.insert(split.end(), b.losses.begin(), b.losses.end());
  ASSERT_EQ(split.size(), straight.losses.size());
  for (size_t s = 0; s < split.size(); ++s) EXPECT_EQ(split[s], straight.losses[s]) << "step " << s + 1;
  EXPECT_EQ(test::read_text(scratch.path() / "split" / "model" / "model.safetensors"),
            test::read_text(scratch.path() / "straight" / "model" / "model.safetensors"));

  // Across plans: lean → adam8 and fp32 → lean, each stopped at 10 and resumed for 10 under the other plan.
  const std::vector<std::pair<std::string, std::string>> crossings = {{"lean", "adam8"}, {"fp32", "lean"}};
  for (const auto& [from, to] : crossings) {
    const std::string dir = "cross_" + from + "_" + to;
    TrainConfig stop = config(dir, 20, from);
    stop.stop_after_steps = 10;
    ASSERT_EQ(run(stop).status, TrainStatus::Stopped) << dir;
    TrainConfig resume = config(dir, 20, to);
    resume.resume = (scratch.path() / dir).string();
    const TrainResult r = run(resume);
    ASSERT_EQ(r.status, TrainStatus::Completed) << dir << ": " << r.message;
    ASSERT_EQ(r.losses.size(), 10u) << dir;
    for (double l : r.losses) EXPECT_TRUE(std::isfinite(l)) << dir;
    std::printf("[check] resume %s -> %s on the GPU: 10 more steps, last loss %.6f\n", from.c_str(), to.c_str(),
                r.losses.back());
  }
  std::printf("[check] lean resume on the GPU: %zu losses equal, model.safetensors byte-identical\n", split.size());
}

TEST_F(CudaMemoryPlans, EveryPlanTracksTheFp32PlanOver300Steps) {
  HLM_REQUIRE_CUDA_MODEL();
  test::write_tiny_corpus(scratch.path() / "corpus_300", 500);
  std::vector<std::vector<double>> curves;
  const std::vector<std::string> plans = {"fp32", "teacher-bf16", "adam8", "lean"};
  for (const std::string& plan : plans) {
    TrainConfig c = config("quality_" + plan, kQualitySteps, plan);
    c.data = (scratch.path() / "corpus_300").string();
    const TrainResult r = run(c);
    ASSERT_EQ(r.status, TrainStatus::Completed) << plan << ": " << r.message;
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(kQualitySteps)) << plan;
    curves.push_back(r.losses);
  }
  const auto window_mean = [](const std::vector<double>& c, int64_t w) {
    double s = 0.0;
    for (int64_t i = w * kWindow; i < (w + 1) * kWindow; ++i) s += c[static_cast<size_t>(i)];
    return s / static_cast<double>(kWindow);
  };
  const int64_t windows = kQualitySteps / kWindow;
  for (size_t k = 0; k < plans.size(); ++k) {
    double worst = 0.0, worst_step = 0.0;
    for (int64_t w = 0; w < windows; ++w) {
      const double ratio = window_mean(curves[k], w) / window_mean(curves[0], w);
      EXPECT_LE(std::abs(ratio - 1.0), kWindowBound) << plans[k] << " window " << w;
      worst = std::max(worst, std::abs(ratio - 1.0));
    }
    for (int64_t s = 0; s < kQualitySteps; ++s)
      worst_step = std::max(worst_step, std::abs(curves[k][static_cast<size_t>(s)] / curves[0][static_cast<size_t>(s)] - 1.0));
    EXPECT_LT(window_mean(curves[k], windows - 1), window_mean(curves[k], 0)) << plans[k] << " did not learn";
    std::printf("[check] plan %-12s %lld steps: loss window means first %.5f last %.5f (fp32 %.5f -> %.5f); worst "
                "|window ratio - 1| %.4f (bound %.2f), worst single-step |ratio - 1| %.4f (printed only)\n",
                plans[k].c_str(), static_cast<long long>(kQualitySteps), window_mean(curves[k], 0),
                window_mean(curves[k], windows - 1), window_mean(curves[0], 0), window_mean(curves[0], windows - 1),
                worst, kWindowBound, worst_step);
  }
}
