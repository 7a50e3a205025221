// Held-out evaluation on the GPU (train/cuda/cuda_eval.h, TrainDevice::evaluate_pass) against the CPU evaluation
// (train/eval.h): the per-language sums of one pass on every golden model and on a distillation pair, the whole
// evaluation through a CudaTrainDevice for pretraining and distillation, and that evaluating leaves the device's
// training state alone.
//
// Bounds and their reasons (the two sides add the per-token values in the same order into fp64, so they differ only
// by the per-token values; those differ by the forward's summation order, ≤ ~5e-6 relative in the final hidden states
// on these models (test_cuda_model_forward.cpp), and the LM head's fp32 logits, docs/cuda.md):
// - CE and teacher CE, per language (sums and means): kCeBound = 2e-5 relative. A per-token CE is log Σ exp z − z_y
//   with |z| ≲ 1 on these random models, so a relative change ε in the hidden states moves it by ≲ ε nats out of
//   ~5.5 (log 256); the CUDA CE end to end measured ≤ 1.7e-6 relative (docs/cuda.md). A wrong target, language id or
//   head (tied/untied, Granite's divisor) misses by O(1e-2) or more.
// - KL(teacher ‖ student), per language: kKlBound = 2e-4 relative plus kKlFloor = 1e-7 nats absolute per token. The
//   KL is a small difference of two nearly equal distributions (~1e-2..1e-1 nats per token here), so the same
//   absolute per-token error is a larger relative one; the trainer's step-1 per-language KL means agreed within 1e-4
//   with the same pieces (test_cuda_trainer.cpp). A wrong side (KL(S‖T)) or τ misses by far more.
// - Token counts: exactly equal (they come from the batch, on the host, either way).
// - Evaluating between steps must not change the device's training: a step after evaluate_pass gives bit-identical
//   loss, gradient norm and weights to the same step without it (the GPU step is deterministic, no float atomics).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "data/data_stream.h"
#include "data/tokenizer.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "models/model_train.h"
#include "support/run_binary.h"
#include "train/adamw.h"
#include "train/cuda/cuda_eval.h"
#include "train/checkpoint_io.h"
#include "train/cuda/cuda_train_device.h"
#include "train/eval.h"
#include "train/grad_utils.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

constexpr double kCeBound = 2e-5;  // reasons in the header comment
constexpr double kKlBound = 2e-4;
constexpr double kKlFloor = 1e-7;  // nats per token
constexpr size_t kLanguages = 4;   // slots of the sums; the mixed batch uses ids 0..2, slot 3 must stay exactly 0

double rel(double gpu, double cpu) { return std::abs(gpu - cpu) / std::max(std::abs(cpu), 1e-30); }

// Three rows of 24 tokens; documents of 5, 9, 1, 7, 2, 13, 11, 6, 18 tokens (a document may cross no row boundary:
// rows 0..23, 24..47, 48..71), languages cycling 0, 1, 2 per document, targets as the packer makes them (the next id
// in the document, none for a document's last token), one more target dropped to −100 inside a document.
PackedBatch mixed_batch(int64_t vocab) {
  PackedBatch b;
  b.rows = 3;
  const std::vector<int64_t> lengths = {5, 9, 1, 7, 2, 13, 11, 6, 18};
  uint32_t state = 4242u;
  int16_t lang = 0;
  for (int64_t length : lengths) {
    std::vector<int32_t> seq;
    for (int64_t t = 0; t < length; ++t) {
      state = state * 1664525u + 1013904223u;
      seq.push_back(static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(vocab)));
    }
    for (int64_t t = 0; t < length; ++t) {
      b.targets.push_back(t + 1 < length ? seq[static_cast<size_t>(t + 1)] : kIgnoreTarget);
      b.language.push_back(lang);
    }
    b.batch.add_sequence(seq);
    lang = static_cast<int16_t>((lang + 1) % 3);
  }
  b.targets[3] = kIgnoreTarget;
  return b;
}

struct SumsCheck {
  double worst_ce = 0.0, worst_kl = 0.0;
};

