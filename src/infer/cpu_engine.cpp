#include "infer/cpu_engine.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "core/error.h"
#include "infer/sequence_slots.h"
#include "layers/attention_layer.h"
#include "layers/gdn_layer.h"
#include "layers/lightning_layer.h"
#include "layers/mamba2_layer.h"
#include "ops/attention/attention_cache.h"
#include "ops/matmul/matmul.h"

namespace hlm {

namespace {

// A recurrent state pool [max_sequences, ...] ↔ the step's rows in batch order [N, row]: rows slots[n] of `pool` into
// dst row n, and back.
void gather_rows(float* dst, const Tensor& pool, std::span<const int> slots, int64_t max_sequences) {
  const int64_t row = pool.numel() / max_sequences;
  for (size_t n = 0; n < slots.size(); ++n) std::copy_n(pool.f32() + slots[n] * row, row, dst + n * row);
}
void scatter_rows(Tensor& pool, const float* src, std::span<const int> slots, int64_t max_sequences) {
  const int64_t row = pool.numel() / max_sequences;
  for (size_t n = 0; n < slots.size(); ++n) std::copy_n(src + n * row, row, pool.f32() + slots[n] * row);
}

// The rows of slot s in every tensor of a GdnState pool ([S, ...] each) — the unit of gather/scatter.
constexpr size_t kGdnStateTensors = 4;
template <class S>  // GdnState or const GdnState
auto state_tensors(S& s) {
  return std::array<decltype(&s.q_conv), kGdnStateTensors>{&s.q_conv, &s.k_conv, &s.v_conv, &s.recurrent};
}

class CpuEngine final : public InferenceEngine {
 public:
  CpuEngine(Model& model, const MemoryPlan& plan)
      : model_(model), plan_(plan), slots_(plan) {
    const ModelConfig& c = model.config();
    cache_shape_ = {plan.num_blocks, plan.block_size, c.num_key_value_heads, c.head_dim};
    layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (c.layer_kinds[i] == LayerKind::FullAttention) {
        const Shape shape{plan.num_blocks, plan.block_size, c.num_key_value_heads, c.head_dim};
        layers_[i].k_cache = Tensor::zeros(shape);
        layers_[i].v_cache = Tensor::zeros(shape);
      } else if (c.layer_kinds[i] == LayerKind::Lightning) {  // one fp32 D×D state per head
        layers_[i].lightning = Tensor::zeros({plan.max_sequences, c.num_attention_heads, c.head_dim, c.head_dim});
      } else if (c.layer_kinds[i] == LayerKind::Mamba2) {
        const Mamba2Dims d = mamba2_dims(c);
        layers_[i].mamba_conv = Tensor::zeros({plan.max_sequences, d.conv_channels(), d.conv_kernel - 1});
        layers_[i].mamba_ssm = Tensor::zeros({plan.max_sequences, d.heads, d.head_dim, d.state_dim});
      } else {
        layers_[i].gdn = GdnState::zeros(gdn_dims(c), plan.max_sequences);
      }
      int64_t bytes = 0;
      if (layers_[i].k_cache.defined())
        bytes = static_cast<int64_t>(layers_[i].k_cache.nbytes() + layers_[i].v_cache.nbytes());
      else if (layers_[i].lightning.defined())
        bytes = static_cast<int64_t>(layers_[i].lightning.nbytes());
      else if (layers_[i].mamba_ssm.defined())
        bytes = static_cast<int64_t>(layers_[i].mamba_conv.nbytes() + layers_[i].mamba_ssm.nbytes());
      else
        for (const Tensor* t : state_tensors(layers_[i].gdn)) bytes += static_cast<int64_t>(t->nbytes());
      pool_bytes_.push_back(bytes);
    }
  }

  const ModelConfig& config() const override { return model_.config(); }
  const MemoryPlan& plan() const override { return plan_; }
  std::string device() const override { return "cpu"; }

  int open_sequence(int64_t max_tokens) override {
    const int slot = slots_.open(max_tokens);
    if (slot < 0) return -1;
    for (Layer& l : layers_) {  // a fresh sequence starts from zero GDN / Mamba-2 state
      if (l.gdn.recurrent.defined())
        for (Tensor* t : state_tensors(l.gdn)) {
          const int64_t row = t->numel() / plan_.max_sequences;
          std::fill_n(t->f32() + slot * row, row, 0.0f);
        }
      for (Tensor* t : {&l.mamba_conv, &l.mamba_ssm, &l.lightning})
        if (t->defined()) {
          const int64_t row = t->numel() / plan_.max_sequences;
          std::fill_n(t->f32() + slot * row, row, 0.0f);
        }
    }
    return slot;
  }

