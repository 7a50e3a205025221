// CudaModel training: the gradient holder, forward with trace and the backward, read beside models/model_train.cpp
// (same blocks, same order of operations):
//   pre-norm block   mid = in + m·mixer(norm_in(in));  out = mid + m·mlp(norm_post(mid))
//   post-norm block  mid = in + norm_post(mixer(in));  out = mid + norm_ff(mlp(mid))
// d_in = d_mid + (mixer branch)ᵀ d_mid;  d_mid = d_out + (mlp branch)ᵀ d_out.
// Each branch's inputs (normed stream, branch output before a post-norm, the layer's activations) come from the
// trace's CudaKeptLayer under Recompute::None, and are recomputed at the same point of the walk otherwise.
#include "models/cuda/cuda_model_train.h"

#include <algorithm>
#include <atomic>
#include <initializer_list>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_tensor.h"
#include "core/error.h"
#include "models/architecture.h"
#include "models/cuda/cuda_model_layer.h"
#include "models/model_train.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/residual/residual_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {

// Visits a device linear and its host twin (the bias only where the layer has one).
template <class Lin, class Fn>
void visit_linear(Lin& d, Linear& h, const Fn& fn) {
  fn(d.weight, h.weight);
  if (d.has_bias) fn(d.bias, h.bias);
}

std::atomic<int64_t> g_norm_bf16_dx_reads{0};  // cuda_model_norm_bf16_dx_reads

// rmsnorm_backward_cuda with its workspace: dx OVERWRITTEN (may alias d_out), or ADDED when accumulate_dx (the
// bits of the overwrite followed by residual_add_forward_cuda at scale 1); dweight ACCUMULATED. dx16 (optional):
// dx's bf16 rounding written too (rmsnorm_backward_rounded_cuda; dx16 may alias nothing).
void rmsnorm_backward(CudaContext& ctx, float* dx, float* dweight, const float* d_out, const float* x,
                      const float* weight, const RmsnormCudaParams& p, bool accumulate_dx = false,
                      __nv_bfloat16* dx16 = nullptr) {
  const size_t bytes = rmsnorm_backward_cuda_workspace_bytes(p);
  CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
  rmsnorm_backward_rounded_cuda(dx, dx16, dweight, d_out, x, weight, p, ws.raw(), bytes, ctx.stream(), accumulate_dx);
}

// out = m · in over n floats: 0 + fmul(m, in), the CPU's single float product (0 + x is exact but for −0 → +0).
void scale_into(CudaContext& ctx, float* out, const float* in, float m, int64_t n) {
  HLM_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * static_cast<size_t>(n), ctx.stream()));
  residual_add_forward_cuda(out, in, m, n, ctx.stream());
}

// Device bytes of a struct's tensors, listed once per struct. Only allocated tensors count: a default CudaTensor
// (a field the mode does not keep) reports one element but holds no memory.
size_t sum_bytes(std::initializer_list<const CudaTensor*> tensors) {
  size_t bytes = 0;
  for (const CudaTensor* t : tensors)
    if (t->raw() != nullptr) bytes += t->nbytes();
  return bytes;
}

}  // namespace

int64_t cuda_model_norm_bf16_dx_reads() { return g_norm_bf16_dx_reads.load(); }

size_t CudaKeptLayer::bytes() const {
  const AttentionCudaActivations& a = attention;
  const GdnCudaActivations& g = gdn;
  return sum_bytes({&mixer_in, &mixer_branch, &mlp_in, &mlp_branch, &mixer_in16, &mlp_in16, &mlp.gate, &mlp.up,
                    &mlp.h, &mlp.h16, &mlp.gate16, &mlp.up16}) +
         sum_bytes({&a.q_lin, &a.k_lin, &a.q, &a.k, &a.v, &a.o, &a.lse, &a.q16, &a.k16, &a.v16, &a.o16}) +
         sum_bytes({&g.qp, &g.kp, &g.vp, &g.z, &g.a, &g.b, &g.qc, &g.kc, &g.vc, &g.qn, &g.kn, &g.g, &g.beta, &g.o,
                    &g.y, &g.y16, &g.rule_scratch});
}

size_t CudaTrainTrace::kept_bytes() const {
  size_t bytes = final_stream.nbytes() + final_hidden.nbytes();
  for (const CudaTensor& t : layer_in) bytes += t.nbytes();
  for (const CudaTensor& t : mixer_out) bytes += t.nbytes();
  for (const CudaKeptLayer& k : kept) bytes += k.bytes();
  return bytes;
}

