// A Model on the GPU: its weights uploaded once (f32; CudaTensor carries the dtype, so bf16 copies can be added) and
// the forward of Model::forward (models/model_forward.cpp) over a packed TokenBatch, for every architecture (qwen3,
// granite, olmo_hybrid, qwen3_hybrid): the same dataflow, the same capture points, the same logits.
//
// Execution: everything is queued on the context's one stream; scratch comes from its caching allocator. The host
// waits only to download what it must: a capture point the caller wants (then the value arrives as a host Tensor
// [T, hidden] or [T, V], valid during the call, as on the CPU) and the logits.
// Bad input: the batch is validated on the host (as the CPU does); a token id outside the vocabulary or a position
// outside the rope table cannot throw in a kernel, so the kernels set an error flag, which is read back before any
// capture is handed out and after the forward, and turned into the CPU's input error.
// Numerics: the CUDA ops' (docs/cuda.md): fp32 storage and compute, cuBLASLt fp32 GEMMs, fp32 block sums in the norms,
// flash attention, the fp32 token recurrence of the gated delta rule. Expect ~1e-6..1e-5 relative differences.
// Training (models/cuda/cuda_model_train.{h,cpp}): forward_train keeps the residual streams like ForwardTrace (and,
// under Recompute::None, every layer's intermediates), and backward mirrors models/model_train.cpp's model_backward
// with per-layer recomputation or from the kept intermediates (bit-identical gradients either way); gradients live
// in a second CudaModel of the same config (zeros_like), so every weight has its gradient in the same slot.
// bf16 compute mode (set_bf16_compute, cuda_model_precision.cpp): every linear and the LM head keep a bf16 copy of
// their fp32 weight and run their products on bf16 tensor cores with fp32 results (layers/cuda/cuda_linear.h);
// attention and the gated delta rule run their bf16 kernels. An activation whose only readers are bf16 products is
// rounded once and, where kept, kept in bf16 only (docs/cuda.md lists them); norms, the losses, the other activations
// between ops, the gradients and the master weights stay fp32. After an update of the fp32 weights the copies must be
// re-rounded: refresh_bf16(), or by the optimizer in the same pass (CudaAdamW::set_bf16_copies with bf16_copies()).
// Decode state (paged KV cache, GDN conv and recurrent state) lives in the inference engine (infer/cuda/), which runs
// this decoder with its own stateful mixers (final_hidden_with_mixer).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "layers/capture.h"
#include "layers/cuda/attention_layer_cuda.h"
#include "layers/cuda/gdn_layer_cuda.h"
#include "layers/cuda/lightning_layer_cuda.h"
#include "layers/cuda/mamba2_layer_cuda.h"
#include "layers/cuda/mlp_layer_cuda.h"
#include "models/model.h"
#include "models/model_train.h"
#include "ops/fused_decode/fused_decode_cuda.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"