  void close_sequence(int slot) override { slots_.close(slot); }
  int64_t sequence_length(int slot) const override { return slots_.length(slot); }
  void advance_uncomputed(int slot, int64_t n, SkippedRows rows) override {
    const std::vector<int64_t> cache_slots = slots_.advance(slot, n);
    if (rows != SkippedRows::kRandom) return;
    const std::vector<float> k = skipped_row_values(cache_shape_.slot_elements(), 0);
    const std::vector<float> v = skipped_row_values(cache_shape_.slot_elements(), 1);
    for (Layer& layer : layers_) {
      if (!layer.k_cache.defined()) continue;
      for (int64_t at = 0; at < n; at += kSkippedRowsBlock)
        attention_cache_write(layer.k_cache.f32(), layer.v_cache.f32(), k.data(), v.data(), cache_slots.data() + at,
                              std::min(kSkippedRowsBlock, n - at), cache_shape_);
    }
  }

  Tensor step(std::span<const int> slots, const TokenBatch& tokens) override;

  StateUsage state_usage() const override {
    return slots_.usage(model_.config().layer_kinds, pool_bytes_);
  }

 private:
  struct Layer {
    Tensor k_cache, v_cache;  // attention: [num_blocks, block_size, Hkv, D]
    GdnState gdn;             // GDN: [max_sequences, ...] per tensor
    Tensor mamba_conv;        // Mamba-2: [max_sequences, Cd, K−1] raw xBC inputs
    Tensor mamba_ssm;         // Mamba-2: [max_sequences, nh, P, N]
    Tensor lightning;         // Lightning: [max_sequences, Hq, D, D]
  };

