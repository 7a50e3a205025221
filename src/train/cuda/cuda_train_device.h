// The trainer's steps on one GPU (GPU 0, or local rank % GPUs under a launcher; TrainDevice, train/train_device.h):
// `hybridlm pretrain|distill --device cuda`.
// Holds on the device: the student (CudaModel, fp32 master weights), its gradients (CudaModel::zeros_like), the
// frozen teacher (distill), and CudaAdamW's moments. One step mirrors train_batch_gradient + clip + AdamW::step:
//   per micro-batch of b rows: upload the ids (and CE targets), teacher forward_train → final hidden (distill),
//   student forward_train, lm_head_cross_entropy_cuda / lm_head_forward_kl_cuda with the full-batch loss weights
//   (CE: 1/(targets counted in all B rows); KL: 1/(B·n)) accumulating the head gradient, CudaModel::backward;
//   then CudaAdamW::step(clip) with each parameter's lr / weight decay copied from its host AdamW group.
// The host waits once per micro-batch (the loss record and the per-token values, [b·n] floats, for the per-language
// sums) and once for the norm. A non-finite loss skips the update as on the CPU (the norm is still measured).
// Numerics: the CUDA ops' (docs/cuda.md); a step from the same state matches the CPU's to ~3e-7 (loss) / ~2e-5 (grad
// norm) (tests/cuda_models/test_cuda_train_step.cpp); free-running trajectories drift apart slowly (AdamW amplifies
// summation-order noise in near-zero gradients), while two GPU runs are bit-identical (no float atomics).
// Evaluation (validation and the final test): evaluate_pass runs cuda_eval_pass (train/cuda/cuda_eval.h) on the
// device's student and teacher, without touching the gradients or the optimizer.
// Activations (--recompute): the student's forward_train keeps the layer inputs only (layer: each layer recomputes its
// own in the backward) or every layer's intermediates too (none); the gradients are bit-identical either way
// (models/cuda/cuda_model_train.h). The teacher keeps layer inputs only (it has no backward).
// Memory plan (train/memory_plan.h, set_memory_plan before attach): adam8 keeps the AdamW moments 8-bit block-wise on
// the device (CudaAdamW Q8, exchanged with the host AdamW of the same format byte for byte); teacher-bf16 and beyond
// free the frozen teacher's fp32 linear weights once their bf16 copies exist (the embedding stays fp32).
// lean (needs --precision bf16) also holds the student's linears (and an untied head) in bf16 only, as their master
// weights (the embedding and the small tensors in fp32 storage holding bf16 values), updated by CudaAdamW with the
// host's stochastic-rounding stream (bit for bit the host AdamW's step on the same gradients), and the linears'
// gradients in bf16 (train/cuda/cuda_bf16_masters.h; bound in docs/memory.md).
// CUDA graphs (options.cuda_graphs, off by default; `hybridlm synth` turns them on, `--cuda-graphs off` or
// HLM_CUDA_GRAPHS=off turns them off): a step of one micro-batch without a teacher (pretrain-style, the synth steps)
// whose batch shape (tokens, sequences, longest sequence rounded up to 64: train/step_graph_cache.h; the rounded value
// is the attention kernels' max_seqlen, which only sizes their grids) was seen before is captured once
// as a graph (gradient zeroing, forward, loss, backward) and replayed for every later step of that shape: the inputs
// (ids, cu_seqlens, positions, loss weights, targets) are copied into the graph's fixed device buffers first, and
// the kernels' error flag, the loss record and the per-token values come back with ONE wait. The gradient norm,
// clipping and AdamW run eagerly after it (the learning rates and the step count stay host values), so a step keeps
// two host waits but makes ~15 CUDA calls instead of ~520. Same kernels, same arguments, same order as the eager
// step: the results are bit-identical (tests/cuda_models/test_cuda_train_graphs.cpp). A capture that fails (e.g. a
// body that waits) leaves that shape eager, with a note on stderr.
// Data parallel (set_data_parallel; train/cuda/cuda_data_parallel.h, docs/distributed.md): each rank steps on its
// rows of the global batch with the global loss weights; after the backward the gradients are summed over ranks in
// buckets (zero 0: all-reduce, then the usual CudaAdamW step on every rank; zero 1: reduce-scatter, the shard's AdamW
// with sharded moments, all-gather of the weights) and the loss record is summed over the host communicator. fp32
// and 8-bit moments (adam8 and lean: the shard cut at quantization-block boundaries) are sharded; under lean (bf16
// masters, zero 1 only: zero 0 on several ranks is an input error) the masters stay whole on every rank, each rank
// updates its shard's elements with the one-rank step's stochastic-rounding bits and the reduced gradient chunks go
// back into the (bf16) gradients. In the bf16 compute mode ZeRO-1 also shards the fp32 masters of the weights that have bf16 copies (the
// linears, an untied head): their fp32 slots are freed at attach (cuda_hold_bf16_masters), the update writes the
// bf16 copies of this rank's chunks and those are all-gathered in bf16 (HYBRIDLM_ZERO1_MASTERS=sharded|whole,
// default sharded; the same bits either way). The device is GPU local_rank % visible GPUs (cli/train_device_cli.cpp).
// With HYBRIDLM_DP_OVERLAP on (the default) the last micro-batch's backward queues each bucket's sum on the
// collectives' stream as soon as its gradients are final (the same bits as summing after the backward).
// Non-goals for now: per-layer gradient release.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/cuda/cuda_adamw.h"
#include "models/cuda/cuda_model.h"
#include "models/model_train.h"
#include "train/cuda/cuda_data_parallel.h"
#include "train/lm_head_loss.h"
#include "train/step_graph_cache.h"
#include "train/train_device.h"

