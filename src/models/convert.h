// Teacher -> hybrid student conversion: the initialisation half of the seed paper's Algorithm 1 (App. C.3, lines
// 6-17; App. C.4 "Gated DeltaNet initialization"). A dense teacher becomes the hybrid student its architecture's table
// entry names (ArchitectureSpec::hybrid_student: qwen3 -> qwen3_hybrid, granite -> granite_hybrid, which keeps
// Granite's four multipliers) whose layers in `full_layers` keep softmax attention and whose other layers become
// Gated DeltaNet:
//   - copied unchanged: embeddings, final norm, every layer's input/post-attention norms and MLP, every retained
//     full-attention layer (with its q/k norms and biases);
//   - GDN layer ℓ ∉ F: H = num_attention_heads heads of d_h = head_dim for keys and values;
//     q_proj ← W_Q, o_proj ← W_O; k_proj/v_proj head h ← teacher kv head ⌊h/G⌋, G = H / H_kv (line 11);
//     conv: last tap 1, others 0, in every channel (line 12; pre-SiLU identity); A_log = −4 (line 13);
//     a_proj, b_proj, g_proj ~ U(−d^-1/2, d^-1/2), d = hidden size (line 14); o_norm = 1 (γ, line 14);
//     dt_bias = softplus⁻¹(Δ), log Δ ~ U(log 1e-3, log 1e-1) (line 15);
//   - LM head untied: a separate copy of the embedding when the teacher is tied (line 17, Table C.3), else a copy of
//     the teacher's lm_head.
// Teacher tensors without a student counterpart are dropped: the q/k norms of converted layers (the student's GDN has
// none) and, for teachers with attention_bias, the q/k/v/o biases of converted layers (GDN projections have no bias);
// convert_dropped_tensors lists them. New parameters come from the counter-based RNG (core/rng.h) with one stream per
// tensor name (rng_stream_id of the HF name), so they depend only on `seed`, never on thread count or data order.
// Non-goals: the distillation loop (lines 18-27).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"

namespace hlm {

struct ConvertOptions {
  bool neg_eigval = false;  // student β = 2·sigmoid(b) (decision D4); the seed's runs use sigmoid
  uint64_t seed = 0;        // init seed of the new GDN parameters (the seed's Table C.3: 0)
};

// Algorithm 1's fixed initial values.
inline constexpr float kConvertALog = -4.0f;     // line 13: decay α ≈ 1
inline constexpr double kConvertDtMin = 1e-3;    // line 15: log Δ ~ U(log 1e-3, log 1e-1)
inline constexpr double kConvertDtMax = 1e-1;
inline constexpr double kConvertDtFloor = 1e-4;  // FLA/OLMo floor (decision D5); inactive for Δ >= 1e-3
inline constexpr int64_t kConvertConvKernel = 4;  // Table C.3: conv. width 4

// The student's config: the teacher's (Granite's multipliers included), with the student model_type, layer_types from
// `full_layers`, untied embeddings, dtype float32 (Model::save writes f32) and the GDN geometry above. Input error for
// a teacher whose architecture has no hybrid student (only dense qwen3 and granite have one) or for a bad layer list
// (out of range, duplicates, empty).
ModelConfig convert_student_config(const ModelConfig& teacher, const std::vector<int>& full_layers,
                                   const ConvertOptions& options);

// Teacher tensors (HF names) that the student does not carry (see above), in tensor-table order.
std::vector<std::string> convert_dropped_tensors(const ModelConfig& teacher, const std::vector<int>& full_layers);

// Builds the student. Every copied tensor is a deep copy (the student never shares storage with the teacher).
Model convert_to_hybrid(const Model& teacher, const std::vector<int>& full_layers, const ConvertOptions& options);

}  // namespace hlm
