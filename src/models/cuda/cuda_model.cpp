// CudaModel: upload and forward, read top to bottom beside models/model_forward.cpp (same order of operations).
#include "models/cuda/cuda_model.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "models/architecture.h"
#include "models/cuda/cuda_model_layer.h"
#include "models/cuda/cuda_model_train.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/residual/residual_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {
OverridableSwitch g_norm_bf16_out{"HLM_NORM_BF16_OUT", true};  // on since session 36 (cuda_model.h)
}  // namespace

bool cuda_model_norm_bf16_out() { return g_norm_bf16_out.on(); }
void cuda_model_set_norm_bf16_out(int on) { g_norm_bf16_out.set(on); }

namespace {
OverridableSwitch g_norm_bf16_dx{"HLM_NORM_BF16_DX", false};       // opt-in: measured neutral (cuda_model.h)
OverridableSwitch g_post_norm_fused{"HLM_POST_NORM_FUSED", true};  // cuda_model.h
std::atomic<int64_t> g_post_norm_fused_launches{0};                // cuda_model_post_norm_fused_launches
}  // namespace

bool cuda_model_post_norm_fused() { return g_post_norm_fused.on(); }
void cuda_model_set_post_norm_fused(int on) { g_post_norm_fused.set(on); }
int64_t cuda_model_post_norm_fused_launches() { return g_post_norm_fused_launches.load(); }

namespace {
OverridableSwitch g_decode_norm_prologue{"HLM_DECODE_NORM_PROLOGUE", false};  // cuda_model.h
std::atomic<int64_t> g_deferred_norms{0};                                     // cuda_model_deferred_norms
}  // namespace

bool cuda_model_decode_norm_prologue() { return g_decode_norm_prologue.on(); }
void cuda_model_set_decode_norm_prologue(int on) { g_decode_norm_prologue.set(on); }
int64_t cuda_model_deferred_norms() { return g_deferred_norms.load(); }

namespace {
OverridableSwitch g_direct_snapshots{"HLM_RESIDUAL_SNAPSHOTS", true};  // cuda_model.h
std::atomic<int64_t> g_direct_snapshot_adds{0};                        // cuda_model_direct_snapshot_adds
}  // namespace

bool cuda_model_direct_snapshots() { return g_direct_snapshots.on(); }
void cuda_model_set_direct_snapshots(int on) { g_direct_snapshots.set(on); }
int64_t cuda_model_direct_snapshot_adds() { return g_direct_snapshot_adds.load(); }

bool cuda_model_norm_bf16_dx() { return g_norm_bf16_dx.on(); }
void cuda_model_set_norm_bf16_dx(int on) { g_norm_bf16_dx.set(on); }
// cuda_model_norm_bf16_dx_reads: cuda_model_train.cpp, beside the backward that counts them.

namespace {

AttentionDims attention_dims(const ModelConfig& c, const DecoderHyper& hyper) {
  return {c.num_attention_heads, c.num_key_value_heads, c.head_dim, hyper.attention_scale,
          static_cast<float>(c.rms_norm_eps)};
}

CudaTensor upload_norm(CudaContext& ctx, const Tensor& t, int64_t hidden, const std::string& name) {
  HLM_CHECK_INPUT(t.defined() && t.numel() == hidden, "tensor ", name, " must have ", hidden, " entries");
  return cuda_upload_f32(ctx, t, name.c_str());
}

}  // namespace

