// CudaModel's bf16 compute mode: the bf16 copies of the linears and the LM head (contract in cuda_model.h).
#include <cuda_bf16.h>

#include "core/error.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_layer.h"
#include "ops/cast/cast_cuda.h"

namespace hlm {

template <class Fn>
void CudaModel::for_each_linear(const Fn& fn) {
  for (auto& layer : layers_) {
    Layer& d = *layer;
    if (d.full_attention) {
      for (const auto& slots : kAttentionLinears) fn(d.self_attn.*slots.first);
    } else {
      for (const auto& slots : kGdnLinears) fn(d.linear_attn.*slots.first);
    }
    for (const auto& slots : kMlpLinears) fn(d.mlp.*slots.first);
  }
}

void CudaModel::set_bf16_compute(bool on) {
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
  LmHeadCuda head{lm_head_weight(), config_.vocab_size, config_.hidden_size, config_.logits_scaling};
  if (!bf16_compute_) return head;
  scratch = cuda_round_bf16(*ctx_, hidden, n * config_.hidden_size);
  head.weight_bf16 = lm_head_bf16_.data<__nv_bfloat16>();
  head.hidden_bf16 = scratch.data<__nv_bfloat16>();
  return head;
}

size_t CudaModel::bf16_copy_bytes() const {
  // A default CudaTensor reports one element; only allocated copies count.
  const auto held = [](const CudaTensor& t) { return t.raw() != nullptr ? t.nbytes() : size_t{0}; };
  size_t bytes = held(lm_head_bf16_);
  const_cast<CudaModel*>(this)->for_each_linear([&](CudaLinear& l) { bytes += held(l.weight_bf16); });
  return bytes;
}

}  // namespace hlm