template <class Self, class Fn>
void CudaModel::for_each_tensor(Self& self, DecoderWeights& host, const Fn& fn) {
  const ModelConfig& c = self.config_;
  HLM_CHECK(static_cast<int64_t>(host.layers.size()) == c.num_hidden_layers, "host weights have ",
            host.layers.size(), " layers, the model ", c.num_hidden_layers);
  const bool attention_post_norm = architecture_spec(c.architecture).attention_post_norm;
  // A Lightning layer's query_key_value is held as three row blocks (layers/cuda/lightning_layer_cuda.h).
  HLM_CHECK_INPUT(std::find(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::Lightning) == c.layer_kinds.end(),
                  "the CUDA model has no per-tensor access to Lightning Attention-2 layers (training, download, ",
                  "gradients) for ", c.model_type, ": use --device cpu");
  // The experts are stacked on the device (layers/cuda/moe_layer_cuda.h): no slot-for-slot twin of the host's.
  HLM_CHECK_INPUT(!c.has_moe_layers(), "the CUDA model keeps routed experts stacked: no per-tensor access ",
                  "(training, download, gradients) for ", c.model_type, " yet: use --device cpu");
  // A Mamba-2 layer's in_proj is held as three row blocks (layers/cuda/mamba2_layer_cuda.h): no slot-for-slot twin.
  HLM_CHECK_INPUT(std::find(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::Mamba2) == c.layer_kinds.end(),
                  "the CUDA model has no per-tensor access to Mamba-2 layers (training, download, gradients) for ",
                  c.model_type, ": use --device cpu");
  fn(self.embed_tokens_, host.embed_tokens);
  for (size_t i = 0; i < self.layers_.size(); ++i) {
    auto& d = *self.layers_[i];
    DecoderLayerWeights& h = host.layers[i];
    // The norms a block has (upload's rule): input_layernorm in pre-norm blocks, post_feedforward in post-norm ones.
    const bool post_norm = d.full_attention && attention_post_norm;
    if (!post_norm) fn(d.input_layernorm, h.input_layernorm);
    if (d.full_attention) {
      auto& a = d.self_attn;
      AttentionWeights& ha = h.self_attn;
      for (const auto& [dev, host_slot] : kAttentionLinears) visit_linear(a.*dev, ha.*host_slot, fn);
      if (a.q_norm_size > 0) fn(a.q_norm, ha.q_norm);
      if (a.k_norm_size > 0) fn(a.k_norm, ha.k_norm);
    } else {
      auto& g = d.linear_attn;
      GdnWeights& hg = h.linear_attn;
      for (const auto& [dev, host_slot] : kGdnLinears) visit_linear(g.*dev, hg.*host_slot, fn);
      fn(g.q_conv, hg.q_conv);
      fn(g.k_conv, hg.k_conv);
      fn(g.v_conv, hg.v_conv);
      fn(g.A_log, hg.A_log);
      fn(g.dt_bias, hg.dt_bias);
      fn(g.o_norm, hg.o_norm);
    }
    fn(d.post_attention_layernorm, h.post_attention_layernorm);
    for (const auto& [dev, host_slot] : kMlpLinears) visit_linear(d.mlp.*dev, h.mlp.*host_slot, fn);
    if (post_norm) fn(d.post_feedforward_layernorm, h.post_feedforward_layernorm);
  }
  fn(self.norm_, host.norm);
  if (!self.tied_head_) fn(self.lm_head_, host.lm_head.weight);
}

CudaModel CudaModel::zeros_like(const ModelConfig& config, CudaContext& ctx) {
  // The host tensors only carry the shapes (unfilled_weights_like ties the head to the embedding for tied configs, so
  // upload keeps one tensor for both); the upload zero-fills each device tensor instead of copying (no host memset, no
  // upload of zeros: 20.5 GB of each for the Qwen3-4B-shaped student).
  const CudaZeroUploadScope zeros;
  return upload(Model::from_weights(config, unfilled_weights_like(config)), ctx);
}

void CudaModel::set_zero() {
  DecoderWeights unused;
  unused.layers.resize(layers_.size());
  for_each_tensor(*this, unused, [&](CudaTensor& d, Tensor&) {
    if (d.nbytes() > 0) HLM_CUDA_CHECK(cudaMemsetAsync(d.raw(), 0, d.nbytes(), ctx_->stream()));
  });
  // A gradient holder's linears may now be written instead of added to by their first backward (cuda_linear.h).
  for_each_linear([](CudaLinear& l) { l.weight_zeroed = true; });
}