  Model& model_;
  MemoryPlan plan_;
  SequenceSlots slots_;
  PagedKvShape cache_shape_;
  std::vector<Layer> layers_;
  std::vector<int64_t> pool_bytes_;  // per layer: its K+V pool or GDN state pools (fixed at construction)
};

Tensor CpuEngine::step(std::span<const int> slots, const TokenBatch& tokens) {
  const ModelConfig& c = model_.config();
  const StepPlan p = slots_.plan_step(slots, tokens, c.vocab_size);
  const int64_t T = p.tokens, N = p.sequences;
  // GDN states of the step's sequences, in batch order.
  const GdnDims gdn = c.linear ? gdn_dims(c) : GdnDims{};
  std::vector<GdnState> batch_state(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i].gdn.recurrent.defined()) continue;
    batch_state[i] = GdnState::zeros(gdn, N);
    const auto pool = state_tensors(layers_[i].gdn), batch = state_tensors(batch_state[i]);
    for (size_t k = 0; k < kGdnStateTensors; ++k) gather_rows(batch[k]->f32(), *pool[k], slots, plan_.max_sequences);
  }

  // Mamba-2 states of the step's sequences, in batch order: [conv, ssm] per layer (gathered, updated, scattered).
  std::vector<std::array<Tensor, 2>> mamba_state(layers_.size());
  const auto mamba_pools = [](Layer& l) { return std::array<Tensor*, 2>{&l.mamba_conv, &l.mamba_ssm}; };
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i].mamba_ssm.defined()) continue;
    const auto pools = mamba_pools(layers_[i]);
    for (size_t k = 0; k < 2; ++k) {
      mamba_state[i][k] = Tensor::zeros({N, pools[k]->numel() / plan_.max_sequences});
      gather_rows(mamba_state[i][k].f32(), *pools[k], slots, plan_.max_sequences);
    }
  }

  // Lightning states of the step's sequences, in batch order (gathered, continued in place, scattered).
  std::vector<Tensor> lightning_state(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i].lightning.defined()) continue;
    lightning_state[i] = Tensor::zeros({N, layers_[i].lightning.numel() / plan_.max_sequences});
    gather_rows(lightning_state[i].f32(), layers_[i].lightning, slots, plan_.max_sequences);
  }

  const MixerHook mixer = [&](const MixerCall& call) {
    const DecoderLayerWeights& w = model_.weights().layers[static_cast<size_t>(call.layer)];
    Layer& layer = layers_[static_cast<size_t>(call.layer)];
    Arena& arena = model_.arena();
    if (call.kind == LayerKind::Mamba2) {  // continues each sequence from its conv + SSM state, in place
      std::array<Tensor, 2>& st = mamba_state[static_cast<size_t>(call.layer)];
      mamba2_layer_forward(call.out, call.in, w.mamba, mamba2_dims(c), tokens,
                           {st[0].f32(), st[1].f32(), st[0].f32(), st[1].f32()}, arena);
      return;
    }
    if (call.kind == LayerKind::Lightning) {  // RoPE at the absolute positions; state continued in place
      float* st = lightning_state[static_cast<size_t>(call.layer)].f32();
      lightning_layer_forward(call.out, call.in, w.lightning, lightning_dims(c, call.layer),
                              model_.layer_rope(call.layer), p.positions.data(), tokens, st, st, arena);
      return;
    }
    if (call.kind == LayerKind::LinearAttention) {
      gdn_layer_forward(call.out, call.in, w.linear_attn, gdn, tokens, &batch_state[static_cast<size_t>(call.layer)],
                        arena);
      return;
    }
    const AttentionDims& d = call.attention;  // d.window: the layer's sliding window (0 = full)
    const RopeTable* rope = model_.layer_rope(call.layer);
    const Arena::Mark mark = arena.mark();
    const AttentionQkv qkv =
        attention_layer_project(call.in, w.self_attn, d, rope, T, c.hidden_size, p.positions.data(), arena);
    attention_cache_write(layer.k_cache.f32(), layer.v_cache.f32(), qkv.k, qkv.v, p.cache_slots.data(), T,
                          cache_shape_);
    Tensor o = arena.tensor({T, d.q_heads * d.head_dim});
    attention_cache_forward(o.f32(), qkv.q, layer.k_cache.f32(), layer.v_cache.f32(), cache_shape_, p.tables.data(),
                            p.max_blocks, p.context.data(), tokens.cu_seqlens.data(), N, d.q_heads, d.scale,
                            d.window);
    attention_layer_output(call.out, o.f32(), call.in, w.self_attn, d, T, c.hidden_size, arena);  // gate, o_proj
    arena.release(mark);
  };
  ForwardOptions options;
  options.mixer = &mixer;
  Tensor logits = model_.forward(tokens, options);

  for (size_t i = 0; i < layers_.size(); ++i) {  // Lightning states back to their slots
    if (!layers_[i].lightning.defined()) continue;
    scatter_rows(layers_[i].lightning, lightning_state[i].f32(), slots, plan_.max_sequences);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {  // Mamba-2 states back to their slots
    if (!layers_[i].mamba_ssm.defined()) continue;
    const auto pools = mamba_pools(layers_[i]);
    for (size_t k = 0; k < 2; ++k) scatter_rows(*pools[k], mamba_state[i][k].f32(), slots, plan_.max_sequences);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {  // GDN states back to their slots
    if (!layers_[i].gdn.recurrent.defined()) continue;
    const auto pool = state_tensors(layers_[i].gdn), batch = state_tensors(batch_state[i]);
    for (size_t k = 0; k < kGdnStateTensors; ++k) scatter_rows(*pool[k], batch[k]->f32(), slots, plan_.max_sequences);
  }
  return logits;
}

}  // namespace

std::unique_ptr<InferenceEngine> make_cpu_engine(Model& model, const MemoryPlan& plan) {
  HLM_CHECK(plan.max_sequences > 0, "the memory plan has no sequence slots");
  HLM_CHECK_INPUT(plan.kv_element_bytes == 4, "the CPU inference engine keeps its KV cache in fp32 (a bf16 plan was ",
                  "given: --precision bf16 is a CUDA precision)");
  const MemoryPlan shape = memory_plan_shape(model.config(), plan.block_size);
  HLM_CHECK(shape.kv_bytes_per_block == plan.kv_bytes_per_block &&
                shape.gdn_bytes_per_sequence == plan.gdn_bytes_per_sequence,
            "the memory plan was made for another model");
  return std::make_unique<CpuEngine>(model, plan);
}

}  // namespace hlm
