// Where the trainer's steps run when not on the CPU: an accelerator that holds the student (and teacher) weights, the
// gradients and the AdamW state, and takes whole optimisation steps (train/trainer.h, `--device`). Validation and
// the final test run on the device too (evaluate_pass, with its current weights). The host Model and AdamW stay the
// trainer's record for checkpoints and model/, so the trainer calls sync_to_host() before each of those. hlm_train is
// built without CUDA; the CUDA implementation lives in train/cuda/cuda_train_device.h, and the command line
// (cli/train_device_cli.h) hands it to train_run.
//
// Contract of step(): the same math as the CPU step of trainer.cpp, i.e.
//   zero grads; train_batch_gradient (micro-batches of micro_rows rows, loss weights 1/count over the whole batch,
//   per-language sums of the per-token values); norm = ‖g‖₂; if loss and norm are finite: g ← g·min(1, clip/norm)
//   and one AdamW update with each parameter's group lr and weight decay as they are NOW in the host AdamW (the
//   trainer applies the schedule before calling step); else nothing changes (weights, moments, step count).
// Numerics are the device's (summation order differs from the CPU); a device step is deterministic run to run.
//
// Data parallel (issue #25, docs/distributed.md): after set_data_parallel, step() receives the GLOBAL batch of every
// rank and trains on this rank's rows [r·B/W, (r+1)·B/W) with the global batch's loss weights; it returns the loss
// record summed over ranks and the norm of the summed gradient; every rank ends the step with the same weights.
// sync_to_host() is then a collective (every rank calls it): it gathers sharded optimizer state.
//
// Contract of evaluate_pass(): eval_pass_sums (train/eval.h) of the device's current student (and, when a teacher was
// attached, the teacher's CE and KL(teacher ‖ student) at τ = 1): the same per-token values added in token order into
// `sums` by the tokens' language ids. Reads the weights only: gradients, optimizer state and step count stay as they
// are, so steps after it are those without it (bit for bit on a deterministic device).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/data_stream.h"
#include "train/adamw.h"
#include "train/eval.h"
#include "train/memory_plan.h"
#include "train/trainer_batch.h"

namespace hlm {

class Communicator;
class Model;

// HYBRIDLM_GPU_COLLECTIVES=nccl|host: how a device's gradients travel between ranks (train/cuda/device_collectives.h).
// Its presence also asks a single process to run the data-parallel path with one rank (tests, overhead figures).
inline constexpr const char* kGpuCollectivesEnv = "HYBRIDLM_GPU_COLLECTIVES";

class TrainDevice {
 public:
  virtual ~TrainDevice() = default;
  // One line naming the device for the start of a run ("cuda:0 NVIDIA H200, 139.8 GiB").
  virtual std::string describe() const = 0;
  // Free device memory in bytes before attach: the trainer compares it with the floor of its memory plan
  // (train_device_memory_floor, trainer.h) before anything is written. 0: unknown (no check).
  virtual size_t free_memory_bytes() const { return 0; }
  // The memory plan the trainer chose (train/memory_plan.h), before attach: the device holds the teacher and the
  // optimizer state as the plan says (the optimizer's own formats come with the AdamW given to attach).
  virtual void set_memory_plan(const MemoryPlanOption& plan) { (void)plan; }
  // Before attach: run data parallel over `comm` (contract above) with ZeRO `zero_stage` (0: every rank holds the
  // whole optimizer state; 1: AdamW's moments sharded) and gradient buckets of `bucket_elements`. A device that cannot
  // refuses with an input error.
  virtual void set_data_parallel(Communicator& comm, int zero_stage, size_t bucket_elements) {
    (void)comm;
    (void)zero_stage;
    (void)bucket_elements;
    throw_input_error(describe(), ": this device does not train data parallel");
  }
  // Uploads the student's weights, the teacher's (distill; nullptr for pretrain) and the optimizer's state (m, v,
  // step count), pairing parameters by HF name. The host objects must outlive the device's use of them.
  virtual void attach(Model& student, Model* teacher, AdamW& optimizer) = 0;
  // One optimisation step (contract above). Returns the loss record as train_batch_gradient does (kept_bytes: the
  // device memory of one micro-batch's kept activations); *grad_norm receives the norm before clipping.
  virtual BatchLoss step(const PackedBatch& batch, int64_t micro_rows, double tau, double clip, double* grad_norm,
                         size_t num_languages) = 0;
  // One evaluation pass (contract above; an EvalPass of train/eval.h). Call after attach.
  virtual void evaluate_pass(const PackedBatch& batch, EvalSums& sums) = 0;
  // Copies the student's weights and the AdamW state (m, v, step count) back into the attached host objects.
  virtual void sync_to_host() = 0;
};

}  // namespace hlm
