// Lightning Attention-2 mixer forward (contract in lightning_layer.h): fused projection, per-head q/k RMSNorm, RoPE,
// simple GLA (ops/simple_gla), group RMSNorm, sigmoid gate, dense. Scratch lives in the arena between a mark and its
// release.
#include "layers/lightning_layer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/simple_gla/simple_gla.h"

namespace hlm {

std::vector<float> lightning_decay(int64_t layer, int64_t num_layers, int64_t heads) {
  // HF: slope = −slopes(fp32) · (1 − (ℓ−1)/(L−1) + 1e−5): a float tensor times a Python float (float32 product).
  const std::vector<double> slopes = alibi_slopes(heads);
  const double factor = 1.0 - static_cast<double>(layer - 1) / static_cast<double>(num_layers - 1) + 1e-5;
  std::vector<float> g(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h)
    g[static_cast<size_t>(h)] = -(static_cast<float>(slopes[static_cast<size_t>(h)]) * static_cast<float>(factor));
  return g;
}

void lightning_layer_forward(float* out, const float* x, const LightningWeights& w, const LightningDims& d,
                             const RopeTable* rope, const int32_t* positions, const TokenBatch& batch,
                             const float* state_in, float* state_out, Arena& arena) {
  const int64_t T = batch.total_tokens(), H = w.qkv.in_features(), nq = d.heads, D = d.head_dim, I = d.inner();
  HLM_CHECK(w.qkv.out_features() == 3 * I, "lightning layer: query_key_value has ", w.qkv.out_features(),
            " rows, expected ", 3 * I);
  HLM_CHECK(w.g_proj.out_features() == I && w.dense.in_features() == I && w.dense.out_features() == H &&
                w.q_norm.numel() == D && w.k_norm.numel() == D && w.g_norm.numel() == I,
            "lightning layer: weight shapes do not match ", nq, " heads of ", D);
  HLM_CHECK(static_cast<int64_t>(d.decay.size()) == nq && I % d.group_norm_size == 0,
            "lightning layer: decay / group_norm_size");
  const Arena::Mark mark = arena.mark();
  float* proj = arena.tensor({T, 3 * I}).f32();
  linear_forward(proj, x, w.qkv, T);
  float* q = arena.tensor({T, I}).f32();
  float* k = arena.tensor({T, I}).f32();
  float* v = arena.tensor({T, I}).f32();
#pragma omp parallel for
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(proj + t * 3 * I, I, q + t * I);
    std::copy_n(proj + t * 3 * I + I, I, k + t * I);
    std::copy_n(proj + t * 3 * I + 2 * I, I, v + t * I);
  }
  rmsnorm_forward(q, q, w.q_norm.f32(), T * nq, D, d.norm_eps);
  rmsnorm_forward(k, k, w.k_norm.f32(), T * nq, D, d.norm_eps);
  if (rope != nullptr) {
    rope_forward(q, positions, T, nq, *rope);
    rope_forward(k, positions, T, nq, *rope);
  }
  float* o = arena.tensor({T, I}).f32();
  SimpleGlaInputs<float> in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.g = d.decay.data();
  in.state_in = state_in;
  in.cu_seqlens = batch.cu_seqlens.data();
  in.n_seqs = batch.num_sequences();
  simple_gla_chunked_forward<float>({o, state_out}, in, {T, nq, D, D});

  // Group RMSNorm (fp32 values, sums in double), then the sigmoid gate.
  float* gate = arena.tensor({T, I}).f32();
  linear_forward(gate, x, w.g_proj, T);
  const int64_t G = d.group_norm_size, width = I / G;
  const float* gw = w.g_norm.f32();
#pragma omp parallel for
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t g = 0; g < G; ++g) {
      float* row = o + t * I + g * width;
      double sq = 0.0;
      for (int64_t j = 0; j < width; ++j) sq += static_cast<double>(row[j]) * row[j];
      const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(width) + d.norm_eps));
      for (int64_t j = 0; j < width; ++j) {
        const float gv = gate[t * I + g * width + j];
        const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(gv))));
        row[j] = gw[g * width + j] * (row[j] * inv) * s;
      }
    }
  }
  linear_forward(out, o, w.dense, T);
  arena.release(mark);
}

}  // namespace hlm
