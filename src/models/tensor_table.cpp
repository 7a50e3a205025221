#include "models/tensor_table.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "models/architecture.h"

namespace hlm {
namespace {

using C = const ModelConfig&;

int64_t q_width(C c) { return c.num_attention_heads * c.head_dim; }
int64_t kv_width(C c) { return c.num_key_value_heads * c.head_dim; }
int64_t gdn_k_width(C c) { return c.linear->num_key_heads * c.linear->key_head_dim; }
int64_t gdn_v_width(C c) { return c.linear->num_value_heads * c.linear->value_head_dim; }
int64_t gdn_heads(C c) { return c.linear->num_value_heads; }
int64_t conv_kernel(C c) { return c.linear->conv_kernel_dim; }

bool full(C c, int i) { return c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention; }
bool linear(C c, int i) { return c.layer_kinds[static_cast<size_t>(i)] == LayerKind::LinearAttention; }
bool mamba(C c, int i) { return c.layer_kinds[static_cast<size_t>(i)] == LayerKind::Mamba2; }
bool mamba_conv_bias(C c, int i) { return mamba(c, i) && c.mamba->conv_bias; }
int64_t mamba_in_rows(C c) { return c.mamba->inner() + c.mamba->conv_channels() + c.mamba->heads; }
bool shared_mlp(C c, int) { return architecture_spec(c.architecture).shared_mlp; }
bool post_norm_block(C c, int i) { return full(c, i) && architecture_spec(c.architecture).attention_post_norm; }
bool pre_norm_block(C c, int i) { return !post_norm_block(c, i); }
bool always(C, int) { return true; }
// Every block but a parallel one (Cohere2: input_layernorm feeds attention and MLP) has a second norm.
bool sequential_block(C c, int) { return !architecture_spec(c.architecture).parallel_block; }
// bailing: softmax layers hold attention.query_key_value / query_layernorm / key_layernorm / dense instead.
bool fused_qkv(C c) { return architecture_spec(c.architecture).fused_qkv_attention; }
bool bailing_attention(C c, int i) { return full(c, i) && fused_qkv(c); }
bool lightning(C c, int i) { return c.layer_kinds[static_cast<size_t>(i)] == LayerKind::Lightning; }
int64_t lightning_inner(C c) { return c.num_attention_heads * c.head_dim; }
bool attention_bias(C c, int i) { return full(c, i) && c.attention_bias && !fused_qkv(c); }
bool attention(C c, int i) { return full(c, i) && !fused_qkv(c); }
bool dense_ffn(C c, int i) { return !c.moe_layer(i) && !shared_mlp(c, i); }
bool mlp_bias(C c, int i) { return c.mlp_bias && dense_ffn(c, i); }
bool moe_ffn(C c, int i) { return c.moe_layer(i) && !shared_mlp(c, i); }
bool granite_moe(C c, int i) { return c.moe_layer(i) && shared_mlp(c, i); }
bool shared_expert(C c, int i) {
  return c.moe_layer(i) && c.moe->shared_expert_intermediate_size > 0 && c.moe->shared_expert_gated;
}
bool ungated_shared_expert(C c, int i) {
  return c.moe_layer(i) && c.moe->shared_expert_intermediate_size > 0 && !c.moe->shared_expert_gated;
}
bool expert_bias(C c, int i) { return moe_ffn(c, i) && c.moe->sigmoid_grouped_router; }
int64_t shared_width(C c) { return c.moe->shared_expert_intermediate_size; }
bool output_gate(C c, int i) { return full(c, i) && architecture_spec(c.architecture).attention_output_gate; }
int64_t q_heads(C c) { return c.num_attention_heads; }
int64_t experts(C c) { return c.moe->num_experts; }
int64_t expert_width(C c) { return c.moe->moe_intermediate_size; }
bool qk_norm(C c, int i) {
  return full(c, i) && architecture_spec(c.architecture).qk_norm != QkNorm::None && !fused_qkv(c);
}
bool untied(C c, int) { return !c.tie_word_embeddings; }
int64_t norm_width(C c, int64_t whole) {
  return architecture_spec(c.architecture).qk_norm == QkNorm::WholeProjection ? whole : c.head_dim;
}

DecoderLayerWeights& L(DecoderWeights& w, int i) { return w.layers[static_cast<size_t>(i)]; }
GdnWeights& G(DecoderWeights& w, int i) { return L(w, i).linear_attn; }
// `slot` of expert rows: they are reached through tensor_slot (their tensors need the expert index too).
Tensor& no_layer_slot(DecoderWeights&, int) {
  throw_internal_error("an expert tensor was accessed by TensorRow::slot; use tensor_slot()");
}
MlpWeights& X(DecoderWeights& w, int i, int e) {  // expert e of layer i (the list grows as experts are filled in)
  std::vector<MlpWeights>& list = L(w, i).moe.experts;
  if (list.size() <= static_cast<size_t>(e)) list.resize(static_cast<size_t>(e) + 1);
  return list[static_cast<size_t>(e)];
}

// The one depthwise conv of HF's GDN module over [q | k | v] (its in-memory name; OLMo-Hybrid checkpoints hold the
// three parts, Qwen3.5 checkpoints the fused tensor).
constexpr std::string_view kGdnConv = "model.layers.{i}.linear_attn.conv1d.weight";
// Qwen3.5's fused GDN input projection [q_all | k_all | v_all].
constexpr std::string_view kGdnQkv = "model.layers.{i}.linear_attn.in_proj_qkv.weight";
// Qwen3-Next's grouped GDN projections: per key head [q | k | v of its value heads | z of them] and [b | a].
constexpr std::string_view kGdnQkvz = "model.layers.{i}.linear_attn.in_proj_qkvz.weight";
constexpr std::string_view kGdnBa = "model.layers.{i}.linear_attn.in_proj_ba.weight";
int64_t gdn_key_heads(C c) { return c.linear->num_key_heads; }
// The gated attention's q_proj as stored: [q_h | gate_h] per head (blocks = query heads).
constexpr std::string_view kGatedQ = "model.layers.{i}.self_attn.q_proj.weight";
// Stacked experts (transformers 5.x in memory): gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I].
constexpr std::string_view kExpertsGateUp = "model.layers.{i}.mlp.experts.gate_up_proj";
constexpr std::string_view kExpertsDown = "model.layers.{i}.mlp.experts.down_proj";
// Granite-4.0-H: the shared MLP's fused [gate | up] and the routed experts' stacked tensors as checkpoints hold them.
constexpr std::string_view kSharedInput = "model.layers.{i}.shared_mlp.input_linear.weight";
constexpr std::string_view kGraniteExpertsInput = "model.layers.{i}.block_sparse_moe.input_linear.weight";
constexpr std::string_view kGraniteExpertsOutput = "model.layers.{i}.block_sparse_moe.output_linear.weight";
Mamba2Weights& M(DecoderWeights& w, int i) { return L(w, i).mamba; }
LightningWeights& LA(DecoderWeights& w, int i) { return L(w, i).lightning; }
// bailing's fused softmax-attention projection [q | k | v] (one block), cut into attention.{q,k,v}_proj (our names).
constexpr std::string_view kBailingQkv = "model.layers.{i}.attention.query_key_value.weight";

#define SHAPE(...) [](C c) { return Shape{__VA_ARGS__}; }
#define SLOT(expr) [](DecoderWeights & w, int i) -> Tensor& { return expr; }
#define EXPERT_SLOT(proj) [](DecoderWeights & w, int i, int e) -> Tensor& { return X(w, i, e).proj.weight; }

const std::array kTensorTable{
    TensorRow{"model.embed_tokens.weight", "embedding", false, SHAPE(c.vocab_size, c.hidden_size), always,
              [](DecoderWeights& w, int) -> Tensor& { return w.embed_tokens; }, "model.word_embeddings.weight"},
    TensorRow{"model.layers.{i}.input_layernorm.weight", "norm", true, SHAPE(c.hidden_size), pre_norm_block,
              SLOT(L(w, i).input_layernorm), "model.layers.{i}.attention_layer_norm.weight", nullptr, {}, nullptr,
              nullptr, /*zero_centred=*/true},
    // Full attention. With an output gate the checkpoint's q_proj is [q_h | gate_h] per head (kGatedQ), split here
    // into q_proj and gate_proj (a name of ours: what hybridlm saves).
    TensorRow{"model.layers.{i}.self_attn.q_proj.weight", "attention", true, SHAPE(q_width(c), c.hidden_size),
              attention, SLOT(L(w, i).self_attn.q_proj.weight), {}, nullptr, kGatedQ, nullptr, q_heads},
    TensorRow{"model.layers.{i}.self_attn.gate_proj.weight", "attention", true, SHAPE(q_width(c), c.hidden_size),
              output_gate, SLOT(L(w, i).self_attn.gate_proj.weight), {}, nullptr, kGatedQ, nullptr, q_heads},
    TensorRow{"model.layers.{i}.self_attn.q_proj.bias", "attention", true, SHAPE(q_width(c)), attention_bias,
              SLOT(L(w, i).self_attn.q_proj.bias)},
    TensorRow{"model.layers.{i}.self_attn.k_proj.weight", "attention", true, SHAPE(kv_width(c), c.hidden_size),
              attention, SLOT(L(w, i).self_attn.k_proj.weight)},
    TensorRow{"model.layers.{i}.self_attn.k_proj.bias", "attention", true, SHAPE(kv_width(c)), attention_bias,
              SLOT(L(w, i).self_attn.k_proj.bias)},
    TensorRow{"model.layers.{i}.self_attn.v_proj.weight", "attention", true, SHAPE(kv_width(c), c.hidden_size),
              attention, SLOT(L(w, i).self_attn.v_proj.weight)},
    TensorRow{"model.layers.{i}.self_attn.v_proj.bias", "attention", true, SHAPE(kv_width(c)), attention_bias,
              SLOT(L(w, i).self_attn.v_proj.bias)},
    TensorRow{"model.layers.{i}.self_attn.o_proj.weight", "attention", true, SHAPE(c.hidden_size, q_width(c)),
              attention, SLOT(L(w, i).self_attn.o_proj.weight)},
    TensorRow{"model.layers.{i}.self_attn.o_proj.bias", "attention", true, SHAPE(c.hidden_size), attention_bias,
              SLOT(L(w, i).self_attn.o_proj.bias)},
    TensorRow{"model.layers.{i}.self_attn.q_norm.weight", "norm", true, SHAPE(norm_width(c, q_width(c))), qk_norm,
              SLOT(L(w, i).self_attn.q_norm), {}, nullptr, {}, nullptr, nullptr, /*zero_centred=*/true},
    TensorRow{"model.layers.{i}.self_attn.k_norm.weight", "norm", true, SHAPE(norm_width(c, kv_width(c))), qk_norm,
              SLOT(L(w, i).self_attn.k_norm), {}, nullptr, {}, nullptr, nullptr, /*zero_centred=*/true},
    // bailing softmax layers (BailingMoeLinearV2's `attention` module): query_key_value [(Hq + 2·Hkv)·D, H] cut into
    // q/k/v (our part names, what hybridlm saves), per-head norms, dense = o_proj. The Lightning layers' rows below
    // share three of these names on the other layers.
    TensorRow{"model.layers.{i}.attention.q_proj.weight", "attention", true, SHAPE(q_width(c), c.hidden_size),
              bailing_attention, SLOT(L(w, i).self_attn.q_proj.weight), {}, nullptr, kBailingQkv},
    TensorRow{"model.layers.{i}.attention.k_proj.weight", "attention", true, SHAPE(kv_width(c), c.hidden_size),
              bailing_attention, SLOT(L(w, i).self_attn.k_proj.weight), {}, nullptr, kBailingQkv},
    TensorRow{"model.layers.{i}.attention.v_proj.weight", "attention", true, SHAPE(kv_width(c), c.hidden_size),
              bailing_attention, SLOT(L(w, i).self_attn.v_proj.weight), {}, nullptr, kBailingQkv},
    TensorRow{"model.layers.{i}.attention.query_layernorm.weight", "norm", true, SHAPE(c.head_dim), bailing_attention,
              SLOT(L(w, i).self_attn.q_norm)},
    TensorRow{"model.layers.{i}.attention.key_layernorm.weight", "norm", true, SHAPE(c.head_dim), bailing_attention,
              SLOT(L(w, i).self_attn.k_norm)},
    TensorRow{"model.layers.{i}.attention.dense.weight", "attention", true, SHAPE(c.hidden_size, q_width(c)),
              bailing_attention, SLOT(L(w, i).self_attn.o_proj.weight)},
    // Lightning Attention-2 (bailing linear layers; layers/lightning_layer.h): MHA, query_key_value [3·Hq·D, H].
    TensorRow{"model.layers.{i}.attention.query_key_value.weight", "linear_attention", true,
              SHAPE(3 * lightning_inner(c), c.hidden_size), lightning, SLOT(LA(w, i).qkv.weight)},
    TensorRow{"model.layers.{i}.attention.query_layernorm.weight", "norm", true, SHAPE(c.head_dim), lightning,
              SLOT(LA(w, i).q_norm)},
    TensorRow{"model.layers.{i}.attention.key_layernorm.weight", "norm", true, SHAPE(c.head_dim), lightning,
              SLOT(LA(w, i).k_norm)},
    TensorRow{"model.layers.{i}.attention.g_proj.weight", "linear_attention", true,
              SHAPE(lightning_inner(c), c.hidden_size), lightning, SLOT(LA(w, i).g_proj.weight)},
    TensorRow{"model.layers.{i}.attention.g_norm.weight", "norm", true, SHAPE(lightning_inner(c)), lightning,
              SLOT(LA(w, i).g_norm)},
    TensorRow{"model.layers.{i}.attention.dense.weight", "linear_attention", true,
              SHAPE(c.hidden_size, lightning_inner(c)), lightning, SLOT(LA(w, i).dense.weight)},
    // Gated DeltaNet (names of HF's olmo_hybrid module as saved; aliases and fused tensors: Qwen3.5's names).
    TensorRow{"model.layers.{i}.linear_attn.q_proj.weight", "linear_attention", true,
              SHAPE(gdn_k_width(c), c.hidden_size), linear, SLOT(G(w, i).q_proj.weight), {}, nullptr, kGdnQkv,
              nullptr, nullptr, false, kGdnQkvz},
    TensorRow{"model.layers.{i}.linear_attn.k_proj.weight", "linear_attention", true,
              SHAPE(gdn_k_width(c), c.hidden_size), linear, SLOT(G(w, i).k_proj.weight), {}, nullptr, kGdnQkv,
              nullptr, nullptr, false, kGdnQkvz},
    TensorRow{"model.layers.{i}.linear_attn.v_proj.weight", "linear_attention", true,
              SHAPE(gdn_v_width(c), c.hidden_size), linear, SLOT(G(w, i).v_proj.weight), {}, nullptr, kGdnQkv,
              nullptr, nullptr, false, kGdnQkvz},
    TensorRow{"model.layers.{i}.linear_attn.g_proj.weight", "linear_attention", true,
              SHAPE(gdn_v_width(c), c.hidden_size), linear, SLOT(G(w, i).g_proj.weight),
              "model.layers.{i}.linear_attn.in_proj_z.weight", nullptr, {}, nullptr, nullptr, false, kGdnQkvz},
    TensorRow{"model.layers.{i}.linear_attn.a_proj.weight", "linear_attention", true,
              SHAPE(gdn_heads(c), c.hidden_size), linear, SLOT(G(w, i).a_proj.weight),
              "model.layers.{i}.linear_attn.in_proj_a.weight", nullptr, {}, nullptr, nullptr, false, kGdnBa,
              /*grouped_order=*/1},
    TensorRow{"model.layers.{i}.linear_attn.b_proj.weight", "linear_attention", true,
              SHAPE(gdn_heads(c), c.hidden_size), linear, SLOT(G(w, i).b_proj.weight),
              "model.layers.{i}.linear_attn.in_proj_b.weight", nullptr, {}, nullptr, nullptr, false, kGdnBa,
              /*grouped_order=*/0},
    TensorRow{"model.layers.{i}.linear_attn.o_proj.weight", "linear_attention", true,
              SHAPE(c.hidden_size, gdn_v_width(c)), linear, SLOT(G(w, i).o_proj.weight),
              "model.layers.{i}.linear_attn.out_proj.weight"},
    TensorRow{"model.layers.{i}.linear_attn.q_conv1d.weight", "linear_attention", true,
              SHAPE(gdn_k_width(c), 1, conv_kernel(c)), linear, SLOT(G(w, i).q_conv), {},
              SHAPE(gdn_k_width(c), conv_kernel(c)), kGdnConv},
    TensorRow{"model.layers.{i}.linear_attn.k_conv1d.weight", "linear_attention", true,
              SHAPE(gdn_k_width(c), 1, conv_kernel(c)), linear, SLOT(G(w, i).k_conv), {},
              SHAPE(gdn_k_width(c), conv_kernel(c)), kGdnConv},
    TensorRow{"model.layers.{i}.linear_attn.v_conv1d.weight", "linear_attention", true,
              SHAPE(gdn_v_width(c), 1, conv_kernel(c)), linear, SLOT(G(w, i).v_conv), {},
              SHAPE(gdn_v_width(c), conv_kernel(c)), kGdnConv},
    TensorRow{"model.layers.{i}.linear_attn.A_log", "linear_attention", true, SHAPE(gdn_heads(c)), linear,
              SLOT(G(w, i).A_log)},
    TensorRow{"model.layers.{i}.linear_attn.dt_bias", "linear_attention", true, SHAPE(gdn_heads(c)), linear,
              SLOT(G(w, i).dt_bias)},
    TensorRow{"model.layers.{i}.linear_attn.o_norm.weight", "norm", true, SHAPE(c.linear->value_head_dim), linear,
              SLOT(G(w, i).o_norm), "model.layers.{i}.linear_attn.norm.weight"},
    // Mamba-2 (Granite-4.0-H "mamba" layers; HF GraniteMoeHybridMambaLayer names).
    TensorRow{"model.layers.{i}.mamba.in_proj.weight", "mamba", true, SHAPE(mamba_in_rows(c), c.hidden_size), mamba,
              SLOT(M(w, i).in_proj.weight)},
    TensorRow{"model.layers.{i}.mamba.conv1d.weight", "mamba", true,
              SHAPE(c.mamba->conv_channels(), 1, c.mamba->conv_kernel), mamba, SLOT(M(w, i).conv), {},
              SHAPE(c.mamba->conv_channels(), c.mamba->conv_kernel)},
    TensorRow{"model.layers.{i}.mamba.conv1d.bias", "mamba", true, SHAPE(c.mamba->conv_channels()), mamba_conv_bias,
              SLOT(M(w, i).conv_bias)},
    TensorRow{"model.layers.{i}.mamba.dt_bias", "mamba", true, SHAPE(c.mamba->heads), mamba, SLOT(M(w, i).dt_bias)},
    TensorRow{"model.layers.{i}.mamba.A_log", "mamba", true, SHAPE(c.mamba->heads), mamba, SLOT(M(w, i).A_log)},
    TensorRow{"model.layers.{i}.mamba.D", "mamba", true, SHAPE(c.mamba->heads), mamba, SLOT(M(w, i).D)},
    TensorRow{"model.layers.{i}.mamba.norm.weight", "norm", true, SHAPE(c.mamba->inner()), mamba,
              SLOT(M(w, i).norm)},
    TensorRow{"model.layers.{i}.mamba.out_proj.weight", "mamba", true, SHAPE(c.hidden_size, c.mamba->inner()), mamba,
              SLOT(M(w, i).out_proj.weight)},
    // MLP and its norms.
    TensorRow{"model.layers.{i}.post_attention_layernorm.weight", "norm", true, SHAPE(c.hidden_size),
              sequential_block,
              SLOT(L(w, i).post_attention_layernorm), "model.layers.{i}.feedforward_layer_norm.weight", nullptr, {},
              nullptr, nullptr, /*zero_centred=*/true},
    TensorRow{"model.layers.{i}.mlp.gate_proj.weight", "mlp", true, SHAPE(c.intermediate_size, c.hidden_size),
              dense_ffn, SLOT(L(w, i).mlp.gate_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.gate_proj.bias", "mlp", true, SHAPE(c.intermediate_size), mlp_bias,
              SLOT(L(w, i).mlp.gate_proj.bias)},
    TensorRow{"model.layers.{i}.mlp.up_proj.weight", "mlp", true, SHAPE(c.intermediate_size, c.hidden_size),
              dense_ffn, SLOT(L(w, i).mlp.up_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.up_proj.bias", "mlp", true, SHAPE(c.intermediate_size), mlp_bias,
              SLOT(L(w, i).mlp.up_proj.bias)},
    TensorRow{"model.layers.{i}.mlp.down_proj.weight", "mlp", true, SHAPE(c.hidden_size, c.intermediate_size),
              dense_ffn, SLOT(L(w, i).mlp.down_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.down_proj.bias", "mlp", true, SHAPE(c.hidden_size), mlp_bias,
              SLOT(L(w, i).mlp.down_proj.bias)},
    // Granite-4.0-H's shared MLP (every layer): input_linear [2S, H] = [gate | up] cut into two rows (our names,
    // what hybridlm saves), output_linear [H, S]; stored as the layer's dense MLP.
    TensorRow{"model.layers.{i}.shared_mlp.gate_proj.weight", "mlp", true,
              SHAPE(c.shared_intermediate_size, c.hidden_size), shared_mlp, SLOT(L(w, i).mlp.gate_proj.weight), {},
              nullptr, kSharedInput},
    TensorRow{"model.layers.{i}.shared_mlp.up_proj.weight", "mlp", true,
              SHAPE(c.shared_intermediate_size, c.hidden_size), shared_mlp, SLOT(L(w, i).mlp.up_proj.weight), {},
              nullptr, kSharedInput},
    TensorRow{"model.layers.{i}.shared_mlp.output_linear.weight", "mlp", true,
              SHAPE(c.hidden_size, c.shared_intermediate_size), shared_mlp, SLOT(L(w, i).mlp.down_proj.weight)},
    // Granite-4.0-H's routed experts: router.layer [E, H]; stacked input_linear [E, 2I, H] (gate rows first) and
    // output_linear [E, H, I], cut per expert (the per-expert names are ours, what hybridlm saves).
    TensorRow{"model.layers.{i}.block_sparse_moe.router.layer.weight", "moe", true, SHAPE(experts(c), c.hidden_size),
              granite_moe, SLOT(L(w, i).moe.router.weight), "model.layers.{i}.block_sparse_moe.router.weight"},
    TensorRow{"model.layers.{i}.block_sparse_moe.experts.{e}.gate_proj.weight", "moe", true,
              SHAPE(expert_width(c), c.hidden_size), granite_moe, no_layer_slot, {}, nullptr, kGraniteExpertsInput,
              EXPERT_SLOT(gate_proj)},
    TensorRow{"model.layers.{i}.block_sparse_moe.experts.{e}.up_proj.weight", "moe", true,
              SHAPE(expert_width(c), c.hidden_size), granite_moe, no_layer_slot, {}, nullptr, kGraniteExpertsInput,
              EXPERT_SLOT(up_proj)},
    TensorRow{"model.layers.{i}.block_sparse_moe.experts.{e}.down_proj.weight", "moe", true,
              SHAPE(c.hidden_size, expert_width(c)), granite_moe, no_layer_slot, {}, nullptr, kGraniteExpertsOutput,
              EXPERT_SLOT(down_proj)},
    // Routed experts (qwen3_moe; checkpoint layout: one tensor per expert, as transformers 5.x saves them).
    TensorRow{"model.layers.{i}.mlp.gate.weight", "moe", true, SHAPE(experts(c), c.hidden_size), moe_ffn,
              SLOT(L(w, i).moe.router.weight)},
    TensorRow{"model.layers.{i}.mlp.experts.{e}.gate_proj.weight", "moe", true,
              SHAPE(expert_width(c), c.hidden_size), moe_ffn, no_layer_slot, {}, nullptr, kExpertsGateUp,
              EXPERT_SLOT(gate_proj)},
    TensorRow{"model.layers.{i}.mlp.experts.{e}.up_proj.weight", "moe", true,
              SHAPE(expert_width(c), c.hidden_size), moe_ffn, no_layer_slot, {}, nullptr, kExpertsGateUp,
              EXPERT_SLOT(up_proj)},
    TensorRow{"model.layers.{i}.mlp.experts.{e}.down_proj.weight", "moe", true,
              SHAPE(c.hidden_size, expert_width(c)), moe_ffn, no_layer_slot, {}, nullptr, kExpertsDown,
              EXPERT_SLOT(down_proj)},
    // The gated shared expert (Qwen3.5-MoE, Qwen3-Next).
    TensorRow{"model.layers.{i}.mlp.shared_expert.gate_proj.weight", "moe", true,
              SHAPE(shared_width(c), c.hidden_size), shared_expert, SLOT(L(w, i).moe.shared_expert.gate_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.shared_expert.up_proj.weight", "moe", true,
              SHAPE(shared_width(c), c.hidden_size), shared_expert, SLOT(L(w, i).moe.shared_expert.up_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.shared_expert.down_proj.weight", "moe", true,
              SHAPE(c.hidden_size, shared_width(c)), shared_expert, SLOT(L(w, i).moe.shared_expert.down_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.shared_expert_gate.weight", "moe", true, SHAPE(1, c.hidden_size), shared_expert,
              SLOT(L(w, i).moe.shared_expert_gate.weight)},
    // bailing: the router's selection bias and the ungated shared expert(s) (num_shared_experts · I wide).
    TensorRow{"model.layers.{i}.mlp.gate.expert_bias", "moe", true, SHAPE(experts(c)), expert_bias,
              SLOT(L(w, i).moe.expert_bias)},
    TensorRow{"model.layers.{i}.mlp.shared_experts.gate_proj.weight", "moe", true,
              SHAPE(shared_width(c), c.hidden_size), ungated_shared_expert,
              SLOT(L(w, i).moe.shared_expert.gate_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.shared_experts.up_proj.weight", "moe", true,
              SHAPE(shared_width(c), c.hidden_size), ungated_shared_expert,
              SLOT(L(w, i).moe.shared_expert.up_proj.weight)},
    TensorRow{"model.layers.{i}.mlp.shared_experts.down_proj.weight", "moe", true,
              SHAPE(c.hidden_size, shared_width(c)), ungated_shared_expert,
              SLOT(L(w, i).moe.shared_expert.down_proj.weight)},
    TensorRow{"model.layers.{i}.post_feedforward_layernorm.weight", "norm", true, SHAPE(c.hidden_size),
              post_norm_block, SLOT(L(w, i).post_feedforward_layernorm)},
    TensorRow{"model.norm.weight", "norm", false, SHAPE(c.hidden_size), always,
              [](DecoderWeights& w, int) -> Tensor& { return w.norm; }, {}, nullptr, {}, nullptr, nullptr,
              /*zero_centred=*/true},
    TensorRow{"lm_head.weight", "lm_head", false, SHAPE(c.vocab_size, c.hidden_size), untied,
              [](DecoderWeights& w, int) -> Tensor& { return w.lm_head.weight; }},
};

#undef SHAPE
#undef SLOT
#undef EXPERT_SLOT

std::string expand(std::string_view pattern, int layer, int expert = -1) {
  std::string name(pattern);
  const auto at = name.find("{i}");
  if (at != std::string::npos) name.replace(at, 3, std::to_string(layer));
  const auto e = name.find("{e}");
  if (e != std::string::npos) name.replace(e, 3, std::to_string(expert));
  return name;
}

}  // namespace

std::span<const TensorRow> tensor_table() { return kTensorTable; }

std::string tensor_name(const TensorRow& row, int layer, int expert) { return expand(row.pattern, layer, expert); }

Tensor& tensor_slot(DecoderWeights& w, const TensorSpec& spec) {
  return spec.row->expert_slot != nullptr ? spec.row->expert_slot(w, spec.layer, spec.expert)
                                          : spec.row->slot(w, spec.layer);
}
std::string tensor_alias(const TensorRow& row, int layer) {
  return row.alias.empty() ? std::string() : expand(row.alias, layer);
}

bool tensor_zero_centred(const ModelConfig& config, const TensorSpec& spec) {
  return spec.row->zero_centred && architecture_spec(config.architecture).zero_centred_norms;
}

FusedPlace tensor_fused_place(const ModelConfig& config, const TensorSpec& spec) {
  FusedPlace place;
  const TensorRow& row = *spec.row;
  const bool grouped = architecture_spec(config.architecture).gdn_grouped_projections && !row.fused_grouped.empty();
  const auto pattern = [&](const TensorRow& r) { return grouped ? r.fused_grouped : r.fused; };
  if (pattern(row).empty()) return place;
  const bool expert = row.expert_slot != nullptr;
  place.name = expand(pattern(row), spec.layer);
  place.blocks = expert    ? config.moe->num_experts
                 : grouped ? gdn_key_heads(config)
                 : row.fused_blocks ? row.fused_blocks(config)
                                    : 1;
  HLM_CHECK(place.blocks > 0, "tensor table: fused ", place.name, " has no blocks");
  const auto share = [&](const TensorRow& part) {  // a part's rows in one block
    const int64_t rows = part.shape(config)[0];
    return expert ? rows : rows / place.blocks;
  };
  std::vector<const TensorRow*> parts;  // in block order: grouped_order (grouped tensors), then table order
  for (const TensorRow& part : kTensorTable)
    if (pattern(part) == pattern(row) && part.present(config, spec.layer)) parts.push_back(&part);
  std::stable_sort(parts.begin(), parts.end(), [&](const TensorRow* a, const TensorRow* b) {
    return grouped && a->grouped_order < b->grouped_order;
  });
  for (const TensorRow* part : parts) {
    if (part == &row) place.offset = place.block_rows;
    place.block_rows += share(*part);
  }
  place.rows_per_block = share(row);
  HLM_CHECK(expert || place.rows_per_block * place.blocks == spec.shape[0], "tensor table: ", spec.name, " of ",
            spec.shape[0], " rows is not ", place.blocks, " equal blocks");
  place.first_block = expert ? spec.expert : 0;
  place.num_blocks = expert ? 1 : place.blocks;
  return place;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& config) {
  // Ordered as a reader expects: rows before the first per-layer row, then layer by layer, then the rest.
  const auto first_layer_row = std::find_if(kTensorTable.begin(), kTensorTable.end(),
                                            [](const TensorRow& r) { return r.per_layer; }) - kTensorTable.begin();
  const auto order = [&](const TensorSpec& s) -> int64_t {
    if (s.layer >= 0) return s.layer;
    return s.row - kTensorTable.data() < first_layer_row ? -1 : config.num_hidden_layers;
  };
  std::vector<TensorSpec> out;
  for (const TensorRow& row : kTensorTable) {
    const int layers = row.per_layer ? static_cast<int>(config.num_hidden_layers) : 1;
    for (int i = 0; i < layers; ++i) {
      const int layer = row.per_layer ? i : -1;
      if (!row.present(config, layer)) continue;
      if (row.expert_slot == nullptr) {
        out.push_back({tensor_name(row, i), std::string(row.group), row.shape(config), &row, layer});
        continue;
      }
      for (int e = 0; e < static_cast<int>(config.moe->num_experts); ++e)
        out.push_back({tensor_name(row, i, e), std::string(row.group), row.shape(config), &row, layer, e});
    }
  }
  std::stable_sort(out.begin(), out.end(), [&](const TensorSpec& a, const TensorSpec& b) { return order(a) < order(b); });
  return out;
}

}  // namespace hlm