size_t CudaModel::weight_bytes() const {
  size_t bytes = 0;
  DecoderWeights unused;
  unused.layers.resize(layers_.size());
  // A freed tensor (drop_fp32_weights) reports one element: only allocated tensors count.
  for_each_tensor(*this, unused, [&](const CudaTensor& d, Tensor&) { bytes += d.raw() != nullptr ? d.nbytes() : 0; });
  return bytes;
}

void CudaModel::download_into(DecoderWeights& host) const {
  for_each_tensor(*this, host, [&](const CudaTensor& d, Tensor& h) {
    HLM_CHECK(h.defined() && h.numel() == d.numel(), "download_into: host tensor of ", h.numel(),
              " entries for a device tensor of ", d.numel());
    Tensor flat = h.reshape(d.shape());
    cuda_copy(*ctx_, flat, d);
  });
}

std::vector<CudaModel::NamedTensor> CudaModel::named_tensors() {
  // A host skeleton of the same layout maps each device tensor to its slot; named_parameters names the slots.
  DecoderWeights skeleton = zero_grads_like(config_);
  std::vector<std::pair<const void*, CudaTensor*>> by_slot;
  for_each_tensor(*this, skeleton, [&](CudaTensor& d, Tensor& h) { by_slot.emplace_back(h.raw(), &d); });
  std::vector<NamedTensor> out;
  for (const NamedParameter& p : named_parameters(config_, skeleton, skeleton)) {
    CudaTensor* found = nullptr;
    for (const auto& [raw, device] : by_slot)
      if (raw == p.value.raw()) found = device;
    HLM_CHECK(found != nullptr, "CudaModel holds no tensor for ", p.name);
    out.push_back({p.name, p.group, found});
  }
  HLM_CHECK(out.size() == by_slot.size(), "CudaModel: ", by_slot.size(), " tensors but ", out.size(), " names");
  return out;
}

// After a forward: a kernel's error flag becomes the CPU's input error (the bad token id named when there is one).
void cuda_check_batch_flag(CudaContext& ctx, const CudaTokenBatch& device_batch, const TokenBatch& batch,
                           int64_t vocab_size) {
  if (!device_batch.error_flagged(ctx)) return;
  for (size_t t = 0; t < batch.ids.size(); ++t) {
    const int32_t id = batch.ids[t];
    HLM_CHECK_INPUT(id >= 0 && id < vocab_size, "token id ", id, " at position ", t, " is outside the vocabulary [0, ",
                    vocab_size, ")");
  }
  throw_input_error("CUDA forward: a kernel flagged a bad position or cu_seqlens");
}

CudaTrainTrace CudaModel::forward_train(const TokenBatch& batch, Recompute recompute) {
  ctx_->make_current();
  CudaTrainTrace trace = forward_train(CudaTokenBatch::upload(*ctx_, batch), recompute);
  cuda_check_batch_flag(*ctx_, trace.batch, batch, config_.vocab_size);
  return trace;
}

CudaTrainTrace CudaModel::forward_train(const CudaTokenBatch& device_batch, Recompute recompute) {
  // The CUDA attention backward has no output gate (Qwen3.5): refuse instead of training with a wrong gradient.
  HLM_CHECK_INPUT(!architecture_spec(config_.architecture).attention_output_gate,
                  "CUDA training does not support gated attention (", config_.model_type, ") yet: use --device cpu");
  // The CUDA Lightning layer has a forward only (layers/cuda/lightning_layer_cuda.h; the CPU has no layer backward).
  HLM_CHECK_INPUT(std::find(config_.layer_kinds.begin(), config_.layer_kinds.end(), LayerKind::Lightning) ==
                      config_.layer_kinds.end(),
                  "CUDA training does not run Lightning Attention-2 layers (", config_.model_type,
                  "): no Lightning backward yet (forward and inference only)");
  // The CUDA MoE layer has a forward only (layers/cuda/moe_layer_cuda.h).
  HLM_CHECK_INPUT(!config_.has_moe_layers(), "CUDA training does not run routed-expert (MoE) layers (",
                  config_.model_type, ") yet: train on --device cpu");
  // The CUDA Mamba-2 layer has a forward only (layers/cuda/mamba2_layer_cuda.h; the CPU has no layer backward either).
  HLM_CHECK_INPUT(std::find(config_.layer_kinds.begin(), config_.layer_kinds.end(), LayerKind::Mamba2) ==
                      config_.layer_kinds.end(),
                  "CUDA training does not run Mamba-2 layers (", config_.model_type, "): no Mamba-2 backward yet");
  CudaContext& ctx = *ctx_;
  ctx.make_current();
  CudaTrainTrace trace{device_batch, {}, {}, {}, {}, {}};
  const CudaBatchView b = trace.batch.view();
  const RopeCudaTable* rope = rope_table(b.max_seqlen);
  const ResidualSnapshots snapshots{&trace.layer_in, &trace.mixer_out};
  run_decoder(
      b, rope, trace.final_stream, trace.final_hidden, [](CapturePoint, int, const CudaTensor&) {},
      recompute == Recompute::None ? &trace.kept : nullptr, nullptr, &snapshots);
  return trace;
}

