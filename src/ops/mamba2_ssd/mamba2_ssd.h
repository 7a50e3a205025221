// Mamba-2 selective state-space scan (SSD), the token mixer core of a Granite-4.0-H Mamba layer
// (../shared/docs/families.md §5 "Mamba-2 mixer", steps 3-4, and "Chunked (SSD) form"): CPU reference, forward in
// the recurrent form and in the chunked SSD form (the two agree to rounding), and the backward of the recurrent form.
// The causal conv (+ bias, SiLU) before it and the gated RMSNorm / out_proj after it are separate ops
// (ops/causal_conv1d, ops/rmsnorm); layers/mamba2_layer.h composes them.
//
// Symbols: T tokens of all sequences (packed), nh heads, P head dim, G groups (nh % G == 0), N state dim.
// Layout (contiguous, token-major):
//   x          [T, nh, P]     the conv output's x part (after SiLU)
//   dt_raw     [T, nh]        the in_proj's dt part (before bias and softplus)
//   dt_bias    [nh]
//   A_log      [nh]           A_h = −exp(A_log_h)
//   B, C       [T, G, N]      head h reads group g(h) = h / (nh / G)  (HF repeat_interleave)
//   D          [nh]
//   cu_seqlens int64 [N_seq+1]; the scan restarts at every sequence boundary
//   state_in   [N_seq, nh, P, N]  initial state per sequence (HF ssm_state layout); nullptr = zeros
//   y          [T, nh, P]     (overwritten)
//   state_out  [N_seq, nh, P, N]  optional; the state after each sequence's last token; may alias state_in
//
// Math (per sequence, head h, token t; S ∈ R^{P×N}):
//   dt_t = softplus(dt_raw_t + dt_bias)  (softplus(v) = v for v > 20, torch's threshold), then clamped to
//          [limit_lo, limit_hi] when limits.apply (HF: chunk path only; the one-token update does not clamp)
//   S_t  = exp(dt_t·A)·S_{t−1} + dt_t · x_t ⊗ B_t,g
//   y_t  = S_t · C_t,g + D · x_t
// Chunked form (chunk Q): with c_t = Σ_{s≤t in chunk} dt_s·A,
//   y_t = Σ_{s≤t in chunk} (C_t·B_s)·exp(c_t − c_s)·dt_s·x_s + exp(c_t)·S_prev·C_t + D·x_t
//   S_chunk_end = exp(c_last)·S_prev + Σ_s exp(c_last − c_s)·dt_s·x_s ⊗ B_s
// Accumulation in double for both instantiations (float, double).
//
// Backward (recurrent form; forward recomputed with every state kept, O(T·nh·P·N) scratch): given dy [T, nh, P] and
// d_state_out (optional, [N_seq, nh, P, N]), writes (overwriting) dx, d_dt_raw [T, nh], d_dt_bias, d_A_log, dD [nh],
// dB, dC [T, G, N] and d_state_in (when state_in is given). Any output pointer may be nullptr. A clamped dt passes
// no gradient. Parallelism: OpenMP over (sequence, head); group sums (dB, dC) reduced over heads in a fixed order:
// results independent of the thread count.
// Non-goals: learnable initial states, variable-length padding masks (packed sequences instead), dt limits in decode.
#pragma once
#include <cstdint>
#include <limits>

namespace hlm {

struct Mamba2Shape {
  int64_t total_tokens = 0;  // T
  int64_t heads = 0;         // nh
  int64_t head_dim = 0;      // P
  int64_t groups = 1;        // G
  int64_t state_dim = 0;     // N
};

// time_step_limit of the config: dt is clamped to [lo, hi] when `apply`.
struct Mamba2DtLimits {
  double lo = 0.0;
  double hi = std::numeric_limits<double>::infinity();
  bool apply = true;
};

template <typename T>
struct Mamba2Inputs {
  const T* x = nullptr;
  const T* dt_raw = nullptr;
  const T* dt_bias = nullptr;
  const T* A_log = nullptr;
  const T* B = nullptr;
  const T* C = nullptr;
  const T* D = nullptr;
  const T* state_in = nullptr;  // may be nullptr
  const int64_t* cu_seqlens = nullptr;
  int64_t n_seqs = 0;
};

template <typename T>
struct Mamba2Outputs {
  T* y = nullptr;
  T* state_out = nullptr;  // may be nullptr
};

template <typename T>
struct Mamba2Grads {
  T* dx = nullptr;
  T* d_dt_raw = nullptr;
  T* d_dt_bias = nullptr;
  T* d_A_log = nullptr;
  T* dB = nullptr;
  T* dC = nullptr;
  T* dD = nullptr;
  T* d_state_in = nullptr;
};

// dt of one (token, head): softplus(raw + bias) with torch's threshold 20, clamped when limits.apply.
double mamba2_dt(double raw, double bias, const Mamba2DtLimits& limits);

template <typename T>
void mamba2_ssd_recurrent_forward(const Mamba2Outputs<T>& out, const Mamba2Inputs<T>& in, const Mamba2Shape& s,
                                  const Mamba2DtLimits& limits);

// chunk ≥ 1 (HF mamba_chunk_size); the result does not depend on it beyond rounding.
template <typename T>
void mamba2_ssd_chunked_forward(const Mamba2Outputs<T>& out, const Mamba2Inputs<T>& in, const Mamba2Shape& s,
                                const Mamba2DtLimits& limits, int64_t chunk);

template <typename T>
void mamba2_ssd_backward(const Mamba2Grads<T>& grads, const T* dy, const T* d_state_out, const Mamba2Inputs<T>& in,
                         const Mamba2Shape& s, const Mamba2DtLimits& limits);

}  // namespace hlm
