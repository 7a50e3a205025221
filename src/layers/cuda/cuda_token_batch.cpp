// CudaTokenBatch: host validation, uploads and the error flag (layout in cuda_token_batch.h).
#include "layers/cuda/cuda_token_batch.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"

namespace hlm {

namespace {

template <typename T>
CudaTensor upload_vector(CudaContext& ctx, const std::vector<T>& values, DType dtype) {
  CudaTensor t = CudaTensor::empty(ctx, {static_cast<int64_t>(values.size())}, dtype);
  cuda_copy_to_device_async(ctx, t.raw(), values.data(), values.size() * sizeof(T));  // no wait (cuda_tensor.h)
  return t;
}

template <typename T>
void refill_vector(CudaContext& ctx, const CudaTensor& t, const std::vector<T>& values) {
  HLM_CHECK(t.nbytes() == values.size() * sizeof(T), "CudaTokenBatch::refill: ", values.size(), " values for a buffer "
            "of ", t.nbytes(), " bytes");
  cuda_copy_to_device_async(ctx, t.raw(), values.data(), values.size() * sizeof(T));  // no wait (cuda_tensor.h)
}

int64_t longest_sequence(const TokenBatch& batch) {
  int64_t longest = 0;
  for (int64_t s = 0; s < batch.num_sequences(); ++s)
    longest = std::max(longest, batch.cu_seqlens[s + 1] - batch.cu_seqlens[s]);
  return longest;
}

}  // namespace

CudaTokenBatch CudaTokenBatch::upload(CudaContext& ctx, const TokenBatch& batch, int64_t max_seqlen_at_least) {
  batch.validate();
  CudaTokenBatch b;
  b.tokens_ = batch.total_tokens();
  b.n_seqs_ = batch.num_sequences();
  b.max_seqlen_ = std::max(longest_sequence(batch), max_seqlen_at_least);
  b.buffers_ = std::make_shared<Buffers>();
  b.buffers_->ids = upload_vector(ctx, batch.ids, DType::I32);
  b.buffers_->cu_seqlens = upload_vector(ctx, batch.cu_seqlens, DType::I64);
  b.buffers_->positions = upload_vector(ctx, batch.positions(), DType::I32);
  b.buffers_->error_flag = upload_vector(ctx, std::vector<int32_t>{0}, DType::I32);
  return b;
}

void CudaTokenBatch::refill(CudaContext& ctx, const TokenBatch& batch) {
  batch.validate();
  HLM_CHECK(buffers_ != nullptr && batch.total_tokens() == tokens_ && batch.num_sequences() == n_seqs_ &&
                longest_sequence(batch) <= max_seqlen_,
            "CudaTokenBatch::refill: a batch of another shape (", batch.total_tokens(), " tokens, ",
            batch.num_sequences(), " sequences; the buffers hold ", tokens_, ", ", n_seqs_, ")");
  refill_vector(ctx, buffers_->ids, batch.ids);
  refill_vector(ctx, buffers_->cu_seqlens, batch.cu_seqlens);
  refill_vector(ctx, buffers_->positions, batch.positions());
  refill_vector(ctx, buffers_->error_flag, std::vector<int32_t>{0});
}

CudaBatchView CudaTokenBatch::view() const {
  if (buffers_ == nullptr) return {tokens_, n_seqs_, max_seqlen_, nullptr, nullptr, nullptr, nullptr};
  return {tokens_,
          n_seqs_,
          max_seqlen_,
          buffers_->ids.data<int32_t>(),
          buffers_->cu_seqlens.data<int64_t>(),
          buffers_->positions.data<int32_t>(),
          reinterpret_cast<int*>(buffers_->error_flag.data<int32_t>())};
}

bool CudaTokenBatch::error_flagged(CudaContext& ctx) const {
  HLM_CHECK(buffers_ != nullptr, "CudaTokenBatch::error_flagged: no batch uploaded");
  int32_t flag = 0;
  cuda_copy_to_host(ctx, &flag, buffers_->error_flag.raw(), sizeof(flag));
  return flag != 0;
}

}  // namespace hlm
