// Causal grouped-query softmax attention over packed sequences: CPU reference, forward and backward.
// Shapes (contiguous): q, out, d_out, dq [T, Hq, D], k, v, dk, dv [T, Hkv, D]; T is the total of all sequences,
// sequence s spans tokens [cu_seqlens[s], cu_seqlens[s+1]). Query head h reads kv head h / (Hq / Hkv) (HF repeat_kv).
// Token t attends to tokens of its own sequence at positions <= t; with a sliding window W (shape.window > 0) only to
// positions j with t − W < j <= t: W keys including itself (HF masking_utils sliding_window_overlay; OLMo-3 and
// Cohere2 sliding_attention layers). Scores are scaled by `scale` (HF: head_dim^-1/2,
// Granite: attention_multiplier). Exact softmax with the max subtracted (fp32 scores for T = float, the row sum in
// double); queries are processed in blocks of `query_block` so scratch memory is O(query_block · T) per thread.
//
// Backward: needs q, k, v (nothing saved: the softmax P is recomputed per query block exactly as the forward computes
// it). With S = scale · q kᵀ, P = softmax(S), O = P V:
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ⊙ (dP − rowsum(dO ⊙ O)),  dQ = scale · dS K,  dK = scale · dSᵀ Q
// dq, dk, dv are OVERWRITTEN. Work items are (sequence, kv head): each owns its dk/dv rows and walks the query heads
// of its group and the query blocks in a fixed order (dk/dv summed in double), so GQA sums are deterministic and the
// result does not depend on the thread count. Scratch per thread: O(query_block · T + T · D).
//
// The templates run the same code for T = float (the engine) and T = double (gradient checks); the float overload of
// the forward is the historical entry point and calls the float instantiation (bit-identical to it).
#pragma once
#include <cstdint>

namespace hlm {

struct AttentionShape {
  int64_t total_tokens = 0;  // T
  int64_t q_heads = 0;       // Hq
  int64_t kv_heads = 0;      // Hkv, divides Hq
  int64_t head_dim = 0;      // D
  int64_t window = 0;        // sliding window W (keys t−W+1 .. t); 0 = unbounded causal attention
};

// First key position that query position `pos` sees under `window` (0 = unbounded): max(0, pos − W + 1).
inline int64_t attention_window_begin(int64_t pos, int64_t window) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

void attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* cu_seqlens,
                       int64_t n_seqs, const AttentionShape& shape, float scale, int64_t query_block = 64);

template <typename T>
void attention_forward(T* out, const T* q, const T* k, const T* v, const int64_t* cu_seqlens, int64_t n_seqs,
                       const AttentionShape& shape, double scale, int64_t query_block = 64);

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* d_out, const T* q, const T* k, const T* v,
                        const int64_t* cu_seqlens, int64_t n_seqs, const AttentionShape& shape, double scale,
                        int64_t query_block = 64);

}  // namespace hlm
