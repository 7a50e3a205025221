// CudaModel's bf16 compute mode: the bf16 copies of the linears and the LM head (contract in cuda_model.h).
#include <cuda_bf16.h>

#include "core/error.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_layer.h"
#include "ops/cast/cast_cuda.h"

namespace hlm {

void CudaModel::set_bf16_compute(bool on) {
  HLM_CHECK(!bf16_weights_only_, "set_bf16_compute: this model holds bf16 weights only (drop_fp32_weights)");
  bf16_compute_ = on;
  for_each_linear([&](CudaLinear& l) { cuda_linear_set_bf16(*ctx_, l, on); });
  for (auto& layer : layers_)
    if (layer->full_attention)
      layer->self_attn.bf16_compute = on;
    else
      layer->linear_attn.bf16_compute = on;
  if (!on) {
    lm_head_bf16_ = CudaTensor();
    return;
  }
  const CudaTensor& head = tied_head_ ? embed_tokens_ : lm_head_;
  lm_head_bf16_ = CudaTensor::empty(*ctx_, head.shape(), DType::BF16);
  refresh_bf16();
}

void CudaModel::refresh_bf16() {
  if (!bf16_compute_) return;
  HLM_CHECK(!bf16_weights_only_, "refresh_bf16: this model holds bf16 weights only (drop_fp32_weights)");
  for_each_linear([&](CudaLinear& l) { cuda_linear_refresh_bf16(*ctx_, l); });
  const CudaTensor& head = tied_head_ ? embed_tokens_ : lm_head_;
  cast_f32_to_bf16_cuda(lm_head_bf16_.data<__nv_bfloat16>(), head.data<float>(), head.numel(), ctx_->stream());
}

std::vector<CudaModel::Bf16Copy> CudaModel::bf16_copies() {
  std::vector<Bf16Copy> out;
  for_each_linear([&](CudaLinear& l) { out.push_back({&l.weight, &l.weight_bf16}); });
  out.push_back({tied_head_ ? &embed_tokens_ : &lm_head_, &lm_head_bf16_});
  return out;
}

LmHeadCuda CudaModel::lm_head_for(const float* hidden, int64_t n, CudaTensor& scratch) const {
  // A model held in bf16 only (drop_fp32_weights) has no fp32 head: the bf16 one alone (lm_head_loss_cuda.h).
  LmHeadCuda head{bf16_weights_only_ ? nullptr : lm_head_weight(), config_.vocab_size, config_.hidden_size,
                  config_.logits_scaling};
  if (!bf16_compute_) return head;
  scratch = cuda_round_bf16(*ctx_, hidden, n * config_.hidden_size);
  head.weight_bf16 = lm_head_bf16_.data<__nv_bfloat16>();
  head.hidden_bf16 = scratch.data<__nv_bfloat16>();
  return head;
}

float* CudaModel::lm_head_weight() const {
  HLM_CHECK(!bf16_weights_only_, "lm_head_weight: this model holds its head in bf16 only (drop_fp32_weights)");
  return tied_head_ ? embed_tokens_.data<float>() : lm_head_.data<float>();
}

const __nv_bfloat16* CudaModel::lm_head_weight_bf16() const {
  return lm_head_bf16_.raw() != nullptr ? lm_head_bf16_.data<__nv_bfloat16>() : nullptr;
}

void CudaModel::drop_fp32_weights() {
  if (bf16_weights_only_) return;
  ctx_->make_current();
  // Tensor by tensor: each linear's copy is made, then its fp32 weight freed (the stream orders the cast before any
  // reuse of the freed block), so the peak stays near the fp32 model's bytes.
  bf16_compute_ = true;
  for (auto& layer : layers_)
    if (layer->full_attention)
      layer->self_attn.bf16_compute = true;
    else
      layer->linear_attn.bf16_compute = true;
  for_each_linear([&](CudaLinear& l) {
    cuda_linear_set_bf16(*ctx_, l, true);
    l.weight = CudaTensor();
  });
  const CudaTensor& head = tied_head_ ? embed_tokens_ : lm_head_;
  lm_head_bf16_ = CudaTensor::empty(*ctx_, head.shape(), DType::BF16);
  cast_f32_to_bf16_cuda(lm_head_bf16_.data<__nv_bfloat16>(), head.data<float>(), head.numel(), ctx_->stream());
  lm_head_ = CudaTensor();
  if (!tied_head_) {
    embed_bf16_ = CudaTensor::empty(*ctx_, embed_tokens_.shape(), DType::BF16);
    cast_f32_to_bf16_cuda(embed_bf16_.data<__nv_bfloat16>(), embed_tokens_.data<float>(), embed_tokens_.numel(),
                          ctx_->stream());
  }
  embed_tokens_ = CudaTensor();
  bf16_weights_only_ = true;
  ctx_->synchronize();
  ctx_->allocator().release_cached();
}

size_t CudaModel::bf16_copy_bytes() const {
  // A default CudaTensor reports one element; only allocated copies count.
  const auto held = [](const CudaTensor& t) { return t.raw() != nullptr ? t.nbytes() : size_t{0}; };
  size_t bytes = held(lm_head_bf16_) + held(embed_bf16_);
  const_cast<CudaModel*>(this)->for_each_linear([&](CudaLinear& l) { bytes += held(l.weight_bf16); });
  return bytes;
}

}  // namespace hlm