namespace hlm {

// Which capture points the caller wants downloaded (layer is -1 for final_hidden and logits). Empty = all of them
// (when a Capture is given at all).
using CaptureWanted = std::function<bool(CapturePoint point, int layer)>;

struct CudaTrainTrace;  // models/cuda/cuda_model_train.h
struct CudaKeptLayer;   // models/cuda/cuda_model_train.h

// Whether a pre-norm block's input norms, in the bf16 compute mode, also write their output's bf16 rounding for the
// branch's projections (ops/rmsnorm/rmsnorm_cuda.h, *_rounded_cuda) instead of the cast launch that rounds it after:
// the forward (into the kept bf16 input with kept activations) and the recomputing backward; the same bits either way
// (CudaNormBf16Out.* checks, with and without kept activations). HLM_NORM_BF16_OUT=on|off (core/env_switch.h, read
// once), on by default since session 36 (the 4B step under the seed's recipe on an H100: 0.5 % faster, same bits);
// cuda_model_set_norm_bf16_out overrides it process-wide (tests, A/B benches; -1 goes back to the environment).
bool cuda_model_norm_bf16_out();
void cuda_model_set_norm_bf16_out(int on);

// Whether, in the bf16 compute mode's backward at residual multiplier 1, the norm backwards that write the residual
// gradient d_hidden also write its bf16 rounding (ops/rmsnorm/rmsnorm_cuda.h, rmsnorm_backward_rounded_cuda), which the
// next pre-norm branch's output projection (o_proj, down_proj) then reads instead of a cast launch rounding d_hidden
// again: at the 4B student's [8,192, 2,560] rows, two casts per layer (each reading 84 MB, writing 42 MB) become 42 MB
// more written by the norms. The same bits either way (CudaNormBf16Out.* checks it, with and without kept activations).
// HLM_NORM_BF16_DX=on|off (core/env_switch.h), off by default: its tests passed on an H100 (session 40:
// CudaNormBf16Out.* 0 differing bits, the whole suites with it on), but the 4B step under the seed's recipe did not
// move (8,711.8 / 8,705.7 ms per 96 rows off, 8,711.0 / 8,704.7 on, micro-batch 2, H100), so it stays opt-in;
// cuda_model_set_norm_bf16_dx overrides it process-wide (tests, bench_distill_step --norm-bf16-dx; -1 goes back to the
// environment).
bool cuda_model_norm_bf16_dx();
void cuda_model_set_norm_bf16_dx(int on);

// Whether a post-norm block's two norms (OLMo 3's, olmo_hybrid's attention layers) add their output into the residual
// stream in the norm's own launch (ops/rmsnorm/rmsnorm_cuda.h, rmsnorm_post_residual_forward_cuda) instead of a
// residual add launch after it: the same bits (CudaEngineFusions.PostNormResidualAdd... checks a forward's logits and
// the decode steps' logits both ways, RmsnormCuda.PostResidualFused the op); at batch-1 decode of a 7B OLMo 3, 64
// launches per step fewer, which measured neutral there (5.70, 5.70, 5.63, 5.66 ms per step against 5.71, 5.71, 5.62,
// 5.67 without) and 0.03-0.05 ms less for the 7B hybrid (5.82, 5.83, 5.77, 5.77 against 5.87, 5.88, 5.80, 5.80; H100,
// session 40). HLM_POST_NORM_FUSED=on|off (core/env_switch.h), on by default; cuda_model_set_post_norm_fused overrides
// it process-wide (tests, bench_generate --decode-variants postnorm-add / no-postnorm-add; -1 goes back to the
// environment).
bool cuda_model_post_norm_fused();
void cuda_model_set_post_norm_fused(int on);
// How many post-norm launches took the fused form in this process (issued, not replayed from a CUDA graph): the tests'
// proof that the switch engaged.
int64_t cuda_model_post_norm_fused_launches();

// Whether the inference engine's decode steps (CudaModel::final_hidden_with_mixer at the small-row GEMV's row counts,
// bf16 compute, hidden size > rmsnorm_cuda_warp_max_dim()) leave each norm before a branch to the branch's first GEMV,
// which computes it in its prologue (ops/matmul/gemv_cuda.h, GemvNorm; layers/cuda/cuda_linear.h, CudaDeferredNorm):
// the pre-norm input norms with their residual adds, and a post-norm block's branch norm with its add (OLMo 3). At
// batch 1 the one-block norm launch and its dependent-launch hop before each GEMV go away (64 per step for a 7B
// OLMo 3, 72 for qwen3_4b); the final norm stays a launch. The same bits as the launches (the prologue sums in the
// norm's block-path order; CudaEngineFusions.DecodeNormPrologue... checks the logits, MatmulCuda.GemvNormPrologue...
// the op; both passed on an H100, session 43). Measured SLOWER there (ms per step, separate / prologue: olmo3_7b 5.61
// / 5.65, qwen3_4b 3.75 / 3.79, olmo_hybrid_7b 5.74 / 5.81): every GEMV block re-reads and reduces the whole row, with
// one weight round in flight instead of two. HLM_DECODE_NORM_PROLOGUE=on|off (core/env_switch.h), off by default;
// cuda_model_set_decode_norm_prologue overrides it process-wide (tests, bench_generate --decode-variants
// norm-prologue / no-norm-prologue; -1 goes back to the environment).
bool cuda_model_decode_norm_prologue();
void cuda_model_set_decode_norm_prologue(int on);
// Norms left to a reader this way in this process (host calls, not graph replays): the tests' proof it engaged.
int64_t cuda_model_deferred_norms();

// Branch backwards that read the residual gradient's rounding from a norm backward in this process (host calls), so
// tests can tell that the switch engaged.
int64_t cuda_model_norm_bf16_dx_reads();

// Whether the training trace's residual snapshots (CudaTrainTrace::layer_in, mixer_out: the stream entering each layer
// and after its mixer's add, which the backward's norms read) are written by the pre-norm adds themselves
// (ops/rmsnorm/rmsnorm_cuda.h, rmsnorm_residual_into_forward_rounded_cuda: the add out of place into the next
// snapshot) instead of copied from the one stream buffer after each add: at the 4B student's [8,192, 2,560] rows, 72
// copies of 84 MB per micro-batch fewer (session 36's H200 trace: 41.5 µs each, 3.0 ms of a ~705-ms step). Only where
// every layer is pre-norm; post-norm models keep the copies. The same bits either way (CudaResidualSnapshots.*).
// HLM_RESIDUAL_SNAPSHOTS=on|off (core/env_switch.h), on by default; cuda_model_set_direct_snapshots overrides it
// process-wide (tests, A/B runs; -1 goes back to the environment).
bool cuda_model_direct_snapshots();
void cuda_model_set_direct_snapshots(int on);
// How many residual adds wrote a snapshot directly in this process: the tests' proof that the switch engaged.
int64_t cuda_model_direct_snapshot_adds();

class CudaModel {
 public:
  // Uploads `model`'s weights to ctx's device (checks every tensor's shape first, input errors as the CPU). The host
  // model is not kept: the CudaModel is self-contained.
  static CudaModel upload(const Model& model, CudaContext& ctx);

