// The TrainDevice behind `pretrain|distill --device NAME` (train/train_device.h): nullptr for "cpu"; for "cuda" the
// GPU trainer (train/cuda/cuda_train_device.h) in builds with the CUDA backend. Input errors (exit 2): an unknown
// name, a build without CUDA, no usable GPU.
#pragma once
#include <memory>
#include <string>

#include "train/train_device.h"

namespace hlm {

// precision: "fp32", or "bf16" (the CUDA trainer's bf16 compute mode; an input error on the CPU).
std::unique_ptr<TrainDevice> train_device_for(const std::string& name, const std::string& precision = "fp32");

}  // namespace hlm