// Per language: counts equal, CE (and with a teacher, teacher CE and KL) within the bounds; unused slots exactly 0.
void expect_sums_near(const EvalSums& cpu, const EvalSums& gpu, bool teacher, const std::string& label,
                      SumsCheck& check) {
  ASSERT_EQ(gpu.num_languages(), cpu.num_languages()) << label;
  for (size_t l = 0; l < cpu.num_languages(); ++l) {
    EXPECT_EQ(gpu.tokens[l], cpu.tokens[l]) << label << " language " << l;
    EXPECT_EQ(gpu.ce_tokens[l], cpu.ce_tokens[l]) << label << " language " << l;
    if (cpu.tokens[l] == 0) {
      EXPECT_EQ(gpu.ce[l], 0.0) << label << " language " << l;
      EXPECT_EQ(gpu.kl[l], 0.0) << label << " language " << l;
      EXPECT_EQ(gpu.teacher_ce[l], 0.0) << label << " language " << l;
      continue;
    }
    ASSERT_TRUE(std::isfinite(gpu.ce[l])) << label << " language " << l;
    EXPECT_LE(rel(gpu.ce[l], cpu.ce[l]), kCeBound) << label << " language " << l << ": gpu " << gpu.ce[l] << " cpu "
                                                   << cpu.ce[l];
    check.worst_ce = std::max(check.worst_ce, rel(gpu.ce[l], cpu.ce[l]));
    if (!teacher) {
      EXPECT_EQ(gpu.kl[l], 0.0) << label;
      EXPECT_EQ(gpu.teacher_ce[l], 0.0) << label;
      continue;
    }
    EXPECT_LE(rel(gpu.teacher_ce[l], cpu.teacher_ce[l]), kCeBound) << label << " language " << l;
    check.worst_ce = std::max(check.worst_ce, rel(gpu.teacher_ce[l], cpu.teacher_ce[l]));
    EXPECT_GT(cpu.kl[l], 0.0) << label << " language " << l;  // teacher and student differ
    EXPECT_LE(std::abs(gpu.kl[l] - cpu.kl[l]),
              kKlBound * std::abs(cpu.kl[l]) + kKlFloor * static_cast<double>(cpu.tokens[l]))
        << label << " language " << l << ": gpu " << gpu.kl[l] << " cpu " << cpu.kl[l];
    check.worst_kl = std::max(check.worst_kl, rel(gpu.kl[l], cpu.kl[l]));
  }
}

// One pass over the mixed batch on each side.
void expect_pass_match(Model& model, Model* teacher, const std::string& label) {
  const PackedBatch batch = mixed_batch(model.config().vocab_size);
  EvalSums cpu(kLanguages), gpu(kLanguages);
  eval_pass_sums(model, teacher, batch, cpu);
  CudaContext& ctx = cuda_context();
  CudaModel gpu_model = CudaModel::upload(model, ctx);
  std::optional<CudaModel> gpu_teacher;
  if (teacher != nullptr) gpu_teacher.emplace(CudaModel::upload(*teacher, ctx));
  cuda_eval_pass(ctx, gpu_model, gpu_teacher ? &*gpu_teacher : nullptr, batch, gpu);
  SumsCheck check;
  expect_sums_near(cpu, gpu, teacher != nullptr, label, check);
  // A second pass adds onto the sums (the evaluation's passes accumulate): exactly twice the first, token by token
  // in the same order, up to the one rounding of each addition.
  EvalSums twice = gpu;
  cuda_eval_pass(ctx, gpu_model, gpu_teacher ? &*gpu_teacher : nullptr, batch, twice);
  for (size_t l = 0; l < kLanguages; ++l) {
    EXPECT_EQ(twice.tokens[l], 2 * gpu.tokens[l]) << label;
    EXPECT_NEAR(twice.ce[l], 2 * gpu.ce[l], 1e-12 * std::abs(gpu.ce[l]) + 1e-300) << label;
  }
  std::printf("[check] cuda_eval pass %s%s: ce worst rel=%.3g (bound %.0e), kl worst rel=%.3g (bound %.0e)\n",
              label.c_str(), teacher ? " with teacher" : "", check.worst_ce, kCeBound, check.worst_kl, kKlBound);
}

// A host optimizer for a CudaTrainDevice: two groups (decay / no decay), lr 1e-3, as test_cuda_train_step.cpp.
struct HostTraining {
  DecoderWeights grads;
  std::unique_ptr<AdamW> optimizer;
  explicit HostTraining(Model& student) {
    grads = zero_grads_like(student.config());
    std::vector<AdamWParam> params;
    std::vector<AdamWGroup> groups{{"decay", 1e-3, 0.01, 1e-3}, {"no_decay", 1e-3, 0.0, 1e-3}};
    for (const NamedParameter& p : named_parameters(student.config(), student.mutable_weights(), grads))
      params.push_back({p.name, p.value, p.grad, default_weight_decay(p.name) ? 0 : 1});
    optimizer = std::make_unique<AdamW>(std::move(groups), std::move(params));
  }
};

class CudaEvalTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();
    test::write_tiny_corpus(scratch.path() / "corpus", 200);
    test::write_tiny_teacher_and_student(scratch.path());
  }
  HeldOutSet held_out(Split split) const {
    const Corpus corpus = Corpus::open(scratch.path() / "corpus");
    const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load("bytes");
    DataConfig data;
    data.seq_len = 64;
    data.held_out_docs = 20;
    data.eval_tokens_per_language = 256;
    return held_out_set(corpus, *tokenizer, data, split);
  }
  // Loads the job's student (distill: the converted student, writable as the trainer loads it: Model::load maps the
  // safetensors read-only, and sync_to_host writes into the weights; pretrain: a fresh tiny qwen3) and teacher.
  Model student(TrainJob job) const {
    if (job == TrainJob::Distill) return model_load_trainable(scratch.path() / "student");
    return Model::create(load_model_config(scratch.path() / "tiny_qwen3.json"), 11);
  }
  void compare_evaluation(TrainJob job) {
    const char* name = job == TrainJob::Distill ? "distill" : "pretrain";
    Model host = student(job);
    std::optional<Model> teacher;
    if (job == TrainJob::Distill) teacher.emplace(Model::load(scratch.path() / "teacher"));
    HostTraining training(host);
    CudaTrainDevice device;
    device.attach(host, teacher ? &*teacher : nullptr, *training.optimizer);
    for (Split split : {Split::Valid, Split::Test}) {
      const HeldOutSet set = held_out(split);
      const EvalResult cpu = evaluate(host, teacher ? &*teacher : nullptr, set, 2);
      const EvalResult gpu = evaluate_with(
          [&](const PackedBatch& batch, EvalSums& sums) { device.evaluate_pass(batch, sums); }, teacher.has_value(),
          set, 2);
      ASSERT_EQ(gpu.languages.size(), cpu.languages.size());
      double worst_ce = 0.0, worst_kl = 0.0;
      for (size_t l = 0; l < cpu.languages.size(); ++l) {
        const LanguageEval &c = cpu.languages[l], &g = gpu.languages[l];
        EXPECT_EQ(g.code, c.code);
        EXPECT_EQ(g.tokens, c.tokens) << c.code;
        EXPECT_EQ(g.ce_tokens, c.ce_tokens) << c.code;
        EXPECT_LE(rel(g.ce, c.ce), kCeBound) << name << " " << c.code << ": gpu " << g.ce << " cpu " << c.ce;
        worst_ce = std::max(worst_ce, rel(g.ce, c.ce));
        ASSERT_EQ(g.kl.has_value(), c.kl.has_value()) << c.code;
        ASSERT_EQ(g.teacher_ce.has_value(), c.teacher_ce.has_value()) << c.code;
        if (!c.kl) continue;
        EXPECT_LE(rel(*g.teacher_ce, *c.teacher_ce), kCeBound) << name << " " << c.code;
        EXPECT_LE(std::abs(*g.kl - *c.kl), kKlBound * std::abs(*c.kl) + kKlFloor)
            << name << " " << c.code << ": gpu " << *g.kl << " cpu " << *c.kl;
        worst_ce = std::max(worst_ce, rel(*g.teacher_ce, *c.teacher_ce));
        worst_kl = std::max(worst_kl, rel(*g.kl, *c.kl));
      }
      EXPECT_LE(rel(gpu.mean_ce, cpu.mean_ce), kCeBound);
      std::printf("[check] cuda_eval %s %s (%zu languages): ce worst rel=%.3g (bound %.0e), kl worst rel=%.3g "
                  "(bound %.0e); mean ce cpu %.8f gpu %.8f\n",
                  name, split == Split::Valid ? "valid" : "test", cpu.languages.size(), worst_ce, kCeBound, worst_kl,
                  kKlBound, cpu.mean_ce, gpu.mean_ce);
    }
  }
  // A step after an evaluation pass equals the step without it, bit for bit (loss, norm, weights after sync).
  void expect_evaluation_leaves_training_alone(TrainJob job) {
    const HeldOutSet set = held_out(Split::Valid);
    const PackedBatch& batch = set.per_language[0];  // 4 rows of 64: one step of 2 micro-batches of 2 rows
    const size_t languages = set.languages.size();
    std::optional<Model> teacher;
    if (job == TrainJob::Distill) teacher.emplace(Model::load(scratch.path() / "teacher"));
    Model plain_host = student(job), evaluated_host = student(job);
    HostTraining plain_training(plain_host), evaluated_training(evaluated_host);
    double plain_norm = 0.0, evaluated_norm = 0.0;
    BatchLoss plain, evaluated;
    {
      CudaTrainDevice device;
      device.attach(plain_host, teacher ? &*teacher : nullptr, *plain_training.optimizer);
      plain = device.step(batch, 2, 1.0, 1.0, &plain_norm, languages);
      device.sync_to_host();
    }
    {
      CudaTrainDevice device;
      device.attach(evaluated_host, teacher ? &*teacher : nullptr, *evaluated_training.optimizer);
      EvalSums sums(languages);
      device.evaluate_pass(set.per_language[1], sums);  // between attach and the step, as validation at step 0
      evaluated = device.step(batch, 2, 1.0, 1.0, &evaluated_norm, languages);
      device.evaluate_pass(set.per_language[2], sums);  // and after it, before the sync
      device.sync_to_host();
      EXPECT_GT(sums.tokens[1], 0);
    }
    EXPECT_EQ(evaluated.loss, plain.loss);
    EXPECT_EQ(evaluated_norm, plain_norm);
    EXPECT_EQ(evaluated_training.optimizer->step_count(), plain_training.optimizer->step_count());
    size_t compared = 0;
    const std::vector<AdamWParam>& a = plain_training.optimizer->params();
    const std::vector<AdamWParam>& b = evaluated_training.optimizer->params();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].param.numel(), b[i].param.numel()) << a[i].name;
      EXPECT_EQ(std::memcmp(a[i].param.f32(), b[i].param.f32(), static_cast<size_t>(a[i].param.numel()) * 4), 0)
          << a[i].name;
      EXPECT_EQ(std::memcmp(plain_training.optimizer->exp_avg(i).f32(), evaluated_training.optimizer->exp_avg(i).f32(),
                            static_cast<size_t>(a[i].param.numel()) * 4),
                0)
          << a[i].name;
      ++compared;
    }
    std::printf("[check] cuda_eval %s: a step with evaluation passes around it equals the plain step (loss %.8f, "
                "norm %.6g, %zu parameters and moments bit-identical)\n",
                job == TrainJob::Distill ? "distill" : "pretrain", plain.loss, plain_norm, compared);
  }
  test::ScratchDir scratch{"cuda-eval"};
};

}  // namespace

