// Gated delta rule (the core of a Gated DeltaNet layer, docs gdn.md §0-§3): CPU references, forward and backward.
// Two implementations that are tested against each other: a token-by-token recurrence (templated on the storage
// type, float and double, so gradients can be checked by finite differences) and the chunked WY/UT form (float),
// which is the stage-by-stage specification for the CUDA kernels. Non-goals: L2 normalisation of q/k, the gate
// (A_log, dt_bias, softplus), the β sigmoid, the short conv and the output norm; those are separate ops.
//
// Layout (packed sequences, token-major, contiguous; T = total tokens of all sequences):
//   q, k   [T, Hk, dk]       used as given (the caller L2-normalises them)
//   v      [T, Hv, dv]
//   g      [T, Hv]           per-token LOG decay α = e^g (normally ≤ 0, not assumed)
//   beta   [T, Hv]           write strength (normally (0,1), or (0,2) for negative eigenvalues)
//   cu_seqlens int64 [N+1]   sequence s spans tokens [cu[s], cu[s+1]); cu[0] = 0, cu[N] = T
//   h0, hT [N, Hv, dv, dk]   per-sequence state M = Sᵀ (dk contiguous, decision D1); nullptr = zeros / not wanted
//   o      [T, Hv, dv]
// GVA: v-head h reads k-head h / (Hv / Hk) (HF repeat_interleave); Hv % Hk == 0.
//
// Recurrence per sequence and v-head, state M [dv, dk] reset to h0 at every sequence start:
//   M ← e^{g_t} M;   u = β_t (v_t − M k_t);   M ← M + u k_tᵀ;   o_t = scale · M q_t     (decay before read, o inclusive)
//
// Backward: given dO [T, Hv, dv] and optional dhT [N, Hv, dv, dk] (nullptr = zero), produce dq, dk [T, Hk, dk]
// (summed over the Hv/Hk v-heads sharing a k-head), dv [T, Hv, dv], dbeta, dg [T, Hv] and optional dh0. Every
// gradient is overwritten (not accumulated). Nothing is saved by the forward: both backwards recompute states.
//
// Parallelism: OpenMP over (sequence, v-head); every output element is written by exactly one work item and the GVA
// sum over v-heads runs in a fixed order afterwards, so results do not depend on the thread count. A NaN in one
// sequence cannot reach another sequence's outputs.
#pragma once
#include <cstdint>

namespace hlm {

struct GdnShape {
  int64_t total_tokens = 0;  // T
  int64_t k_heads = 0;       // Hk (q and k heads)
  int64_t v_heads = 0;       // Hv (v, g, beta, state heads), a multiple of Hk
  int64_t key_dim = 0;       // dk
  int64_t value_dim = 0;     // dv
};

// Forward inputs. h0 may be nullptr (zero initial state).
template <typename T>
struct GdnInputs {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* g = nullptr;
  const T* beta = nullptr;
  const T* h0 = nullptr;
  const int64_t* cu_seqlens = nullptr;
  int64_t n_seqs = 0;  // N
};

// Forward outputs. hT may be nullptr (final state not wanted).
template <typename T>
struct GdnOutputs {
  T* o = nullptr;
  T* hT = nullptr;
};

// Gradients arriving from the loss. dhT may be nullptr (zero).
template <typename T>
struct GdnOutputGrads {
  const T* d_o = nullptr;
  const T* d_hT = nullptr;
};

// Gradients produced by the backward. dh0 may be nullptr (not wanted).
template <typename T>
struct GdnInputGrads {
  T* dq = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
  T* dg = nullptr;
  T* dbeta = nullptr;
  T* dh0 = nullptr;
};

inline constexpr int64_t kGdnRecurrentCheckpoint = 64;

// Token recurrence. T is float or double; state and dot products are accumulated in double either way.
// The backward checkpoints the state every `kGdnRecurrentCheckpoint` tokens in a forward sweep and recomputes the
// per-token states of one segment at a time in the reverse sweep: memory O((len/64 + 64)·dv·dk) per work item.
template <typename T>
void gated_delta_rule_recurrent_forward(const GdnOutputs<T>& out, const GdnInputs<T>& in, const GdnShape& shape,
                                        T scale);
template <typename T>
void gated_delta_rule_recurrent_backward(const GdnInputGrads<T>& grads, const GdnOutputGrads<T>& dout,
                                         const GdnInputs<T>& in, const GdnShape& shape, T scale);

// Chunked WY/UT form (gdn.md §2-§3), float storage with double dot-product accumulation. Chunks of `chunk` tokens
// start at each sequence start (never straddle sequences; the last one may be partial). Inside a chunk only
// exponents γ_i − γ_j with i ≥ j (and γ_i − γ_0 where γ_0 = 0 is the chunk start) are evaluated. The backward runs
// a forward pass over chunks (recomputes the entry state of each chunk) and a reverse pass (state gradients).
void gated_delta_rule_chunked_forward(const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& shape,
                                      float scale, int64_t chunk = 64);
void gated_delta_rule_chunked_backward(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                       const GdnInputs<float>& in, const GdnShape& shape, float scale,
                                       int64_t chunk = 64);

}  // namespace hlm