  const ModelConfig& config() const { return config_; }

  // As Model::forward: logits for every token ([T, V]) or the last token of each sequence ([N, V]), host f32.
  // options.stash must be null (training keeps its trace through forward_train instead).
  Tensor forward(const TokenBatch& batch, const ForwardOptions& options = {}, const Capture& capture = {},
                 const CaptureWanted& wanted = {});

  // ---- Training (cuda_model_train.cpp) ----
  // A gradient holder: every tensor of config's model, zero-filled, on ctx's device (a tied head shares the
  // embedding, as zero_grads_like does on the host).
  static CudaModel zeros_like(const ModelConfig& config, CudaContext& ctx);
  // As model_forward_train: the residual streams entering each layer, after each mixer add, before and after the
  // final norm, all on the device, plus the uploaded batch; under Recompute::None also every layer's intermediates
  // (CudaKeptLayer in cuda_model_train.h).
  CudaTrainTrace forward_train(const TokenBatch& batch, Recompute recompute = Recompute::Layer);
  // The same forward on a batch already on the device (the trace shares its buffers), WITHOUT reading the kernels'
  // error flag back: nothing here waits for the stream, so a CUDA graph can capture it (the captured training step,
  // train/cuda/cuda_train_device.h). The caller checks the flag afterwards (cuda_check_batch_flag,
  // cuda_model_train.h). Call rope_for_positions(max_seqlen) before a capture (a table that grows copies and waits).
  CudaTrainTrace forward_train(const CudaTokenBatch& device_batch, Recompute recompute);
  // The final hidden states [T, hidden] (device) of forward_train, keeping nothing else: a frozen teacher's forward
  // and evaluation (no backward follows, so no residual streams are cloned or held).
  CudaTensor forward_final_hidden(const TokenBatch& batch);
  // The same on a batch already on the device, without reading the error flag back (nothing waits for the stream:
  // the teacher's forward queued on the side stream, train/cuda/cuda_train_device.cpp); the caller checks the flag
  // afterwards (cuda_check_batch_flag).
  CudaTensor forward_final_hidden(const CudaTokenBatch& device_batch);
  // As model_backward: grads += d loss / d weights from d_final_hidden [T, hidden] (device). grads comes from
  // zeros_like(config()); the LM head's own gradient comes from the loss, not from here. Reads the trace's kept
  // intermediates where it has them, recomputes them otherwise: the same gradients to the bit.
  // layer_done (may be empty): called on the host as the backward is QUEUED, with num_hidden_layers once the final
  // norm's gradient is queued, then with i once layer i's gradients are (i = L-1 .. 0): gradients queued before the
  // call are final on the stream from that point (the data-parallel overlap, train/cuda/cuda_data_parallel.h). The
  // embedding's gradient is queued last, after the call with 0. The hook queues nothing on the stream itself.
  void backward(const CudaTrainTrace& trace, const float* d_final_hidden, CudaModel& grads,
                const std::function<void(int)>& layer_done = {});
  // Every tensor to zero (queued on the stream), and every linear marked weight_zeroed, so that the next backward
  // into this gradient holder writes each linear's weight gradient instead of adding it (cuda_linear.h).
  void set_zero();
  // Copies every tensor into the same slot of `host`, which must be shaped like this model (zero_grads_like(config())
  // or the host weights).
  void download_into(DecoderWeights& host) const;
  // Every tensor once, by canonical HF name and tensor-table group, in named_parameters order (a tied head is the
  // embedding, listed once). The pointers stay valid while this model lives.
  struct NamedTensor {
    std::string name;
    std::string group;
    CudaTensor* tensor;
  };
  std::vector<NamedTensor> named_tensors();
  // The LM head's weight [V, hidden] (the embedding when tied); internal error with bf16 weights only.
  float* lm_head_weight() const;