CudaModel CudaModel::upload(const Model& model, CudaContext& ctx) {
  CudaModel m;
  m.ctx_ = &ctx;
  m.config_ = model.config();
  const ModelConfig& c = m.config_;
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  const DecoderHyper hyper = spec.hyper(c);
  const DecoderWeights& w = model.weights();
  const int64_t H = c.hidden_size;
  // Routed experts run here (layers/cuda/moe_layer_cuda.h) as a layer's whole FFN, or beside a shared MLP
  // (granitemoehybrid: the shared SwiGLU's output plus the experts', as the CPU adds them).
  HLM_CHECK_INPUT(!spec.parallel_block && !spec.layer_norm && !c.rope.interleaved && !c.nope_full_layers,
                  "the CUDA path does not run parallel LayerNorm blocks, interleaved RoPE or NoPE full layers yet (",
                  c.model_type, "): use --device cpu");
  ctx.make_current();
  if (c.use_rope) m.rope_host_ = model.rope();
  // One RoPE table serves every layer here: a model whose sliding_attention layers rotate differently (OLMo-3 with
  // YaRN on its full layers) runs on the CPU only so far.
  for (int64_t i = 0; c.use_rope && i < c.num_hidden_layers; ++i) {
    const RopeTable* r = model.layer_rope(i);
    HLM_CHECK_INPUT(r->inv_freq == model.rope().inv_freq && r->attention_scaling == model.rope().attention_scaling &&
                        r->max_position == model.rope().max_position,
                    "the CUDA path does not run per-layer-type RoPE yet (", c.model_type, ": the sliding_attention ",
                    "layers' rope_parameters differ from the full_attention layers'): use --device cpu");
  }
  m.embed_tokens_ = cuda_upload_f32(ctx, w.embed_tokens, "model.embed_tokens.weight");
  HLM_CHECK_INPUT(w.embed_tokens.shape() == Shape({c.vocab_size, H}), "model.embed_tokens.weight has shape ",
                  w.embed_tokens.shape().str(), ", expected [", c.vocab_size, ", ", H, "]");
  for (int i = 0; i < static_cast<int>(c.num_hidden_layers); ++i) {
    const DecoderLayerWeights& lw = w.layers[static_cast<size_t>(i)];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    auto layer = std::make_shared<Layer>();
    layer->full_attention = c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention;
    const bool post_norm = layer->full_attention && spec.attention_post_norm;
    layer->mamba2 = c.layer_kinds[static_cast<size_t>(i)] == LayerKind::Mamba2;
    layer->lightning = c.layer_kinds[static_cast<size_t>(i)] == LayerKind::Lightning;
    if (layer->full_attention)
      layer->self_attn = cuda_upload_attention(ctx, lw.self_attn, attention_dims(c, hyper));
    else if (layer->mamba2)
      layer->mamba = cuda_upload_mamba2(ctx, lw.mamba, mamba2_dims(c));
    else if (layer->lightning)
      layer->lightning_attn = cuda_upload_lightning(ctx, lw.lightning, lightning_dims(c, i));
    else
      layer->linear_attn = cuda_upload_gdn(ctx, lw.linear_attn, gdn_dims(c));
    if (!post_norm) layer->input_layernorm = upload_norm(ctx, lw.input_layernorm, H, prefix + "input_layernorm");
    layer->post_attention_layernorm =
        upload_norm(ctx, lw.post_attention_layernorm, H, prefix + "post_attention_layernorm");
    if (post_norm)
      layer->post_feedforward_layernorm =
          upload_norm(ctx, lw.post_feedforward_layernorm, H, prefix + "post_feedforward_layernorm");
    layer->moe = c.moe_layer(i);
    layer->shared_mlp = spec.shared_mlp;
    if (layer->moe) layer->moe_ffn = cuda_upload_moe(ctx, lw.moe, moe_dims(c));
    if (!layer->moe || layer->shared_mlp) layer->mlp = cuda_upload_mlp(ctx, lw.mlp);
    m.layers_.push_back(std::move(layer));
  }
  m.norm_ = upload_norm(ctx, w.norm, H, "model.norm");
  // A tied head shares the embedding's storage on the host; upload it once.
  m.tied_head_ = w.lm_head.weight.defined() && w.lm_head.weight.raw() == w.embed_tokens.raw();
  if (!m.tied_head_) {
    HLM_CHECK_INPUT(w.lm_head.weight.defined() && w.lm_head.weight.shape() == Shape({c.vocab_size, H}),
                    "lm_head.weight must have shape [", c.vocab_size, ", ", H, "]");
    m.lm_head_ = cuda_upload_f32(ctx, w.lm_head.weight, "lm_head.weight");
  }
  return m;
}

const RopeCudaTable* CudaModel::rope_table(int64_t positions) {
  if (!config_.use_rope) return nullptr;
  if (rope_.num_positions < positions) {
    // Grow geometrically so that a run of growing batches rebuilds the table a few times only; never past the
    // table's own limit (dynamic rope), which rope_cuda_table_host enforces with the CPU's input error.
    int64_t n = std::max<int64_t>(positions, std::min<int64_t>(2 * rope_.num_positions, int64_t{1} << 16));
    if (rope_host_.max_position > 0) n = std::max(positions, std::min(n, rope_host_.max_position));
    std::vector<float> cos, sin;
    rope_cuda_table_host(cos, sin, rope_host_, n);
    const int64_t half = rope_host_.rotary_dim / 2;
    rope_cos_ = CudaTensor::empty(*ctx_, {n, half});
    rope_sin_ = CudaTensor::empty(*ctx_, {n, half});
    cuda_copy_to_device(*ctx_, rope_cos_.raw(), cos.data(), cos.size() * sizeof(float));
    cuda_copy_to_device(*ctx_, rope_sin_.raw(), sin.data(), sin.size() * sizeof(float));
    rope_ = {rope_cos_.data<float>(), rope_sin_.data<float>(), n, rope_host_.head_dim, rope_host_.rotary_dim};
  }
  return &rope_;
}

