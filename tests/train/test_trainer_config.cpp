// train_config_validate's device pairings (train/trainer_config.cpp), on the host only: `--recompute none` is accepted
// with both devices (the GPU keeps activations too since CudaKeptLayer, models/cuda/cuda_model_train.h), an unknown
// recompute mode is still an input error, `--precision bf16` still needs `--device cuda`, and so does a
// `--loss-chunking` other than default (its form checked first); the chunking is described, saved and read back.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
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

TEST(TrainerConfig, LossChunkingNeedsTheGpuAndAValidForm) {
  for (const char* device : {"cpu", "cuda"}) EXPECT_EQ(validation_error(distill_config(device, "layer")), "") << device;
  TrainConfig on_gpu = distill_config("cuda", "none");
  for (const char* text : {"2048xfull", "4096x4096", "16x100"}) {
    on_gpu.loss_chunking = text;
    EXPECT_EQ(validation_error(on_gpu), "") << text;
  }
  TrainConfig on_cpu = distill_config("cpu", "layer");
  on_cpu.loss_chunking = "2048xfull";
  EXPECT_NE(validation_error(on_cpu).find("--loss-chunking 2048xfull needs --device cuda"), std::string::npos);
  for (const char* bad : {"full", "2048", "0xfull", "2048x0", "x4096", "2048xFULL", "-1x4096", ""}) {
    on_gpu.loss_chunking = bad;
    EXPECT_NE(validation_error(on_gpu).find("expected ROWSxCOLS or ROWSxfull"), std::string::npos) << "'" << bad << "'";
  }
}

TEST(TrainerConfig, LossChunkingIsDescribedSavedAndReadBack) {
  TrainConfig c = distill_config("cuda", "none");
  EXPECT_EQ(c.loss_chunking, "default");
  EXPECT_EQ(train_config_describe(c).find("loss tiles"), std::string::npos);  // the default adds no line
  c.loss_chunking = "2048xfull";
  EXPECT_NE(train_config_describe(c).find("loss tiles   2048 logits rows by the whole vocabulary"), std::string::npos)
      << train_config_describe(c);
  c.loss_chunking = "1024x8192";
  EXPECT_NE(train_config_describe(c).find("1024 logits rows by 8192 vocabulary columns"), std::string::npos);
  const nlohmann::json j = train_config_to_json(c);
  EXPECT_EQ(j["loss_chunking"], "1024x8192");
  EXPECT_EQ(train_config_from_json(j, "test").loss_chunking, "1024x8192");
  nlohmann::json old = j;  // a config saved before the setting existed reads as the default
  old.erase("loss_chunking");
  EXPECT_EQ(train_config_from_json(old, "test").loss_chunking, "default");
}
