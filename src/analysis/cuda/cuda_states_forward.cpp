// The GPU model forward of align (contract in cuda_states_forward.h).
#include "analysis/cuda/cuda_states_forward.h"

#include <algorithm>
#include <memory>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_query.h"
#include "core/error.h"
#include "models/cuda/cuda_model.h"

namespace hlm {

StatesForward make_cuda_states_forward(const Model& model) {
  HLM_CHECK_INPUT(cuda_available(), "--device cuda: no usable GPU (", cuda_unavailable_reason(), ")");
  auto gpu = std::make_shared<CudaModel>(CudaModel::upload(model, cuda_context()));
  return [gpu](const TokenBatch& batch, const std::vector<CapturePoint>& points, const Capture& capture) {
    const CaptureWanted wanted = [&points](CapturePoint point, int layer) {
      return layer >= 0 && std::find(points.begin(), points.end(), point) != points.end();
    };
    gpu->forward(batch, {}, capture, wanted);
  };
}

}  // namespace hlm