void CudaModel::embed(const CudaBatchView& b, float* out) const {
  const ModelConfig& c = config_;
  const DecoderHyper hyper = architecture_spec(c.architecture).hyper(c);
  const EmbeddingCudaParams p{b.tokens, c.vocab_size, c.hidden_size, hyper.embedding_multiplier};
  if (bf16_weights_only_)  // the embedding is held in bf16 only (drop_fp32_weights)
    embedding_forward_cuda(out, tied_head_ ? lm_head_bf16_.data<__nv_bfloat16>() : embed_bf16_.data<__nv_bfloat16>(),
                           b.ids, p, b.error_flag, ctx_->stream());
  else
    embedding_forward_cuda(out, embed_tokens_.data<float>(), b.ids, p, b.error_flag, ctx_->stream());
}

void CudaModel::run_decoder(const CudaBatchView& b, const RopeCudaTable* rope, CudaTensor& hidden, CudaTensor& normed,
                            const DeviceEmit& emit, std::vector<CudaKeptLayer>* kept,
                            const MixerOverride* mixer_override, const ResidualSnapshots* snapshots,
                            bool defer_norms) {
  CudaContext& ctx = *ctx_;
  const ModelConfig& c = config_;
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  const DecoderHyper hyper = spec.hyper(c);
  const int64_t H = c.hidden_size, T = b.tokens;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const AttentionDims adims = attention_dims(c, hyper);
  const cudaStream_t stream = ctx.stream();
  hidden = CudaTensor::empty(ctx, {T, H});            // residual stream [T, H]
  normed = CudaTensor::empty(ctx, {T, H});            // a norm's output [T, H]
  CudaTensor delta = CudaTensor::empty(ctx, {T, H});  // a branch's output [T, H]
  float *h = hidden.data<float>(), *nr = normed.data<float>(), *dl = delta.data<float>();
  embed(b, h);
  const RmsnormCudaParams row_norm{T, H, eps};
  // Pre-norm blocks in the bf16 mode (HLM_NORM_BF16_OUT=on): the input norms also write their output's bf16 rounding
  // (rmsnorm_*_rounded_cuda), the branch's projections read it instead of a cast launch of nr (the same bits). Not
  // with kept activations (their inputs are kept as such roundings already) nor a mixer override (fp32 readers).
  CudaTensor normed16;
  if (bf16_compute_ && kept == nullptr && mixer_override == nullptr && cuda_model_norm_bf16_out())
    normed16 = CudaTensor::empty(ctx, {T, H}, DType::BF16);
  __nv_bfloat16* nr16 = normed16.raw() != nullptr ? normed16.data<__nv_bfloat16>() : nullptr;
  if (kept != nullptr) {
    kept->clear();
    kept->resize(layers_.size());
  }
  // Residual snapshots (the training trace): written by the pre-norm adds themselves when every layer is pre-norm
  // (`direct`; h then moves from snapshot to snapshot and is never updated in place), else copied at the capture
  // points from the one stream buffer.
  bool direct = snapshots != nullptr && cuda_model_direct_snapshots();
  if (snapshots != nullptr) {
    for (std::vector<CudaTensor>* v : {snapshots->layer_in, snapshots->mixer_out}) {
      v->clear();
      v->resize(layers_.size());
    }
    for (const auto& layer : layers_)
      if (layer->full_attention && spec.attention_post_norm) direct = false;
  }
  const auto snapshot = [&](std::vector<CudaTensor>* v, int layer) -> CudaTensor& {
    CudaTensor& t = (*v)[static_cast<size_t>(layer)];
    t = CudaTensor::empty(ctx, {T, H});
    return t;
  };
  // Without the direct form: the stream as it is now, copied into the layer's slot of snapshots->*which (nothing
  // without snapshots).
  const auto copy_snapshot = [&](std::vector<CudaTensor>* ResidualSnapshots::*which, int layer) {
    if (snapshots != nullptr && !direct)
      cuda_copy_device(ctx, snapshot(snapshots->*which, layer).raw(), h, hidden.nbytes());
  };
  // Copy of a [T, H] buffer into a kept slot (exact); nothing without kept activations.
  const auto keep_copy = [&](CudaTensor CudaKeptLayer::*slot, int layer, const CudaTensor& from) {
    if (kept == nullptr) return;
    CudaTensor& to = (*kept)[static_cast<size_t>(layer)].*slot;
    to = CudaTensor::empty(ctx, from.shape());
    cuda_copy_device(ctx, to.raw(), from.raw(), from.nbytes());
  };
  // A pre-norm branch's input `from` (read only by the branch's input projections), kept for the backward: an fp32
  // copy in `slot`, or in the bf16 mode only its bf16 rounding in `slot16`, which the branch's forward then reads
  // instead of rounding `from` again (the same bits). Without kept activations: `from` alone.
  const auto keep_input = [&](CudaTensor CudaKeptLayer::*slot, CudaTensor CudaKeptLayer::*slot16, int layer,
                              const CudaTensor& from) -> CudaLinearInput {
    CudaLinearInput in{from.data<float>(), nullptr};
    if (kept == nullptr) return in;
    if (!bf16_compute_) {
      keep_copy(slot, layer, from);
      return in;
    }
    CudaTensor& to = (*kept)[static_cast<size_t>(layer)].*slot16;
    to = cuda_round_bf16(ctx, from);
    in.bf16 = to.data<__nv_bfloat16>();
    return in;
  };

  // A pre-norm layer's MLP branch (in dl) is added to h by the next norm in the same launch; `pending` marks it.
  bool pending = false;
  float pending_scale = 1.0f;
  // Deferred norms (decode steps of the engine, cuda_model.h: cuda_model_decode_norm_prologue): each norm before a
  // branch is left to the branch's first GEMV, which computes it in its prologue (cuda_linear.h, CudaDeferredNorm)
  // or, when it cannot, launches it first. The stream then moves between `hidden` and `stream_alt` at each add: the
  // GEMV's blocks all read the stream while some write its next value. Only where the norm's rows take the block
  // path's order (longer than a warp row) and no capture, kept activation or snapshot reads the stream in between.
  const bool defer = defer_norms && kept == nullptr && snapshots == nullptr && bf16_compute_ &&
                     H > rmsnorm_cuda_warp_max_dim() && cuda_linear_gemv_may_take(T);
  CudaTensor stream_alt;
  if (defer) stream_alt = CudaTensor::empty(ctx, {T, H});
  const auto next_stream = [&](const float* at) -> float* {
    return at == hidden.data<float>() ? stream_alt.data<float>() : hidden.data<float>();
  };
  std::deque<CudaDeferredNorm> deferred;   // stable addresses: the readers hold pointers
  const CudaDeferredNorm* open_post = nullptr;  // a post-norm add whose result the next branch reads (not issued yet)
  const auto defer_norm = [&](GemvNorm op) -> const CudaDeferredNorm* {
    CudaDeferredNorm& d = deferred.emplace_back();
    d.op = op;
    d.op.eps = eps;
    d.rows = T;
    d.dim = H;
    ++g_deferred_norms;
    return &d;
  };
  // Queues the open post-norm add (before anything but the next branch reads the stream).
  const auto settle_open_post = [&] {
    if (open_post != nullptr) cuda_linear_settle(ctx, CudaLinearInput{h, nullptr, open_post});
    open_post = nullptr;
  };
  // A pre-norm branch's deferred input: nr = norm(h (+ the pending branch)); with a pending branch the stream's next
  // value goes to the other buffer, which h then points at.
  const auto defer_pre_norm = [&](const float* weight) -> CudaLinearInput {
    settle_open_post();
    GemvNorm op;
    op.kind = GemvNorm::kPre;
    op.h = h;
    op.weight = weight;
    op.norm_out = nr;
    op.norm_out16 = nr16;
    if (pending) {
      op.branch = dl;
      op.scale = pending_scale;
      op.h_out = next_stream(h);
      h = op.h_out;
    }
    pending = false;
    return CudaLinearInput{nr, nr16, defer_norm(op)};
  };

  const bool post_norm_fused = cuda_model_post_norm_fused();
  const auto flush_pending = [&] {
    if (pending) residual_add_forward_cuda(h, dl, pending_scale, T * H, stream);
    pending = false;
  };
  // nr = rmsnorm(h (+ the pending branch)), and its bf16 rounding into out16 when given (null: none).
  const auto norm_after_pending = [&](const float* weight, __nv_bfloat16* out16 = nullptr) {
    if (pending)
      rmsnorm_residual_forward_rounded_cuda(nr, out16, h, dl, pending_scale, weight, row_norm, stream);
    else
      rmsnorm_forward_rounded_cuda(nr, out16, h, weight, row_norm, stream);
    pending = false;
  };
  // The same with the stream's next value written to `to` (direct snapshots), which h then points at: the pending add
  // out of place (the same bits), or without one a copy of h first.
  const auto norm_after_pending_into = [&](float* to, const float* weight, __nv_bfloat16* out16 = nullptr) {
    if (pending) {
      rmsnorm_residual_into_forward_rounded_cuda(nr, out16, to, h, dl, pending_scale, weight, row_norm, stream);
      if (direct) ++g_direct_snapshot_adds;
    } else {
      if (to != h) cuda_copy_device(ctx, to, h, static_cast<size_t>(T * H) * sizeof(float));  // (no layers: to == h)
      rmsnorm_forward_rounded_cuda(nr, out16, to, weight, row_norm, stream);
    }
    pending = false;
    h = to;
  };
  // Where the norm before a pre-norm branch writes its output's bf16 rounding: nr16 without kept activations; with
  // them in the bf16 mode (HLM_NORM_BF16_OUT on) the branch's kept bf16 input slot itself, so that no cast of nr
  // follows (the same bits: the norm's rounding is the cast's); null: none.
  const bool kept_norm16 = kept != nullptr && bf16_compute_ && mixer_override == nullptr && cuda_model_norm_bf16_out();
  const auto norm_out16 = [&](CudaTensor CudaKeptLayer::*slot16, int layer) -> __nv_bfloat16* {
    if (nr16 != nullptr || !kept_norm16) return nr16;
    CudaTensor& to = (*kept)[static_cast<size_t>(layer)].*slot16;
    to = CudaTensor::empty(ctx, {T, H}, DType::BF16);
    return to.data<__nv_bfloat16>();
  };
  // A pre-norm branch's input: nr with its rounding when the norm wrote one, else as keep_input gives it.
  const auto branch_input = [&](CudaTensor CudaKeptLayer::*slot, CudaTensor CudaKeptLayer::*slot16,
                                int layer) -> CudaLinearInput {
    if (nr16 != nullptr) return {nr, nr16};
    if (kept_norm16) return {nr, ((*kept)[static_cast<size_t>(layer)].*slot16).data<__nv_bfloat16>()};
    return keep_input(slot, slot16, layer, normed);
  };

  const auto post_norm_layer = [&](int i) {
    return i < static_cast<int>(layers_.size()) && layers_[static_cast<size_t>(i)]->full_attention &&
           spec.attention_post_norm;
  };
  for (int i = 0; i < static_cast<int>(layers_.size()); ++i) {
    const Layer& layer = *layers_[static_cast<size_t>(i)];
    const bool post_norm = post_norm_layer(i);
    AttentionDims ldims = adims;
    ldims.window = c.attention_window(i);  // sliding_attention layers
    CudaKeptLayer* keep = kept != nullptr ? &(*kept)[static_cast<size_t>(i)] : nullptr;
    // The layer forwards: the plain ones, or the ones handing their intermediates to `keep` (same bits).
    const auto mixer = [&](float* out, const CudaLinearInput& in) {
      if (mixer_override != nullptr) {
        (*mixer_override)(i, out, in);  // no kept activations here: in.f32 is set
        return;
      }
      if (layer.mamba2 || layer.lightning) cuda_linear_settle(ctx, in);  // these read in.f32 themselves
      if (layer.full_attention && keep != nullptr)
        keep->attention = attention_layer_forward_keep_cuda(ctx, out, in, layer.self_attn, ldims, rope, b);
      else if (layer.full_attention)
        attention_layer_forward_cuda(ctx, out, in, layer.self_attn, ldims, rope, b);
      else if (layer.mamba2) {  // forward only: training a Mamba-2 model on CUDA is refused (no layer backward)
        HLM_CHECK_INPUT(keep == nullptr && in.f32 != nullptr, "the CUDA path has no Mamba-2 backward (",
                        c.model_type, "): training is not supported");
        mamba2_layer_forward_cuda(ctx, out, in.f32, layer.mamba, mamba2_dims(c), b);
      } else if (layer.lightning) {  // forward only: training a bailing model on CUDA is refused (no layer backward)
        HLM_CHECK_INPUT(keep == nullptr && in.f32 != nullptr, "the CUDA path has no Lightning Attention-2 backward (",
                        c.model_type, "): training is not supported");
        lightning_layer_forward_cuda(ctx, out, in.f32, layer.lightning_attn, lightning_dims(c, i), rope, b);
      }
      else if (keep != nullptr)  // with the chunked rule's kept forward (bf16 mode): its backward reruns nothing
        keep->gdn = gdn_layer_forward_keep_cuda(ctx, out, in, layer.linear_attn, gdn_dims(c), b,
                                                /*keep_rule_scratch=*/true);
      else
        gdn_layer_forward_cuda(ctx, out, in, layer.linear_attn, gdn_dims(c), b);
    };
    const auto mlp = [&](float* out, const CudaLinearInput& in) {
      if (layer.moe) {  // no kept activations: training an MoE model on CUDA is refused (cuda_model_train.cpp)
        cuda_linear_settle(ctx, in);  // the MoE layers read in.f32 themselves
        HLM_CHECK_INPUT(keep == nullptr && in.f32 != nullptr, "the CUDA path has no MoE backward yet (",
                        c.model_type, "): train on --device cpu");
        if (!layer.shared_mlp) {
          moe_layer_forward_cuda(ctx, out, in.f32, layer.moe_ffn, T);
        } else {  // out = shared MLP, then += routed experts (the CPU's out[j] = routed[j] + out[j], same bits)
          mlp_layer_forward_cuda(ctx, out, in.f32, layer.mlp, T);
          CudaTensor routed = CudaTensor::empty(ctx, {T, H});
          moe_layer_forward_cuda(ctx, routed.data<float>(), in.f32, layer.moe_ffn, T);
          residual_add_forward_cuda(out, routed.data<float>(), 1.0f, T * H, stream);
        }
      } else if (keep != nullptr)
        keep->mlp = mlp_layer_forward_keep_cuda(ctx, out, in, layer.mlp, T);
      else
        mlp_layer_forward_cuda(ctx, out, in, layer.mlp, T);
    };
    // A pre-norm layer adds the previous layer's pending MLP branch inside its input norm (one launch); any other
    // reader of the residual stream needs it added first.
    CudaLinearInput deferred_in;  // defer: the branch's input with its norm left to the branch
    if (post_norm) {
      flush_pending();
    } else if (defer) {
      deferred_in = defer_pre_norm(layer.input_layernorm.data<float>());
    } else if (direct) {
      norm_after_pending_into(snapshot(snapshots->layer_in, i).data<float>(), layer.input_layernorm.data<float>(),
                              norm_out16(&CudaKeptLayer::mixer_in16, i));
    } else {
      norm_after_pending(layer.input_layernorm.data<float>(), norm_out16(&CudaKeptLayer::mixer_in16, i));
    }
    copy_snapshot(&ResidualSnapshots::layer_in, i);
    emit(CapturePoint::AttnIn, i, direct ? (*snapshots->layer_in)[static_cast<size_t>(i)] : hidden);
    if (post_norm) {
      // dl = norm(branch in nr), h += dl: one launch when fused (the same bits as the two).
      // next_gemv: the stream's next reader is a branch whose first product takes the norm (a dense MLP, the next
      // layer's mixer when that layer is post-norm too); otherwise the launch below, in place.
      const auto norm_and_add = [&](const CudaTensor& weight, bool next_gemv) {
        if (defer && next_gemv) {  // left to that branch's first GEMV (open_post); the stream moves buffers
          settle_open_post();
          GemvNorm op;
          op.kind = GemvNorm::kPost;
          op.h = h;
          op.branch = nr;
          op.scale = 1.0f;
          op.weight = weight.data<float>();
          op.h_out = next_stream(h);
          op.norm_out = dl;
          open_post = defer_norm(op);
          h = op.h_out;
          return;
        }
        if (post_norm_fused) {
          rmsnorm_post_residual_forward_cuda(dl, h, nr, 1.0f, weight.data<float>(), row_norm, stream);
          ++g_post_norm_fused_launches;
        } else {
          rmsnorm_forward_cuda(dl, nr, weight.data<float>(), row_norm, stream);
          residual_add_forward_cuda(h, dl, 1.0f, T * H, stream);
        }
      };
      // (defer: the stream with the open post-norm add of the layer before, which the mixer's first GEMV computes)
      mixer(nr, {h, nullptr, open_post});
      open_post = nullptr;
      keep_copy(&CudaKeptLayer::mixer_branch, i, normed);
      norm_and_add(layer.post_attention_layernorm, !layer.moe);
      emit(CapturePoint::AttnDelta, i, delta);  // dl is not changed by the add
      copy_snapshot(&ResidualSnapshots::mixer_out, i);
      emit(CapturePoint::AttnOut, i, hidden);
      mlp(nr, {h, nullptr, open_post});
      open_post = nullptr;
      keep_copy(&CudaKeptLayer::mlp_branch, i, normed);
      norm_and_add(layer.post_feedforward_layernorm, post_norm_layer(i + 1));
      emit(CapturePoint::MlpDelta, i, delta);
    } else {
      mixer(dl, defer ? deferred_in : branch_input(&CudaKeptLayer::mixer_in, &CudaKeptLayer::mixer_in16, i));
      emit(CapturePoint::AttnDelta, i, delta);
      // h += branch, then the post-attention norm of h: one launch (the same bits as the add, then the norm), with
      // nr's rounding when nr16 is on.
      if (defer) {  // left to the MLP's first GEMV, the stream moving to the other buffer
        pending = true;
        pending_scale = hyper.residual_multiplier;
        deferred_in = defer_pre_norm(layer.post_attention_layernorm.data<float>());
      } else if (direct) {  // into the layer's mixer_out snapshot (the same bits), which the stream moves to
        float* to = snapshot(snapshots->mixer_out, i).data<float>();
        rmsnorm_residual_into_forward_rounded_cuda(nr, norm_out16(&CudaKeptLayer::mlp_in16, i), to, h, dl,
                                                   hyper.residual_multiplier,
                                                   layer.post_attention_layernorm.data<float>(), row_norm, stream);
        ++g_direct_snapshot_adds;
        h = to;
      } else {
        rmsnorm_residual_forward_rounded_cuda(nr, norm_out16(&CudaKeptLayer::mlp_in16, i), h, dl,
                                              hyper.residual_multiplier, layer.post_attention_layernorm.data<float>(),
                                              row_norm, stream);
        copy_snapshot(&ResidualSnapshots::mixer_out, i);
      }
      emit(CapturePoint::AttnOut, i, direct ? (*snapshots->mixer_out)[static_cast<size_t>(i)] : hidden);
      mlp(dl, defer ? deferred_in : branch_input(&CudaKeptLayer::mlp_in, &CudaKeptLayer::mlp_in16, i));
      emit(CapturePoint::MlpDelta, i, delta);
      pending_scale = hyper.residual_multiplier;  // added by the next norm (or flush_pending)
      pending = true;
    }
  }
  if (defer || direct) {  // the stream entering the final norm into `hidden` (direct: the last snapshot stays as it is)
    settle_open_post();     // (defer: the final norm is a launch)
    norm_after_pending_into(hidden.data<float>(), norm_.data<float>());
  } else {
    norm_after_pending(norm_.data<float>());
  }
}

