// The optimizer step of training on the GPU: global gradient norm, clipping and AdamW over a CudaModel's tensors,
// with fp32 master weights and fp32 state on the device. The device twin of the CPU trainer's
//   norm = clip_grad_norm(grads, max_norm);  if (finite) AdamW::step();
// (train/grad_utils.h, train/adamw.h), built from the kernels of ops/adamw (grad_norm_cuda.h, adamw_cuda.h).
//
// Parameters are paired by HF name (CudaModel::named_tensors): param i of the weights model gets grad i of the
// gradient holder (CudaModel::zeros_like). Each carries its own lr and weight decay (the caller's groups and
// schedule: set them before each step). State m, v is zero at construction (set_state for a resume).
// Numerics: the norm in fp64 as the CPU; the clip scale min(1, c/‖g‖) in fp32 on the device and applied inside the
// AdamW kernel (the CPU scales the gradients in fp32 first); each element updated in fp32 where the CPU uses double
// (docs/cuda.md, adamw). The step waits for the norm (one 8-byte read) to decide whether to skip, then updates every
// parameter in ONE launch (adamw_multi_step_cuda), bit-identical to one adamw_step_cuda per parameter.
// bf16 copies (mixed precision): after set_bf16_copies the same launch also writes each registered parameter's bf16
// copy from the updated fp32 value, with the bits CudaModel::refresh_bf16 would give, so no refresh pass is needed.
// 8-bit moments (state Q8, memory plan adam8; ops/adamw/adamw_lowmem.h): m and v held as block-wise codes and scales,
// one adamw_lowmem_step_cuda launch per parameter after the norm; the bf16 copies are then re-rounded by the caller
// (CudaModel::refresh_bf16: writes_bf16_copies() stays false). The host AdamW of the same format exchanges the codes
// and scales byte for byte (set_q8_state / q8_state), so checkpoints and resumes are exact.
// bf16 masters (MasterFormat::Bf16Sr, memory plan lean; train/cuda/cuda_bf16_masters.h): a weight whose fp32 slot
// was freed is updated in its bf16 copy (which is its master), every other parameter in its fp32 storage holding bf16
// values; both rounded stochastically with the bits of the host AdamW of the same config (adamw_sr_base(sr_seed,
// step, name)), so a CPU step and a GPU step from the same state and gradients give the same bits. Gradients may be
// bf16 (cuda_hold_bf16_linear_grads): the norm and the update widen them exactly. Needs state Q8 or F32 moments
// with the low-memory kernel (one launch per parameter, as Q8).
#pragma once
#include <string>
#include <vector>

#include "models/cuda/cuda_model.h"
#include "ops/adamw/adamw_lowmem.h"

namespace hlm {

struct CudaAdamWParam {
  std::string name;
  CudaTensor* param = nullptr;       // f32 (bf16 under bf16 masters: a linear's copy), updated in place
  const CudaTensor* grad = nullptr;  // f32 (or bf16, see above), same shape, not modified
  double lr = 0.0;                   // set per step (schedule)
  double weight_decay = 0.0;
};

class CudaAdamW {
 public:
  // Pairs weights' and grads' tensors by name (same config; internal error otherwise), lr 0 and weight decay 0 until
  // set. betas in [0, 1), eps ≥ 0.
  // master Bf16Sr: freed fp32 slots of `weights` are updated in their bf16 copies; sr_seed is the host
  // AdamWConfig::sr_seed. A freed slot without a copy is an internal error.
  // with_state false: no moments are held, fp32 or 8-bit (ZeRO-1 holds its shard's: train/cuda/cuda_data_parallel.h);
  // step, set_state, set_q8_state and q8_state are then refused.
  CudaAdamW(CudaContext& ctx, CudaModel& weights, CudaModel& grads, double beta1 = 0.9, double beta2 = 0.999,
            double eps = 1e-8, AdamWStateFormat state = AdamWStateFormat::F32,
            MasterFormat master = MasterFormat::F32, uint64_t sr_seed = 0, bool with_state = true);
  AdamWStateFormat state_format() const { return state_; }
  MasterFormat master_format() const { return master_; }
  // 8-bit moments of parameter i (state Q8 only): from / to the host format, byte for byte (waits for the stream).
  void set_q8_state(size_t i, const AdamWQ8State& q);
  AdamWQ8State q8_state(size_t i) const;

  std::vector<CudaAdamWParam>& params() { return params_; }
  int64_t step_count() const { return step_; }
  // State of parameter i from the host (a resume, or a CPU optimizer's state; f32, the parameter's shape; quantized
  // on the device under Q8) and the step count the next step continues from.
  void set_state(size_t i, const Tensor& exp_avg, const Tensor& exp_avg_sq);
  void set_step_count(int64_t step);
  // State of parameter i (device f32, the parameter's shape), e.g. to copy it back for a checkpoint.
  const CudaTensor& exp_avg(size_t i) const { return exp_avg_[i]; }
  const CudaTensor& exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }

  // Registers the bf16 copies of the weights model (CudaModel::bf16_copies()): from now on every step also writes the
  // copy each slot holds at that time (nothing while a slot is empty, i.e. in the fp32 mode). Every listed weight must
  // be one of the parameters with the same element count (internal error otherwise); a later call replaces the list.
  void set_bf16_copies(const std::vector<CudaModel::Bf16Copy>& copies);
  // Whether set_bf16_copies was called (then a step leaves the registered copies up to date).
  bool writes_bf16_copies() const { return writes_bf16_; }

  // Global norm of every gradient; when it is finite: clip scale min(1, max_norm / norm) (max_norm > 0) and one
  // AdamW update of every parameter with its lr and weight decay, and the step count advances. When it is not
  // finite nothing changes. Returns the norm before clipping (as clip_grad_norm).
  double step(double max_norm);
  // The global norm of every gradient alone (no clipping, no update), e.g. for a step skipped on a non-finite loss.
  double grad_norm();

 private:
  CudaContext* ctx_;
  std::vector<CudaAdamWParam> params_;
  std::vector<CudaTensor> exp_avg_, exp_avg_sq_;  // F32: per parameter
  struct Q8Device {
    CudaTensor q_m, q_v, absmax_m, absmax_v;  // codes (raw bytes) and block scales (f32)
  };
  std::vector<Q8Device> q8_;                    // Q8: per parameter
  AdamWStateFormat state_ = AdamWStateFormat::F32;
  MasterFormat master_ = MasterFormat::F32;
  uint64_t sr_seed_ = 0;
  bool with_state_ = true;
  std::vector<CudaTensor*> bf16_;        // per parameter: the slot of its bf16 copy, or nullptr
  bool writes_bf16_ = false;
  CudaTensor table_;                     // device workspace of adamw_multi_step_cuda (the list's table)
  std::vector<unsigned char> staging_;   // its host staging buffer (pageable: see adamw_multi_step_cuda)
  CudaTensor norm_, scale_;  // device double [1], float [1]
  double beta1_, beta2_, eps_;
  int64_t step_ = 0;

  // Queues the norm (and with max_norm > 0 the clip scale into scale_) and waits for the norm.
  double global_norm(double max_norm);
};

}  // namespace hlm
