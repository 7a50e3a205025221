// AdamW with decoupled weight decay, matching torch.optim.AdamW (amsgrad=False, maximize=False), step t = 1, 2, ...:
//   p ← p − lr·wd·p                                   (decoupled decay, applied first, with the current lr)
//   m ← β1·m + (1 − β1)·g ;  v ← β2·v + (1 − β2)·g²
//   p ← p − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + eps)   (eps added AFTER the sqrt of the corrected v)
// State m, v is fp32 per parameter (same shape), zero-initialised; the scalar coefficients are computed in double and
// each element is updated in double and rounded to fp32 once. Step count is shared by all parameters (every
// parameter is stepped every time, as in the seed's Algorithm 1).
// Parameter groups: each has a name, a peak learning rate (the schedule's η̂_k, see lr_schedule.h), the current lr
// used by step(), and a weight decay. The seed (Table C.3, Algorithm 1) uses two groups, "rec" (converted GDN layers,
// η̂ = 7e-5) and "rest" (η̂ = 2e-5), β = (0.9, 0.999), eps = 1e-8, weight decay 0.01.
// Which parameters get no weight decay: see default_weight_decay().
// Low-memory storage (AdamWConfig::state, ::master; ops/adamw/adamw_lowmem.h, docs/training.md "Memory plans"):
//   state Q8: m and v held as 8-bit block-wise codes with a per-block absmax; master Bf16Sr: every parameter is kept
//   bf16-representable (rounded to nearest once at construction, then updated with seeded stochastic rounding; the
//   tensors stay f32 on the host, their values bf16). With either, step() runs adamw_lowmem_step_ref (fp32 per
//   operation, the CUDA kernel's bits) instead of the double-precision update; with neither, nothing changes.
// Non-goals: paged states, amsgrad, sparse gradients, per-parameter step counts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/adamw/adamw_lowmem.h"

namespace hlm {

// Whether a parameter (by HF name) gets weight decay. No decay for:
//   - normalisation weights: any name containing "norm" (input_layernorm, post_attention_layernorm, q_norm, k_norm,
//     linear_attn.norm / o_norm, model.norm, OLMo's *_layer_norm), as HF Trainer's get_decay_parameter_names does;
//   - biases: names ending in "bias" (attention/MLP biases and the GDN dt_bias), also as HF Trainer does;
//   - the GDN log-decay rate "A_log" (FLA / Mamba mark A_log and dt_bias `_no_weight_decay`: shrinking A_log
//     towards 0 would move the decay rate e^A_log towards 1, i.e. change the layer's memory, not regularise it).
// Everything else decays, including embed_tokens, lm_head and the short-convolution weights (HF Trainer decays them;
// the seed's Table C.3 lists a single weight decay of 0.01 and no exclusions).
bool default_weight_decay(const std::string& hf_name);

struct AdamWGroup {
  std::string name;           // e.g. "rec", "rest", or "rest_no_decay"
  double peak_lr = 0.0;       // η̂_k of the schedule
  double weight_decay = 0.0;  // decoupled decay coefficient
  double lr = 0.0;            // learning rate used by the next step() (set it from the schedule)
};

struct AdamWParam {
  std::string name;  // HF name
  Tensor param;      // f32, contiguous; updated in place
  Tensor grad;       // f32, contiguous, same shape
  int group = 0;     // index into the groups
};

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  AdamWStateFormat state = AdamWStateFormat::F32;  // moments: fp32 or 8-bit block-wise
  MasterFormat master = MasterFormat::F32;         // master weights: fp32 or bf16 with stochastic rounding
  uint64_t sr_seed = 0;                            // stochastic rounding stream (with the step count and the name)
};


class AdamW {
 public:
  // Checks every parameter (f32, contiguous, grad of the same shape, valid group, unique name) and allocates state.
  // with_state false: no moments at all, a parameter and group table only (ZeRO-1 keeps the moments in a shard's own
  // AdamW: train/data_parallel.h); step(), the state accessors and setters are then internal errors.
  AdamW(std::vector<AdamWGroup> groups, std::vector<AdamWParam> params, AdamWConfig config = {},
        bool with_state = true);

  // One update of every parameter with its group's current lr. Callers skip it when the gradient is non-finite.
  void step();

  std::vector<AdamWGroup>& groups() { return groups_; }
  const std::vector<AdamWGroup>& groups() const { return groups_; }
  const std::vector<AdamWParam>& params() const { return params_; }
  std::vector<Tensor> grads() const;  // the gradient tensors (shared storage), for clipping and zeroing
  const AdamWConfig& config() const { return config_; }
  int64_t step_count() const { return step_; }

  // State, for checkpoints: first and second moments of params()[i] (f32; dequantized under Q8), and the step count.
  Tensor exp_avg(size_t i) const;
  Tensor exp_avg_sq(size_t i) const;
  // Copies; shapes must match. Under Q8 the moments are quantized (a conversion from an fp32 state).
  void set_state(size_t i, const Tensor& exp_avg, const Tensor& exp_avg_sq);
  // The 8-bit moments themselves (state Q8 only; internal error otherwise): saved and restored bit for bit.
  const AdamWQ8State& q8_state(size_t i) const;
  void set_q8_state(size_t i, AdamWQ8State state);  // sizes must match the parameter
  void set_step_count(int64_t step);
  // Whether the moments still hold their initial values (zeros; under Q8 the codebooks' zero codes and zero scales):
  // no step(), set_state() or set_q8_state() since construction, the only writers of the moments. A device copy
  // built with the same initial bytes then needs no upload of them (CudaTrainDevice::attach).
  bool moments_initial() const { return moments_initial_; }

 private:
  std::vector<AdamWGroup> groups_;
  std::vector<AdamWParam> params_;
  AdamWConfig config_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // state F32
  std::vector<AdamWQ8State> q8_;              // state Q8
  int64_t step_ = 0;
  bool with_state_ = true;
  bool moments_initial_ = true;
  void check_state(const char* what) const;

  void step_lowmem();
};

}  // namespace hlm
