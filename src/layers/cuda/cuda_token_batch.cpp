// CudaTokenBatch: host validation, uploads and the error flag (layout in cuda_token_batch.h).
#include "layers/cuda/cuda_token_batch.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_error.h"

namespace hlm {

namespace {

template <typename T>
CudaTensor upload_vector(CudaContext& ctx, const std::vector<T>& values, DType dtype) {
  CudaTensor t = CudaTensor::empty(ctx, {static_cast<int64_t>(values.size())}, dtype);
  cuda_copy_to_device_async(ctx, t.raw(), values.data(), values.size() * sizeof(T));  // no wait (cuda_tensor.h)
  return t;
}

}  // namespace

CudaTokenBatch CudaTokenBatch::upload(CudaContext& ctx, const TokenBatch& batch) {
  batch.validate();
  CudaTokenBatch b;
  b.tokens_ = batch.total_tokens();
  b.n_seqs_ = batch.num_sequences();
  for (int64_t s = 0; s < b.n_seqs_; ++s)
    b.max_seqlen_ = std::max(b.max_seqlen_, batch.cu_seqlens[s + 1] - batch.cu_seqlens[s]);
  b.ids_ = upload_vector(ctx, batch.ids, DType::I32);
  b.cu_seqlens_ = upload_vector(ctx, batch.cu_seqlens, DType::I64);
  b.positions_ = upload_vector(ctx, batch.positions(), DType::I32);
  b.error_flag_ = upload_vector(ctx, std::vector<int32_t>{0}, DType::I32);
  return b;
}

CudaBatchView CudaTokenBatch::view() const {
  return {tokens_,
          n_seqs_,
          max_seqlen_,
          ids_.data<int32_t>(),
          cu_seqlens_.data<int64_t>(),
          positions_.data<int32_t>(),
          reinterpret_cast<int*>(error_flag_.data<int32_t>())};
}

bool CudaTokenBatch::error_flagged(CudaContext& ctx) const {
  int32_t flag = 0;
  cuda_copy_to_host(ctx, &flag, error_flag_.raw(), sizeof(flag));
  return flag != 0;
}

}  // namespace hlm
