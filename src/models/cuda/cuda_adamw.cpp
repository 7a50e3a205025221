// CudaAdamW: pairing by name, then norm → clip scale → one fused multi-tensor AdamW launch (contract in cuda_adamw.h).
#include "models/cuda/cuda_adamw.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "layers/cuda/cuda_linear.h"
#include "ops/adamw/adamw_cuda.h"
#include "ops/adamw/grad_norm_cuda.h"

namespace hlm {

CudaAdamW::CudaAdamW(CudaContext& ctx, CudaModel& weights, CudaModel& grads, double beta1, double beta2, double eps)
    : ctx_(&ctx), beta1_(beta1), beta2_(beta2), eps_(eps) {
  std::vector<CudaModel::NamedTensor> w = weights.named_tensors();
  std::vector<CudaModel::NamedTensor> g = grads.named_tensors();
  HLM_CHECK(w.size() == g.size(), "CudaAdamW: ", w.size(), " weights but ", g.size(), " gradients");
  for (size_t i = 0; i < w.size(); ++i) {
    HLM_CHECK(w[i].name == g[i].name && w[i].tensor->shape() == g[i].tensor->shape(), "CudaAdamW: weight ",
              w[i].name, " does not match gradient ", g[i].name);
    params_.push_back({w[i].name, w[i].tensor, g[i].tensor, 0.0, 0.0});
    for (std::vector<CudaTensor>* state : {&exp_avg_, &exp_avg_sq_}) {
      state->push_back(CudaTensor::empty(ctx, w[i].tensor->shape()));
      HLM_CUDA_CHECK(cudaMemsetAsync(state->back().raw(), 0, state->back().nbytes(), ctx.stream()));
    }
  }
  norm_ = CudaTensor::empty(ctx, {1}, DType::I64);  // 8 bytes: one double
  scale_ = CudaTensor::empty(ctx, {1});
  bf16_.assign(params_.size(), nullptr);
  const size_t table_bytes = adamw_multi_step_cuda_workspace_bytes(params_.size());
  table_ = cuda_scratch_bytes(ctx, table_bytes);
  staging_.resize(table_bytes);
}

void CudaAdamW::set_bf16_copies(const std::vector<CudaModel::Bf16Copy>& copies) {
  bf16_.assign(params_.size(), nullptr);
  for (const CudaModel::Bf16Copy& c : copies) {
    const auto it = std::find_if(params_.begin(), params_.end(),
                                 [&](const CudaAdamWParam& p) { return p.param == c.weight; });
    HLM_CHECK(it != params_.end() && c.copy != nullptr, "CudaAdamW::set_bf16_copies: a bf16 copy of a tensor that is "
              "not a parameter");
    bf16_[static_cast<size_t>(it - params_.begin())] = c.copy;
  }
  writes_bf16_ = true;
}

void CudaAdamW::set_state(size_t i, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  HLM_CHECK(i < params_.size(), "CudaAdamW::set_state: parameter ", i, " of ", params_.size());
  cuda_copy(*ctx_, exp_avg_[i], exp_avg);  // checks shape and dtype
  cuda_copy(*ctx_, exp_avg_sq_[i], exp_avg_sq);
}

void CudaAdamW::set_step_count(int64_t step) {
  HLM_CHECK(step >= 0, "CudaAdamW::set_step_count: negative step ", step);
  step_ = step;
}

double CudaAdamW::global_norm(double max_norm) {
  CudaContext& ctx = *ctx_;
  ctx.make_current();
  std::vector<GradNormCudaTensor> list;
  for (const CudaAdamWParam& p : params_) list.push_back({p.grad->data<float>(), p.grad->numel()});
  const size_t bytes = grad_norm_cuda_workspace_bytes(list.data(), list.size());
  CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
  double* norm_device = static_cast<double*>(norm_.raw());
  float* scale = max_norm > 0.0 ? scale_.data<float>() : nullptr;
  std::vector<unsigned char> staging(grad_norm_cuda_staging_bytes(list.size()));  // pageable: free once queued
  grad_global_norm_cuda(norm_device, scale, list.data(), list.size(), max_norm, ws.raw(), bytes, staging.data(),
                        ctx.stream());
  double norm = 0.0;
  cuda_copy_to_host(ctx, &norm, norm_device, sizeof(norm));  // waits for the stream
  return norm;
}

double CudaAdamW::grad_norm() { return global_norm(0.0); }

double CudaAdamW::step(double max_norm) {
  CudaContext& ctx = *ctx_;
  const double norm = global_norm(max_norm);  // the clip scale stays on the device for the update
  if (!std::isfinite(norm)) return norm;      // the step is skipped
  ++step_;
  std::vector<AdamWCudaTensor> tensors(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const CudaAdamWParam& p = params_[i];
    AdamWCudaTensor& t = tensors[i];
    t.param = p.param->data<float>();
    t.exp_avg = exp_avg_[i].data<float>();
    t.exp_avg_sq = exp_avg_sq_[i].data<float>();
    t.grad = p.grad->data<float>();
    t.n = p.param->numel();
    t.step = adamw_cuda_step(p.lr, p.weight_decay, beta1_, beta2_, eps_, step_);
    const CudaTensor* copy = bf16_[i];
    if (copy != nullptr && copy->raw() != nullptr) {  // an empty slot: the fp32 mode, no copy
      HLM_CHECK(copy->dtype() == DType::BF16 && copy->numel() == t.n, "CudaAdamW: the bf16 copy of ", p.name,
                " does not match its parameter");
      t.param_bf16 = copy->data<__nv_bfloat16>();
    }
  }
  // The staging buffer is pageable and the stream already waited for the norm: reusing it next step is safe.
  const float* scale = max_norm > 0.0 ? scale_.data<float>() : nullptr;  // written by global_norm
  adamw_multi_step_cuda(tensors.data(), tensors.size(), scale, table_.raw(), staging_.size(), staging_.data(),
                        ctx.stream());
  return norm;
}

}  // namespace hlm
