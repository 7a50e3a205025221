// Lightning Attention-2 = FLA's "simple GLA": linear attention with a per-head constant log-decay g_h and no
// normaliser, the token mixer of the inclusionAI "bailing" hybrid-linear models (Ring-mini-linear-2.0, Ring/Ling-2.5;
// ../shared/docs/families.md §6 "Lightning Attention-2 layer"). CPU reference: forward in the recurrent form and in
// the chunked form (the two agree to rounding), the backward by the reverse recurrence, and the Ring decay helper.
// The projections, per-head q/k RMSNorm, partial RoPE, group RMSNorm and sigmoid gate around it are other ops
// (layers/lightning_layer.h composes them). CUDA forward (chunked and recurrent, fp32): simple_gla_cuda.h.
//
// Symbols: T tokens of all sequences (packed), H heads, dk key dim, dv value dim, N sequences.
// Layout (contiguous, token-major):
//   q, k       [T, H, dk]
//   v          [T, H, dv]
//   g          [H]            log-decay per head, constant over tokens (λ_h = exp(g_h); g > 0 is allowed, though
//                             the Ring decay is negative on every layer)
//   cu_seqlens int64 [N+1]; cu[0] = 0, non-decreasing, cu[N] = T; the recurrence restarts at every boundary
//   state_in   [N, H, dk, dv] initial state per sequence (FLA's initial_state layout); nullptr = zeros
//   o          [T, H, dv]     (overwritten)
//   state_out  [N, H, dk, dv] optional; the state after each sequence's last token; may alias state_in
//
// Math (per sequence, head h, token t, inclusive of t; S ∈ R^{dk×dv}):
//   S_t = λ·S_{t−1} + k_tᵀ v_t,   o_t = scale · q_t S_t
//   equivalently o_t = scale · (λ^{t−t0+1}·q_t S_init + Σ_{t0≤s≤t} λ^{t−s} (q_t·k_s) v_s)  (t0 = the sequence start)
//   scale = key_dim^−0.5 unless given (FLA's default).
// Chunked form (chunk C; FLA uses 64): for chunk tokens i = 0..n−1 after the state S_prev,
//   o_i = scale · (λ^{i+1}·q_i S_prev + Σ_{j≤i} D_ij (q_i·k_j) v_j),  D_ij = λ^{i−j} (the decay matrix)
//   S_end = λ^n·S_prev + Σ_j λ^{n−1−j} k_jᵀ v_j
// Accumulation: every sum and the state in double, for both instantiations (float, double); the state is stored
// back as T (fp32 for float, as FLA keeps it).
//
// Backward (reverse recurrence; nothing stored beyond one dk×dv matrix per work item): given do [T, H, dv] and
// d_state_out (optional, [N, H, dk, dv]), with G = dL/dS_t starting at d_state_out (or 0):
//   forward sweep:  dq_t = scale · S_t do_tᵀ
//   reverse sweep:  G += scale · q_tᵀ do_t;  dk_t = G v_t;  dv_t = k_tᵀ G;  G ← λ·G;   d_state_in = G at the start.
// Writes (overwriting) dq, dk, dv and d_state_in; any may be nullptr. No dg: g is a fixed buffer in these models.
// Parallelism: OpenMP over (sequence, head); each item owns its rows: results independent of the thread count.
// Errors: bad sizes, pointers, cu_seqlens or chunk are input errors (hlm::Error, kind Input) naming the argument.
#pragma once
#include <cstdint>
#include <vector>

namespace hlm {

struct SimpleGlaShape {
  int64_t total_tokens = 0;  // T
  int64_t heads = 0;         // H
  int64_t key_dim = 0;       // dk
  int64_t value_dim = 0;     // dv
};

template <typename T>
struct SimpleGlaInputs {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* g = nullptr;         // [H]
  const T* state_in = nullptr;  // may be nullptr
  const int64_t* cu_seqlens = nullptr;
  int64_t n_seqs = 0;
  double scale = 0.0;  // 0 = key_dim^−0.5
};

template <typename T>
struct SimpleGlaOutputs {
  T* o = nullptr;
  T* state_out = nullptr;  // may be nullptr
};

template <typename T>
struct SimpleGlaGrads {
  T* dq = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
  T* d_state_in = nullptr;
};

inline constexpr int64_t kSimpleGlaChunk = 64;

template <typename T>
void simple_gla_recurrent_forward(const SimpleGlaOutputs<T>& out, const SimpleGlaInputs<T>& in,
                                  const SimpleGlaShape& s);

// chunk ≥ 1; the result does not depend on it beyond rounding.
template <typename T>
void simple_gla_chunked_forward(const SimpleGlaOutputs<T>& out, const SimpleGlaInputs<T>& in, const SimpleGlaShape& s,
                                int64_t chunk = kSimpleGlaChunk);

template <typename T>
void simple_gla_backward(const SimpleGlaGrads<T>& grads, const T* d_out, const T* d_state_out,
                         const SimpleGlaInputs<T>& in, const SimpleGlaShape& s);

// ALiBi slopes of `heads` heads, as the standard ALiBi get_slopes: a power of two n gives 2^(−8(i+1)/n); otherwise
// the slopes of the closest lower power of two p, then every other slope (indices 0, 2, 4, ...) of the 2p set, the
// first n − p of them. heads ≥ 1.
std::vector<double> alibi_slopes(int64_t heads);

// Ring/Ling Lightning-attention decay of global layer `layer` (0-based) of `num_layers` (≥ 2):
// g_h = −s_h · (1 − (layer − 1)/(num_layers − 1) + 1e−5), s = alibi_slopes(heads) (families.md §6; layer 0's factor
// is 1 + 1/(L − 1) + 1e−5 > 1, the strongest decay; g < 0, λ < 1 on every layer). The model's layer
// (layers/lightning_layer.h, lightning_decay) rounds it as HF's fp32 buffer instead.
std::vector<double> ring_linear_decay(int64_t layer, int64_t num_layers, int64_t heads);

}  // namespace hlm