Tensor CudaModel::forward(const TokenBatch& batch, const ForwardOptions& options, const Capture& capture,
                          const CaptureWanted& wanted) {
  HLM_CHECK_INPUT(options.stash == nullptr,
                  "the CUDA forward keeps no stash (training uses CudaModel::forward_train)");
  CudaContext& ctx = *ctx_;
  ctx.make_current();
  const ModelConfig& c = config_;
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  const DecoderHyper hyper = spec.hyper(c);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const cudaStream_t stream = ctx.stream();

  const CudaTokenBatch device_batch = CudaTokenBatch::upload(ctx, batch);  // validates like the CPU
  const CudaBatchView b = device_batch.view();
  const int64_t T = b.tokens;
  const RopeCudaTable* rope = rope_table(b.max_seqlen);

  // A kernel's error flag becomes the CPU's input error: the first bad token id names itself; otherwise a bad
  // position or cu_seqlens (the host checked both, so this would be an engine bug).
  const auto check_flag = [&] {
    if (!device_batch.error_flagged(ctx)) return;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = batch.ids[static_cast<size_t>(t)];
      HLM_CHECK_INPUT(id >= 0 && id < V, "token id ", id, " at position ", t, " is outside the vocabulary [0, ", V,
                      ")");
    }
    throw_input_error("CUDA forward: a kernel flagged a bad position or cu_seqlens (", b.max_seqlen,
                      " tokens in the longest sequence)");
  };
  const auto emit = [&](CapturePoint point, int layer, const CudaTensor& value) {
    if (!capture || (wanted && !wanted(point, layer))) return;
    check_flag();  // never hand out values computed from bad input
    const Tensor host = cuda_download(ctx, value);
    capture(point, layer, host);
  };

  CudaTensor hidden, normed;
  run_decoder(b, rope, hidden, normed, emit);
  float* nr = normed.data<float>();
  emit(CapturePoint::FinalHidden, -1, normed);

  // Rows that get logits: every token, or the last token of each sequence (gathered on the device).
  const float* rows = nr;
  int64_t n_rows = T;
  CudaTensor gathered;
  if (!options.all_logits) {
    n_rows = batch.num_sequences();
    gathered = CudaTensor::empty(ctx, {n_rows, H});
    for (int64_t s = 0; s < n_rows; ++s) {
      const int64_t last = batch.cu_seqlens[s + 1] - 1;
      HLM_CHECK_INPUT(last >= batch.cu_seqlens[s], "sequence ", s, " is empty");
      HLM_CUDA_CHECK(cudaMemcpyAsync(gathered.data<float>() + s * H, nr + last * H, sizeof(float) * H,
                                     cudaMemcpyDeviceToDevice, stream));
    }
    rows = gathered.data<float>();
  }
  CudaTensor logits_device = CudaTensor::empty(ctx, {n_rows, V});
  if (bf16_weights_only_) {  // the head is held in bf16 only: bf16 tensor cores on the rows rounded to bf16
    const CudaTensor rows16 = cuda_round_bf16(ctx, rows, n_rows * H);
    matmul_forward_mixed_cuda(ctx.blaslt(), logits_device.data<float>(), rows16.data<__nv_bfloat16>(),
                              lm_head_bf16_.data<__nv_bfloat16>(), nullptr, {n_rows, V, H});
  } else {
    matmul_forward_cuda(ctx.blaslt(), logits_device.data<float>(), rows, lm_head_weight(), nullptr, {n_rows, V, H});
  }
  check_flag();
  Tensor logits = cuda_download(ctx, logits_device);
  // The divisor is applied on the host after the download, exactly as the CPU forward does it (one f32 division).
  if (hyper.logits_divisor != 1.0f) {
    float* l = logits.f32();
    for (int64_t j = 0; j < logits.numel(); ++j) l[j] /= hyper.logits_divisor;
  }
  if (options.all_logits && capture && (!wanted || wanted(CapturePoint::Logits, -1)))
    capture(CapturePoint::Logits, -1, logits);
  return logits;
}

