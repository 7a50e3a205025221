// `--device` of pretrain and distill: name → TrainDevice (contract in train_device_cli.h).
#include "cli/train_device_cli.h"

#include "core/error.h"

#ifdef HLM_WITH_CUDA
#include "train/cuda/cuda_train_device.h"
#endif

namespace hlm {

std::unique_ptr<TrainDevice> train_device_for(const std::string& name, const std::string& precision) {
  HLM_CHECK_INPUT(name == "cpu" || name == "cuda", "--device: '", name, "' is not a device (cpu or cuda)");
  HLM_CHECK_INPUT(precision == "fp32" || precision == "bf16", "--precision: '", precision,
                  "' is not a precision (fp32 or bf16)");
  HLM_CHECK_INPUT(name == "cuda" || precision == "fp32", "--precision bf16 needs --device cuda");
  if (name == "cpu") return nullptr;
#ifdef HLM_WITH_CUDA
  return std::make_unique<CudaTrainDevice>(CudaTrainDeviceOptions{.bf16 = precision == "bf16"});  // input error
                                                                                                  // when no GPU
#else
  throw_input_error("--device cuda: this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
#endif
}

}  // namespace hlm
