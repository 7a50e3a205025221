// train_config_validate's device pairings (train/trainer_config.cpp), on the host only: `--recompute none` is accepted
// with both devices (the GPU keeps activations too since CudaKeptLayer, models/cuda/cuda_model_train.h), an unknown
// recompute mode is still an input error, and `--precision bf16` still needs `--device cuda`.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "train/test_trainer_fixture.h"
#include "train/trainer.h"

using namespace hlm;

namespace {

TrainConfig distill_config(const std::string& device, const std::string& recompute) {
  TrainConfig c = test::tiny_train_config(TrainJob::Distill, "corpus", "out");
  c.teacher = "teacher";
  c.student = "student";
  c.device = device;
  c.recompute = recompute;
  return c;
}

// The input error's message, or "" when validation passes.
std::string validation_error(const TrainConfig& c) {
  try {
    train_config_validate(c);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TrainerConfig, RecomputeNoneIsAcceptedOnEveryDevice) {
  for (const char* device : {"cpu", "cuda"}) {
    for (const char* recompute : {"layer", "none"}) {
      EXPECT_EQ(validation_error(distill_config(device, recompute)), "") << device << " " << recompute;
      TrainConfig pretrain = distill_config(device, recompute);
      pretrain.job = TrainJob::Pretrain;
      pretrain.model_config = "model.json";
      EXPECT_EQ(validation_error(pretrain), "") << "pretrain " << device << " " << recompute;
    }
  }
}

TEST(TrainerConfig, BadRecomputeAndPrecisionPairingsAreInputErrors) {
  EXPECT_NE(validation_error(distill_config("cuda", "all")), "");
  TrainConfig bf16_on_cpu = distill_config("cpu", "none");
  bf16_on_cpu.precision = "bf16";
  EXPECT_NE(validation_error(bf16_on_cpu).find("--precision bf16 needs --device cuda"), std::string::npos);
  TrainConfig bf16_on_gpu = distill_config("cuda", "none");
  bf16_on_gpu.precision = "bf16";
  EXPECT_EQ(validation_error(bf16_on_gpu), "");
}