CudaTensor CudaModel::final_hidden_with_mixer(const CudaBatchView& b, const MixerOverride& mixer) {
  // The CUDA engine's attention mixer (infer/cuda) has no output gate: refuse rather than drop it.
  HLM_CHECK_INPUT(!architecture_spec(config_.architecture).attention_output_gate,
                  "CUDA generation does not run gated attention (", config_.model_type, ") yet: use --device cpu");
  ctx_->make_current();
  CudaTensor hidden, normed;
  run_decoder(b, nullptr, hidden, normed, [](CapturePoint, int, const CudaTensor&) {}, nullptr, &mixer, nullptr,
              cuda_model_decode_norm_prologue());
  return normed;
}

const CudaAttentionWeights& CudaModel::attention_weights(int layer) const {
  const Layer& l = *layers_.at(static_cast<size_t>(layer));
  HLM_CHECK(l.full_attention, "layer ", layer, " is not a full-attention layer");
  return l.self_attn;
}

const CudaGdnWeights& CudaModel::gdn_weights(int layer) const {
  const Layer& l = *layers_.at(static_cast<size_t>(layer));
  HLM_CHECK(!l.full_attention && !l.mamba2 && !l.lightning, "layer ", layer, " is not a GDN layer");
  return l.linear_attn;
}

const CudaLightningWeights& CudaModel::lightning_weights(int layer) const {
  const Layer& l = *layers_.at(static_cast<size_t>(layer));
  HLM_CHECK(l.lightning, "layer ", layer, " is not a Lightning Attention-2 layer");
  return l.lightning_attn;
}

const CudaMamba2Weights& CudaModel::mamba2_weights(int layer) const {
  const Layer& l = *layers_.at(static_cast<size_t>(layer));
  HLM_CHECK(l.mamba2, "layer ", layer, " is not a Mamba-2 layer");
  return l.mamba;
}

}  // namespace hlm
