// `--device cpu|cuda`: the check shared by the model-running commands (contract in device_option.h).
#include "cli/device_option.h"

#include "core/error.h"

#ifdef HLM_WITH_CUDA
#include "backend/cuda/device_query.h"
#endif

namespace hlm {

void check_device_option(const std::string& device) {
  HLM_CHECK_INPUT(device == "cpu" || device == "cuda", "--device: '", device, "' is not a device (cpu or cuda)");
  if (device == "cpu") return;
#ifdef HLM_WITH_CUDA
  HLM_CHECK_INPUT(cuda_available(), "--device cuda: no usable GPU (", cuda_unavailable_reason(), ")");
#else
  throw_input_error("--device cuda: this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
#endif
}

}  // namespace hlm
