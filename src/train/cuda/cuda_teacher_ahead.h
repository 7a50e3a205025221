// The distillation teacher's forward queued one micro-batch ahead on the context's side stream
// (backend/cuda/cuda_context.h, CudaSideStream), so that it runs beside the student's backward of the micro-batch
// before it instead of between that backward and the next student forward (HLM_TEACHER_OVERLAP, cuda_train_device.h).
//
// Per micro-batch i of a step (CudaTrainDevice::micro_step):
//   queue(batch_0)     a step's first micro-batch only, before the student's forward is queued (so they overlap)
//   take(batch_i)      after the student's forward is queued: the output of the forward queued for batch_i (queued
//                      now when none or another batch was queued); the main stream waits for it (an event), so the
//                      loss that reads it runs after it
//   queue(batch_i+1)   after the loss is queued: the side stream waits for the main stream's work so far (the loss
//                      reads the output of i), then the teacher's forward of i+1, the bf16 rounding of its final
//                      hidden states for the head and, when one vocabulary chunk covers the vocabulary (the
//                      recipe's 2048xfull), the teacher's logits [T, V] and their log-sum-exp for the KL
//                      (lm_head_teacher_logits_cuda: the same bits as inside the loss) are queued there
//   (the student's backward of i on the main stream, beside it)
// Memory: every block the side stream's work allocates comes from a private pool of the context's allocator
// (cuda_allocator.h, create_pool(false)), so no block the teacher's kernels may still use is handed to the main
// stream's requests, and the pool's blocks are reused only by later teacher forwards, queued after the side stream
// waited for the main stream's reads of the earlier ones. The pool keeps about one forward's working set (~2 GiB for
// the 4B teacher at 8 × 1,024 tokens) cached beside the student's.
// The same bits as the teacher's forward on the main stream: the same kernels on the same operands; the attention
// engine keeps a plan per stream (ops/attention/attention_cudnn.cu). The logits (5 GiB at 8 × 1,024 tokens and
// V = 151,936) are released right after the loss, before the next forward is queued, so one set is held at a time.

#pragma once
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_tensor.h"
#include "layers/cuda/cuda_token_batch.h"
#include "layers/token_batch.h"
#include "models/cuda/cuda_model.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"

namespace hlm {

// One teacher forward's output: the final hidden states [T, hidden] (fp32), the head with this call's bf16 rounding
// of them (bf16 mode), with one vocabulary chunk the logits and lse for the KL instead (the hidden states then
// released), and the uploaded batch whose error flag the forward's kernels set.
struct CudaTeacherOutput {
  TokenBatch batch;
  double tau = 1.0;
  LmHeadCudaChunking chunking;
  CudaTokenBatch device_batch;
  CudaTensor hidden, hidden16;
  LmHeadCuda head;
  CudaTensor logits, lse;  // [T, V] f32, [T] f64: with one vocabulary chunk, else empty
  bool has_logits() const { return logits.raw() != nullptr; }
  LmHeadTeacherLogitsCuda teacher_logits() const {
    return {logits.data<float>(), static_cast<const double*>(lse.raw())};
  }
  // After the loss that reads them was queued: back to the pool (queued side-stream work reuses them only after it).
  void release_loss_inputs() {
    logits = CudaTensor();
    lse = CudaTensor();
    hidden = CudaTensor();
    hidden16 = CudaTensor();
  }
  // Reads the flag back (waits for the context's main stream, which waited for this forward) and turns a set flag
  // into the forward's input error.
  void check(CudaContext& ctx, int64_t vocab_size) const;
};

// The teacher's forward of `batch` queued on its context's current stream (the side stream inside a CudaSideStream
// scope), with its head's bf16 rounding of the final hidden states; with_logits also makes the logits and lse for a
// KL at tau under `chunking` (lm_head_teacher_logits_supported must hold; the fp32 hidden states are then released).
// Nothing waits for the stream: check() reads the error flag afterwards. The serial step (HLM_TEACHER_OVERLAP off)
// calls it on the main stream without the logits.
std::unique_ptr<CudaTeacherOutput> cuda_teacher_forward(CudaModel& teacher, const TokenBatch& batch, double tau,
                                                        const LmHeadCudaChunking& chunking, bool with_logits);

class CudaTeacherAhead {
 public:
  CudaTeacherAhead(CudaContext& ctx, CudaModel& teacher);
  ~CudaTeacherAhead();  // waits for the side stream (its blocks go back to the pool, which the allocator keeps)
  CudaTeacherAhead(const CudaTeacherAhead&) = delete;
  CudaTeacherAhead& operator=(const CudaTeacherAhead&) = delete;

  // Queues the teacher's forward of `batch` on the side stream after the main stream's work queued so far (and its
  // logits for a KL at temperature tau when `chunking` has one vocabulary chunk). At most one is pending: a pending
  // one not taken yet is waited for and dropped first.
  void queue(const TokenBatch& batch, double tau, const LmHeadCudaChunking& chunking);
  // The pending forward's output when it is of `batch` (same ids and sequences), tau and chunking, else that of a
  // forward queued now; the main stream waits for it.
  std::unique_ptr<CudaTeacherOutput> take(const TokenBatch& batch, double tau, const LmHeadCudaChunking& chunking);
  // Waits for the side stream and drops a pending forward (a step that ended early, an exception).
  void drop();
  // Whether the pending forward is of `batch`, tau and chunking (take would use it).
  bool pending_for(const TokenBatch& batch, double tau, const LmHeadCudaChunking& chunking) const;

 private:
  CudaContext& ctx_;
  CudaModel& teacher_;
  uint64_t pool_ = 0;
  cudaEvent_t main_done_ = nullptr;  // recorded on the main stream before a queue
  cudaEvent_t side_done_ = nullptr;  // recorded on the side stream after the pending forward
  std::unique_ptr<CudaTeacherOutput> pending_;
};

}  // namespace hlm
