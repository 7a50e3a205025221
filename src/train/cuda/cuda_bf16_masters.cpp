// The lean plan's device layout: bf16 masters and bf16 linear gradients (contract in cuda_bf16_masters.h).
#include "train/cuda/cuda_bf16_masters.h"

#include <cuda_bf16.h>

#include <cstring>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "ops/cast/cast_cuda.h"

namespace hlm {

namespace {

constexpr const char* kEmbedding = "model.embed_tokens.weight";

// The bf16 copy holding the master of a freed weight slot, or nullptr.
const CudaTensor* copy_of(const std::vector<CudaModel::Bf16Copy>& copies, const CudaTensor* weight) {
  for (const CudaModel::Bf16Copy& c : copies)
    if (c.weight == weight && c.copy->raw() != nullptr) return c.copy;
  return nullptr;
}

}  // namespace

void cuda_hold_bf16_masters(CudaContext& ctx, CudaModel& model) {
  HLM_CHECK(model.bf16_compute(), "cuda_hold_bf16_masters: the bf16 compute mode is off");
  ctx.make_current();
  const std::vector<CudaModel::Bf16Copy> copies = model.bf16_copies();
  for (const CudaModel::NamedTensor& t : model.named_tensors())
    if (t.name != kEmbedding && copy_of(copies, t.tensor) != nullptr) *t.tensor = CudaTensor();
  ctx.synchronize();  // the copies were cast from the freed weights on the stream
  ctx.allocator().release_cached();
}

void cuda_hold_bf16_linear_grads(CudaContext& ctx, CudaModel& grads) {
  ctx.make_current();
  int freed = 0;
  for (const CudaModel::NamedTensor& t : grads.named_tensors()) {
    if (t.name.find("_proj.weight") == std::string::npos || t.tensor->dtype() == DType::BF16) continue;
    const Shape shape = t.tensor->shape();
    *t.tensor = CudaTensor();
    if (++freed % 16 == 0) {  // bounds the fp32 blocks cached at once while the bf16 ones are allocated
      ctx.synchronize();
      ctx.allocator().release_cached();
    }
    *t.tensor = CudaTensor::empty(ctx, shape, DType::BF16);
    HLM_CUDA_CHECK(cudaMemsetAsync(t.tensor->raw(), 0, t.tensor->nbytes(), ctx.stream()));
  }
  ctx.synchronize();
  ctx.allocator().release_cached();
}

void cuda_refresh_held_copies(CudaContext& ctx, CudaModel& model) {
  for (const CudaModel::Bf16Copy& c : model.bf16_copies())
    if (c.weight->raw() != nullptr && c.copy->raw() != nullptr)
      cast_f32_to_bf16_cuda(c.copy->data<__nv_bfloat16>(), c.weight->data<float>(), c.weight->numel(), ctx.stream());
}

void cuda_download_bf16_masters(CudaContext& ctx, CudaModel& model, const std::vector<AdamWParam>& host,
                                bool widen_copies) {
  ctx.make_current();
  const std::vector<CudaModel::Bf16Copy> copies = model.bf16_copies();
  for (const CudaModel::NamedTensor& t : model.named_tensors()) {
    if (!widen_copies && t.tensor->raw() == nullptr && copy_of(copies, t.tensor) != nullptr) continue;
    const CudaTensor* from = t.tensor->raw() != nullptr ? t.tensor : copy_of(copies, t.tensor);
    HLM_CHECK(from != nullptr, "cuda_download_bf16_masters: ", t.name, " has no storage on the device");
    const AdamWParam* p = nullptr;
    for (const AdamWParam& h : host)
      if (h.name == t.name) p = &h;
    HLM_CHECK(p != nullptr && p->param.numel() == from->numel(), "cuda_download_bf16_masters: no host tensor of ",
              from->numel(), " entries for ", t.name);
    Tensor flat = p->param.reshape(from->shape());
    if (from->dtype() == DType::F32) {
      cuda_copy(ctx, flat, *from);
      continue;
    }
    const Tensor wide = cuda_download(ctx, *from).to(DType::F32);  // bf16 → f32: exact
    std::memcpy(flat.raw(), wide.raw(), flat.nbytes());
  }
}

}  // namespace hlm