namespace hlm {

struct CudaTrainDeviceOptions {
  // bf16 compute mode for the student and the teacher (models/cuda/cuda_model.h: bf16 products with fp32 results;
  // master weights, gradients and AdamW state fp32, activations fp32 except those only bf16 products read); the
  // student's bf16 copies are re-rounded after every update.
  bool bf16 = false;
  // The student's activations (--recompute): Layer recomputes inside each layer, None keeps every intermediate.
  Recompute recompute = Recompute::Layer;
  // Steps as replayed CUDA graphs where they can be (see above); HLM_CUDA_GRAPHS=0|off in the environment wins.
  bool cuda_graphs = false;
};

// HLM_TEACHER_OVERLAP=on|off (default off until measured on the GPU): with a teacher, each micro-batch's teacher
// forward runs on the context's side stream, beside the student's backward of the micro-batch before it (a step's
// first beside the student's forward), the main stream on its own (train/cuda/cuda_teacher_ahead.h); the same bits.
// Read at each step; set(1 | 0 | -1 = the environment) for A/B runs.
void cuda_train_set_teacher_overlap(int on);
bool cuda_train_teacher_overlap();

class CudaTeacherAhead;
struct CudaTeacherOutput;

class CudaTrainDevice final : public TrainDevice {
 public:
  // Uses cuda_context() (GPU 0); an input error when no usable GPU is present.
  explicit CudaTrainDevice(const CudaTrainDeviceOptions& options = {});
  ~CudaTrainDevice() override;

