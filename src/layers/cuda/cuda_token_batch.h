// A TokenBatch on the device: ids [T] int32, cu_seqlens [N+1] int64, positions [T] int32 and one int error flag that
// the kernels set for a bad token id, position or cu_seqlens (they cannot throw; the caller reads the flag back).
// Uploaded once per forward (the copies do not wait for the stream: cuda_copy_to_device_async); the layers take the
// non-owning CudaBatchView. Copies of a CudaTokenBatch share its device buffers (a captured training step keeps its
// input batch after the trace that held a copy is gone), and refill writes a new batch of the same shape into them
// (the fixed input buffers a replayed CUDA graph reads: train/cuda/cuda_train_device.h).
#pragma once
#include <cstdint>
#include <memory>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_tensor.h"
#include "layers/token_batch.h"

namespace hlm {

// What the CUDA layers read of a batch: device pointers plus the host-side sizes the launchers need.
struct CudaBatchView {
  int64_t tokens = 0;      // T
  int64_t n_seqs = 0;      // N
  int64_t max_seqlen = 0;  // longest sequence (attention grid; rope table size)
  const int32_t* ids = nullptr;         // [T]
  const int64_t* cu_seqlens = nullptr;  // [N+1]
  const int32_t* positions = nullptr;   // [T]
  int* error_flag = nullptr;            // [1], 0 after upload
};

class CudaTokenBatch {
 public:
  // Validates the batch on the host (input error like the CPU forward), uploads it and clears the error flag.
  // max_seqlen_at_least: the view's max_seqlen is max(longest sequence, this) (the kernels take max_seqlen as an
  // upper bound that sizes their grids: a captured step serves every batch whose longest sequence fits).
  static CudaTokenBatch upload(CudaContext& ctx, const TokenBatch& batch, int64_t max_seqlen_at_least = 0);

  // Validates `batch` like upload and writes it into this batch's buffers, clearing the flag (no wait). It must have
  // this batch's tokens and sequences and no sequence longer than its max_seqlen; internal error otherwise.
  void refill(CudaContext& ctx, const TokenBatch& batch);

  CudaBatchView view() const;
  // Reads the error flag back (waits for the stream): true when a kernel flagged bad input.
  bool error_flagged(CudaContext& ctx) const;

 private:
  struct Buffers {
    CudaTensor ids, cu_seqlens, positions, error_flag;
  };
  int64_t tokens_ = 0, n_seqs_ = 0, max_seqlen_ = 0;
  std::shared_ptr<Buffers> buffers_;
};

}  // namespace hlm
