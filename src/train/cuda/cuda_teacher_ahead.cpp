// The teacher's forward one micro-batch ahead on the side stream (cuda_teacher_ahead.h).
#include "train/cuda/cuda_teacher_ahead.h"

#include <utility>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "layers/cuda/cuda_linear.h"
#include "models/cuda/cuda_model_train.h"

namespace hlm {

namespace {

// Allocations go to `pool` while it lives.
class PoolScope {
 public:
  PoolScope(CudaAllocator& allocator, uint64_t pool) : allocator_(allocator) { allocator_.begin_pool(pool); }
  ~PoolScope() { allocator_.end_pool(); }
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  CudaAllocator& allocator_;
};

bool same_batch(const TokenBatch& a, const TokenBatch& b) { return a.ids == b.ids && a.cu_seqlens == b.cu_seqlens; }

}  // namespace

void CudaTeacherOutput::check(CudaContext& ctx, int64_t vocab_size) const {
  cuda_check_batch_flag(ctx, device_batch, batch, vocab_size);
}

std::unique_ptr<CudaTeacherOutput> cuda_teacher_forward(CudaModel& teacher, const TokenBatch& batch, double tau,
                                                        const LmHeadCudaChunking& chunking, bool with_logits) {
  CudaContext& ctx = teacher.context();
  ctx.make_current();
  auto out = std::make_unique<CudaTeacherOutput>();
  out->batch = batch;
  out->tau = tau;
  out->chunking = chunking;
  const int64_t N = batch.total_tokens(), V = teacher.config().vocab_size;
  out->device_batch = CudaTokenBatch::upload(ctx, batch);
  out->hidden = teacher.forward_final_hidden(out->device_batch);
  out->head = teacher.lm_head_for(out->hidden.data<float>(), N, out->hidden16);
  if (with_logits && N > 0) {
    out->logits = CudaTensor::empty(ctx, {N, V});
    out->lse = cuda_scratch_bytes(ctx, static_cast<size_t>(N) * sizeof(double));
    const size_t bytes = lm_head_teacher_logits_cuda_workspace_bytes(N, V, chunking);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    lm_head_teacher_logits_cuda(ctx.blaslt(), out->logits.data<float>(), static_cast<double*>(out->lse.raw()),
                                out->hidden.data<float>(), out->head, N, tau, chunking, ws.raw(), bytes);
    // The loss reads the logits only: the fp32 hidden states go back to the allocator (on the side stream, to its
    // pool, for side-stream work queued later); the head (checked, not read) keeps its bf16 pair.
    out->hidden = CudaTensor();
  }
  return out;
}

CudaTeacherAhead::CudaTeacherAhead(CudaContext& ctx, CudaModel& teacher) : ctx_(ctx), teacher_(teacher) {
  HLM_CHECK(&teacher.context() == &ctx, "CudaTeacherAhead: the teacher lives on another context");
  ctx_.make_current();
  ctx_.side_stream();  // created here, not in the destructor
  pool_ = ctx_.allocator().create_pool(false);
  HLM_CUDA_CHECK(cudaEventCreateWithFlags(&main_done_, cudaEventDisableTiming));
  HLM_CUDA_CHECK(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
}

CudaTeacherAhead::~CudaTeacherAhead() {
  // Best effort, no throw: the side stream's work ends before its blocks go back to the pool.
  cudaStreamSynchronize(ctx_.side_stream());
  pending_.reset();
  cudaEventDestroy(main_done_);
  cudaEventDestroy(side_done_);
  // The pool stays with the allocator: its idle blocks join the general lists.
  ctx_.allocator().release_pool(pool_);
}

void CudaTeacherAhead::drop() {
  if (pending_ == nullptr) return;
  HLM_CUDA_CHECK(cudaStreamSynchronize(ctx_.side_stream()));
  pending_.reset();
}

void CudaTeacherAhead::queue(const TokenBatch& batch, double tau, const LmHeadCudaChunking& chunking) {
  drop();
  ctx_.make_current();
  const cudaStream_t side = ctx_.side_stream();
  HLM_CUDA_CHECK(cudaEventRecord(main_done_, ctx_.main_stream()));
  HLM_CUDA_CHECK(cudaStreamWaitEvent(side, main_done_, 0));
  std::unique_ptr<CudaTeacherOutput> out;
  {
    CudaSideStream on_side(ctx_);
    PoolScope in_pool(ctx_.allocator(), pool_);
    out = cuda_teacher_forward(teacher_, batch, tau, chunking,
                               lm_head_teacher_logits_supported(teacher_.config().vocab_size, chunking));
  }
  HLM_CUDA_CHECK(cudaEventRecord(side_done_, side));
  pending_ = std::move(out);
}

bool CudaTeacherAhead::pending_for(const TokenBatch& batch, double tau, const LmHeadCudaChunking& chunking) const {
  return pending_ != nullptr && same_batch(pending_->batch, batch) && pending_->tau == tau &&
         pending_->chunking.vocab_chunk == chunking.vocab_chunk && pending_->chunking.row_block == chunking.row_block;
}

std::unique_ptr<CudaTeacherOutput> CudaTeacherAhead::take(const TokenBatch& batch, double tau,
                                                          const LmHeadCudaChunking& chunking) {
  if (!pending_for(batch, tau, chunking)) queue(batch, tau, chunking);
  HLM_CUDA_CHECK(cudaStreamWaitEvent(ctx_.main_stream(), side_done_, 0));
  return std::move(pending_);
}

}  // namespace hlm
