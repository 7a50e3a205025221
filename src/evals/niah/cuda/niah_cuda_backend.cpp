// The CUDA evaluation backend of the NIAH harness (see niah_cuda_backend.h).
#include "evals/niah/cuda/niah_cuda_backend.h"

#include <memory>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_query.h"
#include "infer/cuda/cuda_engine.h"
#include "models/cuda/cuda_model.h"

namespace hlm {

NiahEvalBackend niah_cuda_eval_backend(const Model& model, const std::string& precision) {
  const int64_t kv_element_bytes = niah_kv_element_bytes(precision);  // before anything is uploaded
  auto gpu = std::make_shared<CudaModel>(CudaModel::upload(model, cuda_context()));
  if (precision == "bf16") gpu->drop_fp32_weights();  // weights held once, in bf16 (as `generate --device cuda`)
  NiahEvalBackend b;
  b.make_engine = [gpu](const MemoryPlan& plan) { return make_cuda_engine(*gpu, plan); };
  b.kv_element_bytes = kv_element_bytes;
  b.default_budget_bytes = static_cast<int64_t>(static_cast<double>(cuda_free_memory_bytes()) * 0.9);
  b.keep_alive = gpu;
  return b;
}

}  // namespace hlm