  // ---- Inference (infer/cuda/cuda_engine.cpp: paged KV cache and GDN state) ----
  // A replacement token mixer: out [T, hidden] ← the stateful mixer of layer `layer` over in [T, hidden] (device
  // fp32, in.f32; for a post-norm block `in` is the residual stream, as for forward's own mixer). `in` may carry a
  // deferred norm (cuda_linear.h): the mixer's first reader of it must be a cuda_linear call, or cuda_linear_settle.
  using MixerOverride = std::function<void(int layer, float* out, const CudaLinearInput& in)>;
  // The final hidden states [T, hidden] (device) of forward's decoder over the device batch `b` with every token
  // mixer replaced by `mixer`: the embedding, norms, MLPs, residual adds and multipliers are forward's own.
  CudaTensor final_hidden_with_mixer(const CudaBatchView& b, const MixerOverride& mixer);
  // Layer `layer`'s mixer weights (internal error when the layer is of the other kind).
  const CudaAttentionWeights& attention_weights(int layer) const;
  const CudaGdnWeights& gdn_weights(int layer) const;
  const CudaMamba2Weights& mamba2_weights(int layer) const;
  const CudaLightningWeights& lightning_weights(int layer) const;
  // The device cos/sin table covering positions [0, positions) (nullptr when the model has no rope).
  const RopeCudaTable* rope_for_positions(int64_t positions) { return rope_table(positions); }
  // Frees that table: the next use builds it again (host cos/sin + upload), as a new process would — benchmarks
  // that time a first prefill call it (bench_generate: ~1.5 s of a 917,504-token prefill, session 48).
  void release_rope_table() {
    rope_cos_ = {};
    rope_sin_ = {};
    rope_ = {};
  }
  CudaContext& context() const { return *ctx_; }

  // ---- Precision (cuda_model_precision.cpp) ----
  // Switches the bf16 compute mode on (allocates and fills the bf16 copies) or off (frees them). A gradient holder
  // never needs it.
  void set_bf16_compute(bool on);
  bool bf16_compute() const { return bf16_compute_; }
  // Re-rounds every bf16 copy from its fp32 weight (queued); nothing in the fp32 mode.
  void refresh_bf16();
  // Every fp32 weight that has a bf16 copy in the bf16 mode (each linear's weight; the LM head's, which is the
  // embedding when tied) with the slot of its copy. The slot holds the copy (bf16, the weight's shape) while the bf16
  // mode is on and is empty (raw() == nullptr) otherwise; set_bf16_compute refills the same slots, so the pointers
  // stay valid while this model lives. A writer of the copies must give refresh_bf16's bits (cast_f32_to_bf16_cuda).
  struct Bf16Copy {
    const CudaTensor* weight;
    CudaTensor* copy;
  };
  std::vector<Bf16Copy> bf16_copies();
  // The head for lm_head_loss_cuda over n rows of final hidden states (device): in the bf16 mode `hidden` is
  // rounded into `scratch`, which the caller keeps until the loss call is queued.
  LmHeadCuda lm_head_for(const float* hidden, int64_t n, CudaTensor& scratch) const;
  // Bytes of device memory held: fp32 weights (those still held), and the bf16 copies.
  size_t weight_bytes() const;
  size_t bf16_copy_bytes() const;

  // ---- bf16 inference weights (cuda_model_precision.cpp) ----
  // Inference only: switches the bf16 compute mode on and then FREES the fp32 copies of every linear's weight, of the
  // LM head and of the embedding (the embedding is looked up from its bf16 rounding: the head's copy when tied, its
  // own otherwise), so each of those weights is held once, in bf16, on the device. Norms, biases, convs and the GDN
  // gate parameters stay fp32 (small). Tensor by tensor, so the device never holds much more than the fp32 model; the
  // freed blocks are returned to the driver. Afterwards forward() and final_hidden_with_mixer() work (LM head on bf16
  // tensor cores from the final hidden states rounded to bf16); training, download_into, refresh_bf16 and
  // set_bf16_compute are refused (internal error: the fp32 weights are gone). Irreversible.
  void drop_fp32_weights();
  bool bf16_weights_only() const { return bf16_weights_only_; }
  // The LM head's bf16 weight [V, hidden] (the bf16 compute mode; nullptr otherwise).
  const __nv_bfloat16* lm_head_weight_bf16() const;