CudaTensor CudaModel::forward_final_hidden(const TokenBatch& batch) {
  ctx_->make_current();
  const CudaTokenBatch device_batch = CudaTokenBatch::upload(*ctx_, batch);
  CudaTensor hidden = forward_final_hidden(device_batch);
  cuda_check_batch_flag(*ctx_, device_batch, batch, config_.vocab_size);
  return hidden;
}

CudaTensor CudaModel::forward_final_hidden(const CudaTokenBatch& device_batch) {
  ctx_->make_current();
  const CudaBatchView b = device_batch.view();
  CudaTensor residual, hidden;  // the stream entering the final norm (dropped), the final hidden states
  run_decoder(b, rope_table(b.max_seqlen), residual, hidden, [](CapturePoint, int, const CudaTensor&) {});
  return hidden;
}

void CudaModel::backward(const CudaTrainTrace& trace, const float* d_final_hidden, CudaModel& grads,
                         const std::function<void(int)>& layer_done) {
  CudaContext& ctx = *ctx_;
  ctx.make_current();
  const ModelConfig& c = config_;
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  const DecoderHyper hyper = spec.hyper(c);
  const CudaBatchView b = trace.batch.view();
  const int64_t T = b.tokens, H = c.hidden_size, L = c.num_hidden_layers, n = T * H;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const AttentionDims adims{c.num_attention_heads, c.num_key_value_heads, c.head_dim, hyper.attention_scale, eps};
  const RopeCudaTable* rope = rope_table(b.max_seqlen);
  const cudaStream_t stream = ctx.stream();
  HLM_CHECK(static_cast<int64_t>(trace.layer_in.size()) == L && static_cast<int64_t>(trace.mixer_out.size()) == L &&
                (trace.kept.empty() || static_cast<int64_t>(trace.kept.size()) == L),
            "forward trace does not match the model");
  HLM_CHECK(grads.layers_.size() == layers_.size() && grads.tied_head_ == tied_head_,
            "gradient holder does not match the model");
  const RmsnormCudaParams row_norm{T, H, eps};

  CudaTensor d_hidden_t = CudaTensor::empty(ctx, {T, H});  // gradient w.r.t. the residual stream here
  CudaTensor normed_t = CudaTensor::empty(ctx, {T, H});
  CudaTensor branch_t = CudaTensor::empty(ctx, {T, H});
  CudaTensor d_branch_t = CudaTensor::empty(ctx, {T, H});
  CudaTensor d_normed_t = CudaTensor::empty(ctx, {T, H});
  float *d_hidden = d_hidden_t.data<float>(), *normed = normed_t.data<float>(), *branch = branch_t.data<float>();
  // HLM_NORM_BF16_OUT (cuda_model.h): a recomputed pre-norm input also written as its bf16 rounding, which the
  // branch's recomputing backward then reads instead of rounding normed again (the same bits).
  CudaTensor normed16_t;
  if (bf16_compute_ && trace.kept.empty() && cuda_model_norm_bf16_out())
    normed16_t = CudaTensor::empty(ctx, {T, H}, DType::BF16);
  __nv_bfloat16* normed16 = normed16_t.raw() != nullptr ? normed16_t.data<__nv_bfloat16>() : nullptr;
  // normed = rmsnorm(x)·weight, and its rounding into normed16 when that is on.
  const auto recompute_norm = [&](const float* x, const float* weight) {
    rmsnorm_forward_rounded_cuda(normed, normed16, x, weight, row_norm, stream);
  };
  float *d_branch = d_branch_t.data<float>(), *d_normed = d_normed_t.data<float>();
  // HLM_NORM_BF16_DX (cuda_model.h): the residual gradient's bf16 rounding, written by each norm backward that writes
  // d_hidden (the final norm's, a pre-norm branch's input norm's), for the pre-norm branches' output projections
  // (read as d_out16; at multiplier 1 a pre-norm branch reads d_hidden itself). A post-norm block changes d_hidden by a
  // residual add without it, so d_hidden16 is marked stale until the next norm backward writes both.
  CudaTensor d_hidden16_t;
  if (bf16_compute_ && hyper.residual_multiplier == 1.0f && cuda_model_norm_bf16_dx())
    d_hidden16_t = CudaTensor::empty(ctx, {T, H}, DType::BF16);
  __nv_bfloat16* d_hidden16 = d_hidden16_t.raw() != nullptr ? d_hidden16_t.data<__nv_bfloat16>() : nullptr;
  bool d_hidden16_current = false;  // d_hidden16 holds d_hidden's rounding
  const auto d_hidden_rounding = [&]() -> const __nv_bfloat16* {
    if (!d_hidden16_current) return nullptr;
    g_norm_bf16_dx_reads.fetch_add(1);
    return d_hidden16;
  };

  rmsnorm_backward(ctx, d_hidden, grads.norm_.data<float>(), d_final_hidden, trace.final_stream.data<float>(),
                   norm_.data<float>(), row_norm, false, d_hidden16);
  d_hidden16_current = d_hidden16 != nullptr;
  if (layer_done) layer_done(static_cast<int>(L));
  // The gradient reaching a pre-norm branch's output, residual_multiplier · d_hidden: d_hidden itself at multiplier 1
  // (the CPU's m · x is then exact, −0 included: no copy), else scaled into d_branch. The branch's backward only reads
  // it; its input norm's backward then adds into d_hidden in the same pass (accumulate_dx).
  const auto branch_grad = [&]() -> const float* {
    if (hyper.residual_multiplier == 1.0f) return d_hidden;
    scale_into(ctx, d_branch, d_hidden, hyper.residual_multiplier, n);
    return d_branch;
  };

  for (int i = static_cast<int>(L) - 1; i >= 0; --i) {
    const Layer& lw = *layers_[static_cast<size_t>(i)];
    Layer& lg = *grads.layers_[static_cast<size_t>(i)];
    const bool post_norm = lw.full_attention && spec.attention_post_norm;
    AttentionDims ldims = adims;
    ldims.window = c.attention_window(i);  // sliding_attention layers
    const float* in = trace.layer_in[static_cast<size_t>(i)].data<float>();
    const float* mid = trace.mixer_out[static_cast<size_t>(i)].data<float>();

    const CudaKeptLayer* kept = trace.kept.empty() ? nullptr : &trace.kept[static_cast<size_t>(i)];
    // A kept [T, hidden] tensor, or `scratch` after `recompute` wrote it there.
    const auto kept_or = [&](CudaTensor CudaKeptLayer::*slot, float* scratch, const auto& recompute) -> const float* {
      if (kept == nullptr) {
        recompute();
        return scratch;
      }
      HLM_CHECK((kept->*slot).numel() == n, "layer ", i, ": the trace kept no [T, hidden] tensor for this block");
      return (kept->*slot).data<float>();
    };

    // A pre-norm branch's input: its kept bf16 rounding (bf16 mode: the branch's projections read nothing else), or
    // the fp32 tensor as kept_or gives it.
    const auto kept_input = [&](CudaTensor CudaKeptLayer::*slot, CudaTensor CudaKeptLayer::*slot16, float* scratch,
                                const auto& recompute) -> CudaLinearInput {
      if (kept != nullptr && (kept->*slot16).dtype() == DType::BF16) {
        HLM_CHECK((kept->*slot16).numel() == n, "layer ", i, ": the trace kept no [T, hidden] tensor for this block");
        return {nullptr, (kept->*slot16).data<__nv_bfloat16>()};
      }
      const float* x = kept_or(slot, scratch, recompute);
      return {x, kept == nullptr && x == normed ? normed16 : nullptr};  // recomputed by recompute_norm
    };

    // MLP branch: d_mid = d_out + branchᵀ(d_out). d_out16: d_out's bf16 rounding when held (nullptr otherwise).
    const auto mlp_backward = [&](float* dx, const float* d_out, const CudaLinearInput& x,
                                  const __nv_bfloat16* d_out16) {
      if (kept != nullptr)
        mlp_layer_backward_from_cuda(ctx, dx, lg.mlp, d_out, x, kept->mlp, lw.mlp, T, d_out16);
      else
        mlp_layer_backward_cuda(ctx, dx, lg.mlp, d_out, x, lw.mlp, T, d_out16);
    };
    if (post_norm) {
      const float* mlp_out = kept_or(&CudaKeptLayer::mlp_branch, branch, [&] {
        mlp_layer_forward_cuda(ctx, branch, mid, lw.mlp, T);  // the branch output before its post-norm
      });
      rmsnorm_backward(ctx, d_branch, lg.post_feedforward_layernorm.data<float>(), d_hidden, mlp_out,
                       lw.post_feedforward_layernorm.data<float>(), row_norm);
      mlp_backward(d_normed, d_branch, {mid, nullptr}, nullptr);
      residual_add_forward_cuda(d_hidden, d_normed, 1.0f, n, stream);
      d_hidden16_current = false;
    } else {
      const CudaLinearInput mlp_in = kept_input(&CudaKeptLayer::mlp_in, &CudaKeptLayer::mlp_in16, normed, [&] {
        recompute_norm(mid, lw.post_attention_layernorm.data<float>());
      });
      mlp_backward(d_normed, branch_grad(), mlp_in, d_hidden_rounding());
      rmsnorm_backward(ctx, d_hidden, lg.post_attention_layernorm.data<float>(), d_normed, mid,
                       lw.post_attention_layernorm.data<float>(), row_norm, /*accumulate_dx=*/true, d_hidden16);
      d_hidden16_current = d_hidden16 != nullptr;
    }

    // Mixer branch: d_in = d_mid + branchᵀ(d_mid).
    const auto mixer_backward = [&](float* dx, const float* d_out, const CudaLinearInput& x,
                                    const __nv_bfloat16* d_out16) {
      if (lw.full_attention && kept != nullptr)
        attention_layer_backward_from_cuda(ctx, dx, lg.self_attn, d_out, x, kept->attention, lw.self_attn, ldims,
                                           rope, b, d_out16);
      else if (lw.full_attention)
        attention_layer_backward_cuda(ctx, dx, lg.self_attn, d_out, x, lw.self_attn, ldims, rope, b, d_out16);
      else if (kept != nullptr)
        gdn_layer_backward_from_cuda(ctx, dx, lg.linear_attn, d_out, x, kept->gdn, lw.linear_attn, gdn_dims(c), b,
                                     d_out16);
      else
        gdn_layer_backward_cuda(ctx, dx, lg.linear_attn, d_out, x, lw.linear_attn, gdn_dims(c), b, d_out16);
    };
    if (post_norm) {
      const float* mixer_out = kept_or(&CudaKeptLayer::mixer_branch, branch, [&] {
        attention_layer_forward_cuda(ctx, branch, in, lw.self_attn, ldims, rope, b);  // before its post-norm
      });
      rmsnorm_backward(ctx, d_branch, lg.post_attention_layernorm.data<float>(), d_hidden, mixer_out,
                       lw.post_attention_layernorm.data<float>(), row_norm);
      mixer_backward(d_normed, d_branch, {in, nullptr}, nullptr);
      residual_add_forward_cuda(d_hidden, d_normed, 1.0f, n, stream);
      d_hidden16_current = false;
    } else {
      const CudaLinearInput mixer_in = kept_input(&CudaKeptLayer::mixer_in, &CudaKeptLayer::mixer_in16, normed, [&] {
        recompute_norm(in, lw.input_layernorm.data<float>());
      });
      mixer_backward(d_normed, branch_grad(), mixer_in, d_hidden_rounding());
      // Below layer 0 only the embedding's backward reads d_hidden, in fp32: no rounding there.
      __nv_bfloat16* const rounding = i > 0 ? d_hidden16 : nullptr;
      rmsnorm_backward(ctx, d_hidden, lg.input_layernorm.data<float>(), d_normed, in,
                       lw.input_layernorm.data<float>(), row_norm, /*accumulate_dx=*/true, rounding);
      d_hidden16_current = rounding != nullptr;
    }
    if (layer_done) layer_done(i);
  }
  const EmbeddingCudaParams ep{T, c.vocab_size, H, hyper.embedding_multiplier};
  const size_t bytes = embedding_backward_cuda_workspace_bytes(ep);
  CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
  embedding_backward_cuda(grads.embed_tokens_.data<float>(), d_hidden, b.ids, ep, ws.raw(), bytes, b.error_flag,
                          stream);
}

}  // namespace hlm