TEST(CudaEvalPass, Qwen3Tied) {
  HLM_REQUIRE_CUDA_MODEL();
  Model model = Model::load(test::cuda_golden_dir("qwen3_tied"));
  expect_pass_match(model, nullptr, "qwen3_tied");
}

TEST(CudaEvalPass, Qwen3Untied) {
  HLM_REQUIRE_CUDA_MODEL();
  Model model = Model::load(test::cuda_golden_dir("qwen3_untied"));
  expect_pass_match(model, nullptr, "qwen3_untied");
}

TEST(CudaEvalPass, GraniteLogitsDivisor) {
  HLM_REQUIRE_CUDA_MODEL();
  Model model = Model::load(test::cuda_golden_dir("granite"));
  expect_pass_match(model, nullptr, "granite");
}

TEST(CudaEvalPass, OlmoHybrid) {
  HLM_REQUIRE_CUDA_MODEL();
  Model model = Model::load(test::cuda_golden_dir("olmo_hybrid_tiny"));
  expect_pass_match(model, nullptr, "olmo_hybrid_tiny");
}

// Distillation: qwen3_untied as the teacher of its qwen3_hybrid student (GDN layers 0 and 2, as the forward test).
TEST(CudaEvalPass, ConvertedStudentWithTeacher) {
  HLM_REQUIRE_CUDA_MODEL();
  Model teacher = Model::load(test::cuda_golden_dir("qwen3_untied"));
  Model student = convert_to_hybrid(teacher, {1}, {.neg_eigval = true, .seed = 3});
  expect_pass_match(student, &teacher, "qwen3_untied -> qwen3_hybrid");
}

// A target outside the vocabulary is the CPU's input error on the GPU too (checked before anything runs).
TEST(CudaEvalPass, TargetOutsideTheVocabularyIsAnInputError) {
  HLM_REQUIRE_CUDA_MODEL();
  Model model = Model::load(test::cuda_golden_dir("qwen3_tied"));
  PackedBatch batch = mixed_batch(model.config().vocab_size);
  batch.targets[5] = static_cast<int32_t>(model.config().vocab_size);
  CudaModel gpu = CudaModel::upload(model, cuda_context());
  EvalSums sums(kLanguages);
  try {
    cuda_eval_pass(cuda_context(), gpu, nullptr, batch, sums);
    ADD_FAILURE() << "no error for a target outside the vocabulary";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
}

TEST_F(CudaEvalTrainer, PretrainEvaluationMatchesTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  compare_evaluation(TrainJob::Pretrain);
}

TEST_F(CudaEvalTrainer, DistillEvaluationMatchesTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  compare_evaluation(TrainJob::Distill);
}

TEST_F(CudaEvalTrainer, PretrainEvaluationLeavesTrainingAlone) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_evaluation_leaves_training_alone(TrainJob::Pretrain);
}

TEST_F(CudaEvalTrainer, DistillEvaluationLeavesTrainingAlone) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_evaluation_leaves_training_alone(TrainJob::Distill);
}
