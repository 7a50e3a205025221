// Model::create (random weights from the tensor table) and Model::save (the table back to HF names).
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "models/checkpoint.h"
#include "models/model.h"
#include "models/tensor_table.h"

namespace hlm {

namespace {

// Initial values of one tensor, by what it is.
void init_tensor(Tensor& t, const TensorSpec& spec, const ModelConfig& c, uint64_t seed) {
  float* p = t.f32();
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const uint64_t stream = rng_stream_id(spec.name.c_str());
  const std::string& name = spec.name;
  const auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (spec.group == "norm") {
    std::fill(p, p + n, 1.0f);
  } else if (ends_with(".D") && c.mamba) {  // Mamba-2 skip: ones (HF's init)
    std::fill(p, p + n, 1.0f);
  } else if (ends_with(".A_log")) {
    const LinearAttentionConfig l = c.linear.value_or(LinearAttentionConfig{});  // Mamba-2: the same default ranges
    for (uint64_t i = 0; i < n; ++i) {
      // (u + 2^-25): never exactly a_log_min, so log stays finite when a_log_min is 0.
      const double u = rng_uniform(seed, stream, i) + 0x1p-25;
      p[i] = static_cast<float>(std::log(l.a_log_min + (l.a_log_max - l.a_log_min) * u));
    }
  } else if (ends_with(".dt_bias")) {
    const LinearAttentionConfig l = c.linear.value_or(LinearAttentionConfig{});
    for (uint64_t i = 0; i < n; ++i) {
      const double u = rng_uniform(seed, stream, i);
      double dt = std::exp(std::log(l.dt_min) + u * (std::log(l.dt_max) - std::log(l.dt_min)));
      dt = std::max(dt, l.dt_init_floor);
      p[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus⁻¹(dt)
    }
  } else if (ends_with(".bias")) {
    std::fill(p, p + n, 0.0f);
  } else {
    rng_fill_normal(p, n, 0.0f, 0.02f, seed, stream);
  }
}

}  // namespace

Model Model::create(const ModelConfig& config, uint64_t seed) {
  Model m;
  m.config_ = config;
  m.weights_.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (const TensorSpec& spec : expected_tensors(config)) {
    Tensor t = Tensor::zeros(spec.shape);
    init_tensor(t, spec, config, seed);
    if (spec.row->runtime_shape != nullptr) t = t.reshape(spec.row->runtime_shape(config));
    tensor_slot(m.weights_, spec) = t;
  }
  if (config.tie_word_embeddings) m.weights_.lm_head.weight = m.weights_.embed_tokens;
  m.build_rope_tables();
  return m;
}

void Model::save(const std::filesystem::path& dir) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  DecoderWeights& w = const_cast<DecoderWeights&>(weights_);  // slot() is shared with loading; nothing is written
  for (const TensorSpec& spec : expected_tensors(config_)) {
    Tensor t = tensor_slot(w, spec).reshape(spec.shape);
    if (tensor_zero_centred(config_, spec)) {  // back to the stored offset w (exact unless w was below ~6e-8)
      t = t.clone();
      float* p = t.f32();
      for (int64_t j = 0; j < t.numel(); ++j) p[j] -= 1.0f;
    }
    tensors.emplace_back(spec.name, t);
  }
  checkpoint_write(dir, tensors, {{"format", "pt"}, {"generator", "hybridlm"}});
  file_write_atomic(dir / "config.json", model_config_to_json(config_).dump(2) + "\n");
}

}  // namespace hlm
