// convert_to_hybrid: Algorithm 1's initialisation (see convert.h). Tensors the student shares with the teacher by name
// are deep copies; the GDN parameters of each converted layer are filled by walking gdn_param_tensors (the GDN
// parameter table), one rule per parameter name.
#include "models/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "core/rng.h"
#include "models/architecture.h"
#include "models/tensor_table.h"

namespace hlm {
namespace {

// The teacher's self_attn projections that a converted layer takes over (Algorithm 1 lines 10-11).
constexpr std::string_view kTransferred[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"};

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

bool is_transferred(const std::string& name, int layer) {
  if (layer < 0) return false;
  const std::string prefix = layer_prefix(layer) + "self_attn.";
  return std::any_of(std::begin(kTransferred), std::end(kTransferred),
                     [&](std::string_view p) { return name == prefix + std::string(p); });
}

// name -> tensor of every tensor the config's table names (the model's own storage; read only).
std::map<std::string, Tensor> named_tensors(const Model& model) {
  std::map<std::string, Tensor> out;
  // slot() is shared with loading; nothing is written through it here.
  DecoderWeights& w = const_cast<DecoderWeights&>(model.weights());
  for (const TensorSpec& spec : expected_tensors(model.config())) out[spec.name] = tensor_slot(w, spec);
  return out;
}

// W^(h) ← W_T^(⌊h/G⌋) for h = 0..H-1 (line 11): the teacher's [H_kv·d_h, D] head rows repeated per query head.
void clone_kv_heads(Tensor& dst, const Tensor& teacher, int64_t H, int64_t H_kv, int64_t d_h, int64_t D) {
  const Tensor src = teacher.contiguous();
  HLM_CHECK(src.dim(0) == H_kv * d_h && src.dim(1) == D && dst.dim(0) == H * d_h && dst.dim(1) == D,
            "k/v clone: teacher ", src.shape().str(), ", student ", dst.shape().str());
  const int64_t G = H / H_kv, rows = d_h * D;
  for (int64_t h = 0; h < H; ++h)
    std::memcpy(dst.f32() + h * rows, src.f32() + (h / G) * rows, static_cast<size_t>(rows) * sizeof(float));
}

void copy_into(Tensor& dst, const Tensor& src) {
  HLM_CHECK(dst.numel() == src.numel(), "copy: ", src.shape().str(), " into ", dst.shape().str());
  const Tensor c = src.contiguous();
  std::memcpy(dst.f32(), c.f32(), static_cast<size_t>(dst.numel()) * sizeof(float));
}

// One converted layer's GDN parameters, by name (every name of gdn_param_tensors must have a rule).
GdnWeights convert_gdn_layer(const Model& teacher, const std::map<std::string, Tensor>& t, int layer,
                             const GdnDims& dims, uint64_t seed) {
  const ModelConfig& tc = teacher.config();
  const int64_t D = tc.hidden_size, H = tc.num_attention_heads, H_kv = tc.num_key_value_heads, d_h = tc.head_dim;
  const std::string attn = layer_prefix(layer) + "self_attn.";
  const std::string gdn = layer_prefix(layer) + "linear_attn.";
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));  // line 14: d^-1/2, d = width
  GdnWeights w = GdnWeights::zeros(dims, D);
  for (auto& [name_c, tensor] : gdn_param_tensors(w)) {
    const std::string name(name_c);
    const std::string full_name = gdn + name;
    const uint64_t stream = rng_stream_id(full_name.c_str());
    float* p = tensor->f32();
    const int64_t n = tensor->numel();
    if (name == "q_proj.weight" || name == "o_proj.weight") {  // line 10: W_Q, W_O copied
      copy_into(*tensor, t.at(attn + name));
    } else if (name == "k_proj.weight" || name == "v_proj.weight") {  // line 11: cloned per query head
      clone_kv_heads(*tensor, t.at(attn + name), H, H_kv, d_h, D);
    } else if (name == "q_conv1d.weight" || name == "k_conv1d.weight" || name == "v_conv1d.weight") {
      // line 12: κ_j = δ_{j,K}: the last tap (the current token) is 1, so conv(x) = x before the SiLU.
      const int64_t K = tensor->dim(1);
      for (int64_t c = 0; c < tensor->dim(0); ++c) p[c * K + K - 1] = 1.0f;
    } else if (name == "A_log") {  // line 13
      std::fill(p, p + n, kConvertALog);
    } else if (name == "a_proj.weight" || name == "b_proj.weight" || name == "g_proj.weight") {  // line 14
      rng_fill_uniform(p, static_cast<uint64_t>(n), -bound, bound, seed, stream);
    } else if (name == "o_norm.weight") {  // line 14: γ = 1
      std::fill(p, p + n, 1.0f);
    } else if (name == "dt_bias") {  // line 15: b_Δ = softplus⁻¹(Δ), log Δ ~ U(log 1e-3, log 1e-1)
      const double lo = std::log(kConvertDtMin), hi = std::log(kConvertDtMax);
      for (int64_t h = 0; h < n; ++h) {
        const double u = rng_uniform(seed, stream, static_cast<uint64_t>(h));
        const double dt = std::max(std::exp(lo + u * (hi - lo)), kConvertDtFloor);
        p[h] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // stable softplus⁻¹ (decision D5)
      }
    } else {
      throw_internal_error("convert: no Algorithm 1 rule for GDN parameter '", name, "'");
    }
  }
  return w;
}

}  // namespace

