#include "layers/attention_layer.h"

#include "ops/attention/attention.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace hlm {

void attention_layer_forward(float* out, const float* x, const AttentionWeights& w, const AttentionDims& dims,
                             const RopeTable* rope, const TokenBatch& batch, const int32_t* positions, Arena& arena) {
  const int64_t T = batch.total_tokens();
  const int64_t D = dims.head_dim;
  const Arena::Mark mark = arena.mark();
  float* q = static_cast<float*>(arena.allocate(sizeof(float) * T * dims.q_heads * D));   // [T, Hq, D]
  float* k = static_cast<float*>(arena.allocate(sizeof(float) * T * dims.kv_heads * D));  // [T, Hkv, D]
  float* v = static_cast<float*>(arena.allocate(sizeof(float) * T * dims.kv_heads * D));  // [T, Hkv, D]
  float* mixed = static_cast<float*>(arena.allocate(sizeof(float) * T * dims.q_heads * D));
  linear_forward(q, x, w.q_proj, T);
  linear_forward(k, x, w.k_proj, T);
  linear_forward(v, x, w.v_proj, T);
  // q/k norm: the weight's length says whether it normalises each head (D) or the whole projection (H·D).
  const auto qk_norm = [&](float* x, const Tensor& weight, int64_t heads) {
    const int64_t width = weight.numel() == D ? D : heads * D;
    HLM_CHECK(weight.numel() == width, "q/k norm of ", weight.numel(), " entries for ", heads, " heads of ", D);
    rmsnorm_forward(x, x, weight.f32(), T * heads * D / width, width, dims.norm_eps);
  };
  if (w.q_norm.defined()) qk_norm(q, w.q_norm, dims.q_heads);
  if (w.k_norm.defined()) qk_norm(k, w.k_norm, dims.kv_heads);
  if (rope != nullptr) {
    rope_forward(q, positions, T, dims.q_heads, *rope);
    rope_forward(k, positions, T, dims.kv_heads, *rope);
  }
  const AttentionShape shape{T, dims.q_heads, dims.kv_heads, D};
  attention_forward(mixed, q, k, v, batch.cu_seqlens.data(), batch.num_sequences(), shape, dims.scale);
  linear_forward(out, mixed, w.o_proj, T);
  arena.release(mark);
}

}  // namespace hlm