  std::string describe() const override;
  size_t free_memory_bytes() const override;  // cudaMemGetInfo on GPU 0
  void set_memory_plan(const MemoryPlanOption& plan) override { teacher_bf16_only_ = plan.teacher_bf16_only; }
  // The training loss's chunking (row block × vocabulary chunk, ops/lm_head_loss/lm_head_loss_cuda.h); nullopt: the
  // constructor's choice, HLM_LM_HEAD_CHUNKING=ROWSxCOLS|ROWSxfull when set (train/lm_head_chunking_text.h; malformed:
  // an input error there), else the loss's default 4096x4096. An experiment knob (session 31, not yet measured in a
  // step): one chunk over the vocabulary (ROWSxfull) makes the forward KL four logits-sized products instead of six,
  // for a workspace of ~ROWS·V·10 bytes that the memory plan's ~1 GiB loss allowance does not count (4096xfull,
  // V 151,936: 6.2 GB). Evaluation passes keep the default. Set before the first step (captured steps keep theirs).
  void set_loss_chunking(const std::optional<LmHeadChunking>& chunking);
  // Creates the device collectives (HYBRIDLM_GPU_COLLECTIVES; collective: every rank calls it).
  void set_data_parallel(Communicator& comm, int zero_stage, size_t bucket_elements) override;
  void attach(Model& student, Model* teacher, AdamW& optimizer) override;
  BatchLoss step(const PackedBatch& batch, int64_t micro_rows, double tau, double clip, double* grad_norm,
                 size_t num_languages) override;
  void evaluate_pass(const PackedBatch& batch, EvalSums& sums) override;
  void sync_to_host() override;

  // Counts of the captured steps (all zero without cuda_graphs).
  StepGraphStats graph_stats() const { return graphs_ ? graphs_->stats() : StepGraphStats{}; }

 private:
  struct StepGraph;  // one captured step and its input buffers (cuda_train_device.cpp)

  // The step as a replayed graph (cuda_graphs, one micro-batch, no teacher): false when it must run eagerly instead
  // (a shape seen for the first time, or whose capture failed); nothing was queued then.
  bool graph_step(const PackedBatch& micro, float weight, size_t num_languages, BatchLoss& out);
  // The loss (CE at `targets`, or KL against the teacher) and the head's gradient into grads_; returns the
  // gradient w.r.t. the final hidden states for the backward. Shared by the eager and the captured step. `result` is
  // a TokenLossCudaResult on the device.
  // teacher: the teacher's forward of this micro-batch (its hidden states and head, or its logits made ahead:
  // cuda_teacher_ahead.h), null without a teacher.
  CudaTensor head_loss(const CudaTrainTrace& trace, const CudaTeacherOutput* teacher, const float* weights,
                       const int32_t* targets, float* per_token, void* result, double tau);

  // Forward, loss and backward of one micro-batch into grads_; adds its loss record to `out`. last: the step's last
  // micro-batch (data parallel: its backward queues the bucket sums as it goes, cuda_data_parallel.h).
  // next: the step's next micro-batch, whose teacher forward is queued beside this backward (HLM_TEACHER_OVERLAP;
  // null for the last).
  void micro_step(const PackedBatch& micro, const PackedBatch* next, float weight, double tau, size_t num_languages,
                  BatchLoss& out, bool last = false);

  // The memory plan: static part (weights, copies, gradients, AdamW state) at attach, activations at the first step.
  void print_static_plan() const;
  void print_activation_plan(size_t kept_bytes, int64_t micro_tokens) const;

  CudaTrainDeviceOptions options_;
  bool activation_plan_printed_ = false;
  bool teacher_bf16_only_ = false;
  std::optional<LmHeadChunking> loss_chunking_;  // resolved by set_loss_chunking or the constructor; nullopt: default
  CudaContext* ctx_ = nullptr;
  Model* host_student_ = nullptr;
  AdamW* host_optimizer_ = nullptr;
  std::optional<CudaModel> student_, teacher_, grads_;
  std::unique_ptr<CudaTeacherAhead> teacher_ahead_;  // HLM_TEACHER_OVERLAP: made at the first overlapped step
  std::unique_ptr<CudaAdamW> optimizer_;
  std::unique_ptr<CudaDataParallel> dp_;  // data parallel (set_data_parallel), else null
  std::vector<size_t> host_index_;  // device optimizer parameter i ↔ host AdamW parameter host_index_[i]
  std::unique_ptr<StepGraphCache<StepGraph>> graphs_;  // cuda_graphs: the captured steps by shape
  const float* graph_rope_ = nullptr;  // the rope table the graphs read (a table that grows moves: graphs dropped)
  void* readback_ = nullptr;           // pinned host memory for the captured step's results
  size_t readback_bytes_ = 0;
};

}  // namespace hlm
