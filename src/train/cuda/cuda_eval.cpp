// Held-out evaluation on the GPU (contracts in cuda_eval.h).
#include "train/cuda/cuda_eval.h"

#include <optional>
#include <vector>

#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_query.h"
#include "core/error.h"
#include "data/data_stream.h"
#include "layers/cuda/cuda_linear.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"

namespace hlm {

namespace {

// ce [N] ← per-token CE of `hidden` against `targets` (device, checked on the host), no weights, no gradient.
void cross_entropy(CudaContext& ctx, CudaTensor& ce, const CudaTensor& hidden, const CudaModel& model,
                   const CudaTensor& targets) {
  const int64_t N = ce.numel();
  const size_t bytes = lm_head_cross_entropy_cuda_workspace_bytes(N, model.config().vocab_size);
  CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
  CudaTensor result = cuda_scratch_bytes(ctx, sizeof(TokenLossCudaResult));
  CudaTensor hidden16;  // the bf16 rounding of hidden in the bf16 compute mode
  lm_head_cross_entropy_cuda(ctx.blaslt(), ce.data<float>(), static_cast<TokenLossCudaResult*>(result.raw()),
                             hidden.data<float>(), N, model.lm_head_for(hidden.data<float>(), N, hidden16),
                             targets.data<int32_t>(), nullptr, nullptr,
                             LmHeadCudaChunking{}, ws.raw(), bytes, nullptr);
}

// Downloads the per-token values [N] and adds them to `sums` in token order (waits for the stream).
void add_values(CudaContext& ctx, std::vector<double>& sums, const CudaTensor& values, const PackedBatch& batch,
                std::vector<float>& host) {
  host.resize(static_cast<size_t>(values.numel()));
  cuda_copy_to_host(ctx, host.data(), values.raw(), host.size() * sizeof(float));
  eval_sums_add(sums, host.data(), batch);
}

}  // namespace

void cuda_eval_pass(CudaContext& ctx, CudaModel& model, CudaModel* teacher, const PackedBatch& batch,
                    EvalSums& sums) {
  ctx.make_current();
  const int64_t N = batch.batch.total_tokens();
  const int64_t V = model.config().vocab_size;
  if (teacher != nullptr)
    HLM_CHECK_INPUT(teacher->config().vocab_size == V, "teacher vocabulary (", teacher->config().vocab_size,
                    ") differs from the model's (", V, ")");

  for (size_t t = 0; t < batch.targets.size(); ++t)  // the CPU's input error (a kernel could only flag it)
    HLM_CHECK_INPUT(batch.targets[t] < V, "target ", batch.targets[t], " at token ", t,
                    " is outside the vocabulary (V=", V, ")");
  eval_sums_count(batch, sums);  // checks the batch's targets and language ids too

  CudaTensor targets = CudaTensor::empty(ctx, {N}, DType::I32);
  cuda_copy_to_device(ctx, targets.raw(), batch.targets.data(), batch.targets.size() * sizeof(int32_t));
  CudaTensor values = CudaTensor::empty(ctx, {N});
  std::vector<float> host;

  const CudaTensor hidden = model.forward_final_hidden(batch.batch);
  cross_entropy(ctx, values, hidden, model, targets);
  add_values(ctx, sums.ce, values, batch, host);  // 0 for tokens without a target
  if (teacher != nullptr) {
    const CudaTensor teacher_hidden = teacher->forward_final_hidden(batch.batch);
    cross_entropy(ctx, values, teacher_hidden, *teacher, targets);
    add_values(ctx, sums.teacher_ce, values, batch, host);
    const size_t bytes = lm_head_forward_kl_cuda_workspace_bytes(N, V);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    CudaTensor result = cuda_scratch_bytes(ctx, sizeof(TokenLossCudaResult));
    CudaTensor teacher16, student16;
    lm_head_forward_kl_cuda(ctx.blaslt(), values.data<float>(), static_cast<TokenLossCudaResult*>(result.raw()),
                            teacher_hidden.data<float>(), teacher->lm_head_for(teacher_hidden.data<float>(), N, teacher16),
                            hidden.data<float>(), model.lm_head_for(hidden.data<float>(), N, student16), N, 1.0,
                            nullptr, nullptr, LmHeadCudaChunking{}, ws.raw(), bytes);
    add_values(ctx, sums.kl, values, batch, host);
  }
}

EvalResult cuda_evaluate(const Model& model, const Model* teacher, const HeldOutSet& set, int64_t rows_per_pass) {
  HLM_CHECK_INPUT(cuda_available(), "--device cuda: no usable GPU (", cuda_unavailable_reason(), ")");
  if (teacher != nullptr)
    HLM_CHECK_INPUT(teacher->config().vocab_size == model.config().vocab_size, "teacher vocabulary (",
                    teacher->config().vocab_size, ") differs from the model's (", model.config().vocab_size, ")");
  CudaContext& ctx = cuda_context();
  ctx.make_current();
  CudaModel gpu_model = CudaModel::upload(model, ctx);
  std::optional<CudaModel> gpu_teacher;
  if (teacher != nullptr) gpu_teacher.emplace(CudaModel::upload(*teacher, ctx));
  return evaluate_with(
      [&](const PackedBatch& batch, EvalSums& sums) {
        cuda_eval_pass(ctx, gpu_model, gpu_teacher ? &*gpu_teacher : nullptr, batch, sums);
      },
      teacher != nullptr, set, rows_per_pass);
}

}  // namespace hlm
