#include "models/tensor_table.h"

#include <array>

#include "models/architecture.h"

namespace hlm {
namespace {

int64_t q_width(const ModelConfig& c) { return c.num_attention_heads * c.head_dim; }
int64_t kv_width(const ModelConfig& c) { return c.num_key_value_heads * c.head_dim; }
bool always(const ModelConfig&) { return true; }
bool attention_bias(const ModelConfig& c) { return c.attention_bias; }
bool mlp_bias(const ModelConfig& c) { return c.mlp_bias; }
bool qk_norm(const ModelConfig& c) { return architecture_spec(c.architecture).qk_norm; }
bool untied(const ModelConfig& c) { return !c.tie_word_embeddings; }

// Shorthands for the slot column.
DecoderLayerWeights& L(DecoderWeights& w, int i) { return w.layers[static_cast<size_t>(i)]; }

const std::array<TensorRow, 21> kTensorTable{{
    {"model.embed_tokens.weight", "embedding", false,
     [](const ModelConfig& c) { return Shape{c.vocab_size, c.hidden_size}; }, always,
     [](DecoderWeights& w, int) -> Tensor& { return w.embed_tokens; }},
    {"model.layers.{i}.input_layernorm.weight", "norm", true,
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).input_layernorm; }},
    {"model.layers.{i}.self_attn.q_proj.weight", "attention", true,
     [](const ModelConfig& c) { return Shape{q_width(c), c.hidden_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.q_proj.weight; }},
    {"model.layers.{i}.self_attn.q_proj.bias", "attention", true,
     [](const ModelConfig& c) { return Shape{q_width(c)}; }, attention_bias,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.q_proj.bias; }},
    {"model.layers.{i}.self_attn.k_proj.weight", "attention", true,
     [](const ModelConfig& c) { return Shape{kv_width(c), c.hidden_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.k_proj.weight; }},
    {"model.layers.{i}.self_attn.k_proj.bias", "attention", true,
     [](const ModelConfig& c) { return Shape{kv_width(c)}; }, attention_bias,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.k_proj.bias; }},
    {"model.layers.{i}.self_attn.v_proj.weight", "attention", true,
     [](const ModelConfig& c) { return Shape{kv_width(c), c.hidden_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.v_proj.weight; }},
    {"model.layers.{i}.self_attn.v_proj.bias", "attention", true,
     [](const ModelConfig& c) { return Shape{kv_width(c)}; }, attention_bias,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.v_proj.bias; }},
    {"model.layers.{i}.self_attn.o_proj.weight", "attention", true,
     [](const ModelConfig& c) { return Shape{c.hidden_size, q_width(c)}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.o_proj.weight; }},
    {"model.layers.{i}.self_attn.o_proj.bias", "attention", true,
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, attention_bias,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.o_proj.bias; }},
    {"model.layers.{i}.self_attn.q_norm.weight", "norm", true,
     [](const ModelConfig& c) { return Shape{c.head_dim}; }, qk_norm,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.q_norm; }},
    {"model.layers.{i}.self_attn.k_norm.weight", "norm", true,
     [](const ModelConfig& c) { return Shape{c.head_dim}; }, qk_norm,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).self_attn.k_norm; }},
    {"model.layers.{i}.post_attention_layernorm.weight", "norm", true,
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).post_attention_layernorm; }},
    {"model.layers.{i}.mlp.gate_proj.weight", "mlp", true,
     [](const ModelConfig& c) { return Shape{c.intermediate_size, c.hidden_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).mlp.gate_proj.weight; }},
    {"model.layers.{i}.mlp.gate_proj.bias", "mlp", true,
     [](const ModelConfig& c) { return Shape{c.intermediate_size}; }, mlp_bias,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).mlp.gate_proj.bias; }},
    {"model.layers.{i}.mlp.up_proj.weight", "mlp", true,
     [](const ModelConfig& c) { return Shape{c.intermediate_size, c.hidden_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).mlp.up_proj.weight; }},
    {"model.layers.{i}.mlp.up_proj.bias", "mlp", true,
     [](const ModelConfig& c) { return Shape{c.intermediate_size}; }, mlp_bias,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).mlp.up_proj.bias; }},
    {"model.layers.{i}.mlp.down_proj.weight", "mlp", true,
     [](const ModelConfig& c) { return Shape{c.hidden_size, c.intermediate_size}; }, always,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).mlp.down_proj.weight; }},
    {"model.layers.{i}.mlp.down_proj.bias", "mlp", true,
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, mlp_bias,
     [](DecoderWeights& w, int i) -> Tensor& { return L(w, i).mlp.down_proj.bias; }},
    {"model.norm.weight", "norm", false, [](const ModelConfig& c) { return Shape{c.hidden_size}; }, always,
     [](DecoderWeights& w, int) -> Tensor& { return w.norm; }},
    {"lm_head.weight", "lm_head", false,
     [](const ModelConfig& c) { return Shape{c.vocab_size, c.hidden_size}; }, untied,
     [](DecoderWeights& w, int) -> Tensor& { return w.lm_head.weight; }},
}};

}  // namespace

std::span<const TensorRow> tensor_table() { return kTensorTable; }

std::string tensor_name(const TensorRow& row, int layer) {
  std::string name(row.pattern);
  const auto at = name.find("{i}");
  if (at != std::string::npos) name.replace(at, 3, std::to_string(layer));
  return name;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& config) {
  std::vector<TensorSpec> out;
  for (const TensorRow& row : kTensorTable) {
    if (!row.present(config)) continue;
    const int layers = row.per_layer ? static_cast<int>(config.num_hidden_layers) : 1;
    for (int i = 0; i < layers; ++i)
      out.push_back({tensor_name(row, i), std::string(row.group), row.shape(config), &row, row.per_layer ? i : -1});
  }
  return out;
}

}  // namespace hlm
