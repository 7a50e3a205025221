// CudaAdamW: pairing by name, then norm → clip scale → one fused multi-tensor AdamW launch (contract in cuda_adamw.h).
#include "models/cuda/cuda_adamw.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "layers/cuda/cuda_linear.h"
#include "ops/adamw/adamw_cuda.h"
#include "ops/adamw/adamw_lowmem_cuda.h"
#include "ops/adamw/grad_norm_cuda.h"

namespace hlm {

CudaAdamW::CudaAdamW(CudaContext& ctx, CudaModel& weights, CudaModel& grads, double beta1, double beta2, double eps,
                     AdamWStateFormat state, MasterFormat master, uint64_t sr_seed, bool with_state)
    : ctx_(&ctx), state_(state), master_(master), sr_seed_(sr_seed), with_state_(with_state), beta1_(beta1),
      beta2_(beta2), eps_(eps) {
  std::vector<CudaModel::NamedTensor> w = weights.named_tensors();
  std::vector<CudaModel::NamedTensor> g = grads.named_tensors();
  HLM_CHECK(w.size() == g.size(), "CudaAdamW: ", w.size(), " weights but ", g.size(), " gradients");
  if (master == MasterFormat::Bf16Sr)  // a freed fp32 slot (a linear's, an untied head's) → its bf16 copy, the master
    for (const CudaModel::Bf16Copy& c : weights.bf16_copies())
      for (CudaModel::NamedTensor& t : w)
        if (t.tensor == c.weight && t.tensor->raw() == nullptr && c.copy->raw() != nullptr) t.tensor = c.copy;
  for (size_t i = 0; i < w.size(); ++i) {
    HLM_CHECK(w[i].tensor->raw() != nullptr || w[i].tensor->numel() == 0, "CudaAdamW: ", w[i].name,
              " has no storage on the device (a freed weight without a bf16 copy, or fp32 masters expected)");
    HLM_CHECK(w[i].name == g[i].name && w[i].tensor->shape() == g[i].tensor->shape(), "CudaAdamW: weight ",
              w[i].name, " does not match gradient ", g[i].name);
    params_.push_back({w[i].name, w[i].tensor, g[i].tensor, 0.0, 0.0});
    if (!with_state_) continue;  // the moments live elsewhere (ZeRO-1's shard)
    if (state_ == AdamWStateFormat::Q8) {
      const int64_t n = w[i].tensor->numel();
      Q8Device q{cuda_scratch_bytes(ctx, static_cast<size_t>(n)), cuda_scratch_bytes(ctx, static_cast<size_t>(n)),
                 CudaTensor::empty(ctx, {q8_blocks(n)}), CudaTensor::empty(ctx, {q8_blocks(n)})};
      HLM_CUDA_CHECK(cudaMemsetAsync(q.q_m.raw(), q8_codebook_signed().zero, static_cast<size_t>(n), ctx.stream()));
      HLM_CUDA_CHECK(cudaMemsetAsync(q.q_v.raw(), q8_codebook_unsigned().zero, static_cast<size_t>(n), ctx.stream()));
      HLM_CUDA_CHECK(cudaMemsetAsync(q.absmax_m.raw(), 0, q.absmax_m.nbytes(), ctx.stream()));
      HLM_CUDA_CHECK(cudaMemsetAsync(q.absmax_v.raw(), 0, q.absmax_v.nbytes(), ctx.stream()));
      q8_.push_back(std::move(q));
      continue;
    }
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
  // The low-memory kernel writes no copies: the caller refreshes them (under bf16 masters only the head's has to).
  if (state_ == AdamWStateFormat::Q8 || master_ == MasterFormat::Bf16Sr) return;
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
  HLM_CHECK(with_state_, "CudaAdamW::set_state: this optimizer holds no moments");
  if (state_ == AdamWStateFormat::Q8) {  // upload the fp32 moments, quantize on the device (q8_quantize's bits)
    CudaTensor m = CudaTensor::empty(*ctx_, params_[i].param->shape()), v = CudaTensor::empty(*ctx_, m.shape());
    cuda_copy(*ctx_, m, exp_avg);
    cuda_copy(*ctx_, v, exp_avg_sq);
    Q8Device& q = q8_[i];
    q8_quantize_cuda(true, m.data<float>(), m.numel(), static_cast<uint8_t*>(q.q_m.raw()), q.absmax_m.data<float>(),
                     ctx_->stream());
    q8_quantize_cuda(false, v.data<float>(), v.numel(), static_cast<uint8_t*>(q.q_v.raw()), q.absmax_v.data<float>(),
                     ctx_->stream());
    ctx_->synchronize();  // m and v are freed on return
    return;
  }
  cuda_copy(*ctx_, exp_avg_[i], exp_avg);  // checks shape and dtype
  cuda_copy(*ctx_, exp_avg_sq_[i], exp_avg_sq);
}

void CudaAdamW::set_q8_state(size_t i, const AdamWQ8State& host) {
  HLM_CHECK(state_ == AdamWStateFormat::Q8 && i < q8_.size(), "CudaAdamW::set_q8_state: not an 8-bit state");
  Q8Device& q = q8_[i];
  const auto n = static_cast<size_t>(params_[i].param->numel());
  HLM_CHECK(host.q_m.size() == n && host.q_v.size() == n && host.absmax_m.size() * 4 == q.absmax_m.nbytes() &&
                host.absmax_v.size() * 4 == q.absmax_v.nbytes(),
            "CudaAdamW::set_q8_state: sizes of ", params_[i].name);
  cuda_copy_to_device(*ctx_, q.q_m.raw(), host.q_m.data(), n);
  cuda_copy_to_device(*ctx_, q.q_v.raw(), host.q_v.data(), n);
  cuda_copy_to_device(*ctx_, q.absmax_m.raw(), host.absmax_m.data(), q.absmax_m.nbytes());
  cuda_copy_to_device(*ctx_, q.absmax_v.raw(), host.absmax_v.data(), q.absmax_v.nbytes());
}

AdamWQ8State CudaAdamW::q8_state(size_t i) const {
  HLM_CHECK(state_ == AdamWStateFormat::Q8 && i < q8_.size(), "CudaAdamW::q8_state: not an 8-bit state");
  const Q8Device& q = q8_[i];
  const auto n = static_cast<size_t>(params_[i].param->numel());
  AdamWQ8State host;
  host.q_m.resize(n);
  host.q_v.resize(n);
  host.absmax_m.resize(q.absmax_m.nbytes() / 4);
  host.absmax_v.resize(q.absmax_v.nbytes() / 4);
  cuda_copy_to_host(*ctx_, host.q_m.data(), q.q_m.raw(), n);
  cuda_copy_to_host(*ctx_, host.q_v.data(), q.q_v.raw(), n);
  cuda_copy_to_host(*ctx_, host.absmax_m.data(), q.absmax_m.raw(), q.absmax_m.nbytes());
  cuda_copy_to_host(*ctx_, host.absmax_v.data(), q.absmax_v.raw(), q.absmax_v.nbytes());
  return host;
}

void CudaAdamW::set_step_count(int64_t step) {
  HLM_CHECK(step >= 0, "CudaAdamW::set_step_count: negative step ", step);
  step_ = step;
}

double CudaAdamW::global_norm(double max_norm) {
  CudaContext& ctx = *ctx_;
  ctx.make_current();
  std::vector<GradNormCudaTensor> list;
  for (const CudaAdamWParam& p : params_) {
    if (p.grad->dtype() == DType::BF16)
      list.push_back({nullptr, p.grad->numel(), static_cast<const uint16_t*>(p.grad->raw())});
    else
      list.push_back({p.grad->data<float>(), p.grad->numel()});
  }
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
  HLM_CHECK(with_state_, "CudaAdamW::step: this optimizer holds no moments");
  const double norm = global_norm(max_norm);  // the clip scale stays on the device for the update
  if (!std::isfinite(norm)) return norm;      // the step is skipped
  ++step_;
  if (state_ == AdamWStateFormat::Q8 || master_ == MasterFormat::Bf16Sr) {
    // One launch per parameter (the block scales need whole blocks per CTA).
    const float* scale = max_norm > 0.0 ? scale_.data<float>() : nullptr;
    const bool sr = master_ == MasterFormat::Bf16Sr;
    for (size_t i = 0; i < params_.size(); ++i) {
      const CudaAdamWParam& p = params_[i];
      AdamWLowmemTensor t;
      if (p.param->dtype() == DType::BF16) {
        t.param_bf16 = static_cast<uint16_t*>(p.param->raw());
      } else {
        t.param_f32 = p.param->data<float>();
        t.f32_holds_bf16 = sr;
      }
      if (state_ == AdamWStateFormat::Q8) {
        Q8Device& q = q8_[i];
        t.q_m = static_cast<uint8_t*>(q.q_m.raw());
        t.q_v = static_cast<uint8_t*>(q.q_v.raw());
        t.absmax_m = q.absmax_m.data<float>();
        t.absmax_v = q.absmax_v.data<float>();
      } else {
        t.exp_avg = exp_avg_[i].data<float>();
        t.exp_avg_sq = exp_avg_sq_[i].data<float>();
      }
      if (p.grad->dtype() == DType::BF16)
        t.grad_bf16 = static_cast<const uint16_t*>(p.grad->raw());
      else
        t.grad = p.grad->data<float>();
      t.n = p.param->numel();
      const uint64_t sr_base = sr ? adamw_sr_base(sr_seed_, step_, p.name) : 0;
      adamw_lowmem_step_cuda(t, scale, adamw_lowmem_step(p.lr, p.weight_decay, beta1_, beta2_, eps_, step_, sr_base),
                             ctx.stream());
    }
    return norm;
  }
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
