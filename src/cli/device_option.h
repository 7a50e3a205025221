// `--device cpu|cuda` of the commands that run a model (run, eval, generate, niah): one check, made before anything is
// loaded. Input errors (exit 2): a name other than cpu or cuda; cuda in a build without the CUDA backend; cuda where
// no usable GPU is present (the reason from backend/cuda/device_query.h).
#pragma once
#include <string>

namespace hlm {

void check_device_option(const std::string& device);

}  // namespace hlm
