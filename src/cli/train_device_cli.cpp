// `--device` of pretrain and distill: name → TrainDevice (contract in train_device_cli.h).
#include "cli/train_device_cli.h"

#include "core/error.h"

#ifdef HLM_WITH_CUDA
#include "backend/cuda/cuda_device_select.h"
#include "dist/communicator.h"
#include "models/model_train.h"
#include "train/cuda/cuda_train_device.h"
#include "train/lm_head_chunking_text.h"
#endif

namespace hlm {

std::unique_ptr<TrainDevice> train_device_for(const std::string& name, const std::string& precision,
                                              const std::string& recompute, bool cuda_graphs) {
  HLM_CHECK_INPUT(name == "cpu" || name == "cuda", "--device: '", name, "' is not a device (cpu or cuda)");
  if (name == "cpu") return nullptr;
#ifdef HLM_WITH_CUDA
  // Several ranks of a launcher on one node: rank i uses GPU i % (visible GPUs) (docs/distributed.md).
  const LaunchInfo launch = launch_info_from_env();
  if (launch.launched) cuda_context_select_for_local_rank(launch.local_rank);
  // An input error when no usable GPU is present.
  return std::make_unique<CudaTrainDevice>(
      CudaTrainDeviceOptions{.bf16 = precision == "bf16", .recompute = recompute_from_name(recompute),
                             .cuda_graphs = cuda_graphs});
#else
  (void)cuda_graphs;
  throw_input_error("--device cuda: this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
#endif
}

std::unique_ptr<TrainDevice> train_device_for(const TrainConfig& config) {
  std::unique_ptr<TrainDevice> device = train_device_for(config.device, config.precision, config.recompute);
#ifdef HLM_WITH_CUDA
  // A chunking with --device cpu is refused by train_config_validate, with the other pairings.
  if (device != nullptr && config.loss_chunking != "default")
    static_cast<CudaTrainDevice&>(*device).set_loss_chunking(parse_lm_head_chunking(config.loss_chunking));
#endif
  return device;
}

}  // namespace hlm
