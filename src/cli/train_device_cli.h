// The TrainDevice behind `pretrain|distill --device NAME` (train/train_device.h): nullptr for "cpu"; for "cuda" the
// GPU trainer (train/cuda/cuda_train_device.h) in builds with the CUDA backend. Input errors (exit 2): an unknown
// name, a build without CUDA, no usable GPU.
#pragma once
#include <memory>
#include <string>

#include "train/train_device.h"
#include "train/trainer.h"

namespace hlm {

// precision: "bf16" turns on the CUDA trainer's bf16 compute mode; recompute: "none" keeps every layer's activations
// on the GPU (TrainConfig::recompute). Their values and their pairing with the device are checked with the rest of
// the settings (train_config_validate). cuda_graphs: the CUDA trainer replays captured steps where it can
// (CudaTrainDeviceOptions::cuda_graphs; `hybridlm synth --cuda-graphs`).
std::unique_ptr<TrainDevice> train_device_for(const std::string& name, const std::string& precision = "fp32",
                                              const std::string& recompute = "layer", bool cuda_graphs = false);

// The device of a resolved run: its device, precision and recompute as above, and on the GPU its --loss-chunking
// ("default": the loss's own, or HLM_LM_HEAD_CHUNKING where set; CudaTrainDevice::set_loss_chunking).
std::unique_ptr<TrainDevice> train_device_for(const TrainConfig& config);

}  // namespace hlm