  // ---- The fused batch-1 decode (ops/fused_decode/fused_decode_cuda.h; run by infer/cuda/cuda_engine.cpp) ----
  // Why this model cannot run it ("" when it can): it needs every layer to be a pre-norm full-attention block (q/k
  // norms per head or none, no output gate, no bias) with a dense SwiGLU MLP, RMSNorm, and the bf16 compute mode.
  std::string fused_decode_refusal() const;
  // Layer `layer`'s weights as the kernel reads them (the cache pointers are left null: the engine owns the cache).
  FusedDecodeLayer fused_decode_layer(int layer) const;
  // The decoder's first step: out [T, hidden] ← the embedding of b's ids (times the embedding multiplier).
  void embed(const CudaBatchView& b, float* out) const;
  // The final norm's weight [hidden].
  const float* final_norm_weight() const { return norm_.data<float>(); }

 private:
  struct Layer;
  using DeviceEmit = std::function<void(CapturePoint point, int layer, const CudaTensor& value)>;
  // The residual stream kept per layer for the backward: (*layer_in)[i] entering layer i, (*mixer_out)[i] after its
  // mixer's add (run_decoder resizes both to the layer count).
  struct ResidualSnapshots {
    std::vector<CudaTensor>* layer_in;
    std::vector<CudaTensor>* mixer_out;
  };
  // Embedding, every layer and the final norm over a device batch: `hidden` ends as the stream entering the final
  // norm, `normed` as the final hidden states; emit sees each capture point's device value in forward order. kept:
  // nullptr, or gets one CudaKeptLayer per layer (Recompute::None).
  // mixer_override: nullptr, or the inference engine's stateful mixers (final_hidden_with_mixer).
  // defer_norms: leave each branch's input norm to the branch's first GEMV (cuda_model_decode_norm_prologue; taken
  // only at the GEMV's row counts, bf16 compute, hidden sizes above a warp row, without kept activations or snapshots).
  // snapshots: nullptr, or the residual stream per layer (cuda_model_direct_snapshots: written by the adds when every
  // layer is pre-norm, else copied); emit then sees the snapshot tensors at AttnIn / AttnOut.
  void run_decoder(const CudaBatchView& b, const RopeCudaTable* rope, CudaTensor& hidden, CudaTensor& normed,
                   const DeviceEmit& emit, std::vector<CudaKeptLayer>* kept = nullptr,
                   const MixerOverride* mixer_override = nullptr, const ResidualSnapshots* snapshots = nullptr,
                   bool defer_norms = false);
  // Calls fn(device tensor, host tensor) for every tensor of this model and the same slot of `host`.
  template <class Self, class Fn>
  static void for_each_tensor(Self& self, DecoderWeights& host, const Fn& fn);
  // Calls fn(CudaLinear&) for every linear of every layer (not the head).
  template <class Fn>
  void for_each_linear(const Fn& fn);
  // Makes the device cos/sin table cover positions [0, positions) (rebuilt only when it must grow).
  const RopeCudaTable* rope_table(int64_t positions);

  CudaContext* ctx_ = nullptr;
  ModelConfig config_;
  RopeTable rope_host_;
  CudaTensor embed_tokens_;  // [V, hidden]
  std::vector<std::shared_ptr<Layer>> layers_;
  CudaTensor norm_;          // [hidden]
  CudaTensor lm_head_;       // [V, hidden]; empty when tied (embed_tokens_ is the head)
  bool tied_head_ = false;
  CudaTensor lm_head_bf16_;  // [V, hidden] bf16 copy of the head (embedding when tied) in the bf16 mode
  bool bf16_compute_ = false;
  CudaTensor embed_bf16_;  // [V, hidden] bf16 embedding of an untied model after drop_fp32_weights
  bool bf16_weights_only_ = false;
  CudaTensor rope_cos_, rope_sin_;
  RopeCudaTable rope_{};
};

}  // namespace hlm