ModelConfig convert_student_config(const ModelConfig& teacher, const std::vector<int>& full_layers,
                                   const ConvertOptions& options) {
  // The student's architecture comes from the teacher's table entry (ArchitectureSpec::hybrid_student).
  const std::string_view student_type = architecture_spec(teacher.architecture).hybrid_student;
  std::string teachers;
  const ArchitectureSpec* student_spec = nullptr;
  for (const ArchitectureSpec* spec : architecture_specs()) {
    if (!spec->hybrid_student.empty()) teachers += str_cat(teachers.empty() ? "" : ", ", spec->model_type);
    if (!student_type.empty() && spec->model_type == student_type) student_spec = spec;
  }
  HLM_CHECK_INPUT(!student_type.empty(), "convert: teacher model_type '", teacher.model_type,
                  "' is not supported (the teacher must be a dense model of: ", teachers, ")");
  HLM_CHECK(student_spec != nullptr, "convert: no architecture for student model_type ", student_type);
  for (const std::string& kind : teacher.layer_types)
    HLM_CHECK_INPUT(kind == "full_attention", "convert: the teacher must be dense (every layer full_attention), got ",
                    kind);
  const int L = static_cast<int>(teacher.num_hidden_layers);
  std::set<int> full;
  for (int i : full_layers) {
    HLM_CHECK_INPUT(i >= 0 && i < L, "convert: full-attention layer ", i, " is out of range [0, ", L, ")");
    HLM_CHECK_INPUT(full.insert(i).second, "convert: full-attention layer ", i, " is listed twice");
  }
  HLM_CHECK_INPUT(!full.empty(), "convert: the full-attention layer list is empty");

  ModelConfig s = teacher;
  s.model_type = std::string(student_type);
  s.architecture = student_spec->architecture;
  s.tie_word_embeddings = false;  // line 17 / Table C.3: the LM head is a separate trainable copy
  s.dtype = "float32";            // Model::save writes f32 tensors
  s.unknown_keys.clear();
  for (int i = 0; i < L; ++i)
    s.layer_types[static_cast<size_t>(i)] = full.count(i) ? "full_attention" : "linear_attention";
  LinearAttentionConfig l;  // line 9: H heads of dimension d_h (keys and values), App. C.4
  l.num_key_heads = l.num_value_heads = teacher.num_attention_heads;
  l.key_head_dim = l.value_head_dim = teacher.head_dim;
  l.conv_kernel_dim = kConvertConvKernel;
  l.allow_neg_eigval = options.neg_eigval;
  s.linear = l;
  // Through JSON and back: the config is exactly what Model::load will read from the saved student.
  return parse_model_config(model_config_to_json(s), "convert: student config");
}

std::vector<std::string> convert_dropped_tensors(const ModelConfig& teacher, const std::vector<int>& full_layers) {
  const ModelConfig student = convert_student_config(teacher, full_layers, {});
  std::set<std::string> kept;
  for (const TensorSpec& spec : expected_tensors(student)) kept.insert(spec.name);
  std::vector<std::string> dropped;
  for (const TensorSpec& spec : expected_tensors(teacher))
    if (!kept.count(spec.name) && !is_transferred(spec.name, spec.layer)) dropped.push_back(spec.name);
  return dropped;
}

Model convert_to_hybrid(const Model& teacher, const std::vector<int>& full_layers, const ConvertOptions& options) {
  ModelConfig s = convert_student_config(teacher.config(), full_layers, options);
  const std::map<std::string, Tensor> t = named_tensors(teacher);
  const GdnDims dims = gdn_dims(s);

  DecoderWeights w;
  w.layers.resize(static_cast<size_t>(s.num_hidden_layers));
  for (int i = 0; i < static_cast<int>(s.num_hidden_layers); ++i)
    if (s.layer_kinds[static_cast<size_t>(i)] == LayerKind::LinearAttention)
      w.layers[static_cast<size_t>(i)].linear_attn = convert_gdn_layer(teacher, t, i, dims, options.seed);

  for (const TensorSpec& spec : expected_tensors(s)) {
    Tensor& slot = tensor_slot(w, spec);
    if (const auto it = t.find(spec.name); it != t.end()) {
      slot = it->second.clone();  // line 7: M_S ← M_T (embeddings, norms, MLPs, retained attention)
    } else if (spec.name == "lm_head.weight") {
      slot = teacher.weights().lm_head.weight.clone();  // line 17: the embedding itself when the teacher is tied
    }
    const Shape want = spec.row->runtime_shape ? spec.row->runtime_shape(s) : spec.shape;
    HLM_CHECK(slot.defined() && slot.shape() == want, "convert: student tensor ", spec.name, " is ",
              slot.defined() ? slot.shape().str() : std::string("missing"), ", expected ", want.str());
  }
  return Model::from_weights(std::move(s), std::move(w));
}

}  // namespace hlm
