// Rotary position embedding (RoPE), HF convention ("rotate_half"): for a head vector x of size D with rotary
// dimension R (R = D · partial_rotary_factor, even), pairs are (x[i], x[i + R/2]) for i < R/2, rotated by angle
// pos · inv_freq[i]; cos/sin are multiplied by attention_scaling (1 except yarn/longrope). Dims >= R pass through.
//
// The frequency table follows HF transformers' rope_type kinds: default, linear, dynamic (treated as default at
// positions < max_position_embeddings, as HF does for a fresh cache), yarn, llama3. Parameters come from config.json
// (`rope_parameters` in transformers 5.x, or `rope_theta` + `rope_scaling` in 4.x files).
//
// Numerics: HF builds inv_freq with float32 tensor ops (pow, reciprocal, products with scalars cast to float32) and
// the angle as float32 position · inv_freq before cos/sin; we replay the same float32 operation order, so tables
// agree to ~1 ulp (only pow/cos/sin may differ in the last bit). Non-goals: longrope, per-layer rope dicts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hlm {

struct RopeParams {
  std::string rope_type = "default";  // default | linear | dynamic | yarn | llama3
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;                                  // linear, dynamic, yarn, llama3
  std::optional<int64_t> original_max_position_embeddings;  // yarn, llama3 (absent: max_position_embeddings)
  std::optional<double> attention_factor;               // yarn: overrides the derived mscale
  double beta_fast = 32.0;                              // yarn; 0 = default (HF: `beta_fast or 32`)
  double beta_slow = 1.0;                               // yarn; 0 = default (HF: `beta_slow or 1`)
  std::optional<double> mscale;                         // yarn (DeepSeek style)
  std::optional<double> mscale_all_dim;                 // yarn (DeepSeek style)
  bool truncate = true;                                 // yarn: floor/ceil the correction range
  double low_freq_factor = 1.0;                         // llama3
  double high_freq_factor = 4.0;                        // llama3
  // Pairs (2i, 2i+1) instead of (i, i + R/2): the "interleaved" convention (Cohere2's repeat_interleave angles and
  // its rotate_half over even/odd dims). Set by the architecture, not read from the rope dict.
  bool interleaved = false;
};

struct RopeTable {
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;          // R
  std::vector<float> inv_freq;     // [R/2]
  float attention_scaling = 1.0f;  // multiplies cos and sin
  // Positions must be < this (0 = no limit). Set for dynamic: HF recomputes inv_freq once a sequence grows past
  // max_position_embeddings, which we do not support, so rope_forward refuses such positions.
  int64_t max_position = 0;
  bool interleaved = false;  // pairs (2i, 2i+1) (RopeParams::interleaved); CPU only
};

// Builds the table; `max_position_embeddings` is the config's value (yarn/llama3 fall back to it when
// original_max_position_embeddings is absent). Throws an input error for an unknown rope_type or bad values.
RopeTable rope_table_build(const RopeParams& params, int64_t head_dim, int64_t max_position_embeddings);

// In place on x [T, H, D] (contiguous): token t rotated by angle positions[t] · inv_freq. Throws an input error
// for a negative position or one >= table.max_position (when set).
void rope_forward(float* x, const int32_t* positions, int64_t T, int64_t H, const RopeTable& table);

// Templated forward (T = float: the entry point above, bit-identical; T = double: gradient checks, same float angle
// pos · inv_freq, cos/sin and attention_scaling in double).
template <typename T>
void rope_forward(T* x, const int32_t* positions, int64_t n, int64_t H, const RopeTable& table);

// Backward, in place on d [T, H, D] (the gradient w.r.t. the rotated x on entry, w.r.t. the unrotated x on exit):
// the forward is linear, x' = M x with M = attention_scaling · rotation per pair, so dx = Mᵀ dx' — the transposed
// (inverse-angle) rotation, scaled by attention_scaling. Needs only positions and the table. Dims >= R pass through.
template <typename T>
void rope_backward(T* d, const int32_t* positions, int64_t n, int64_t H, const RopeTable& table);

}  // namespace hlm
