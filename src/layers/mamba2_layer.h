// Mamba-2 token mixer of Granite-4.0-H (HF GraniteMoeHybridMambaLayer; ../shared/docs/families.md §5): CPU forward
// over packed sequences, optionally continuing from and returning a per-sequence state (conv + SSM).
//   [z | xBC | dt] = x · in_projᵀ                     z [T, Im], xBC [T, Cd], dt [T, nh]   (Cd = Im + 2·G·N)
//   xBC = silu(causal depthwise conv(xBC) + conv_bias) (ops/causal_conv1d, K taps, resets per sequence)
//   [xs | B | C] = xBC                                xs [T, nh, P], B and C [T, G, N]
//   y = SSD scan(xs, dt, A_log, dt_bias, B, C, D)     (ops/mamba2_ssd: chunked form, or the recurrent form when every
//                                                      sequence has one token (a decode step); dt limits in both)
//   out = out_proj( w ⊙ rmsnorm(y ⊙ silu(z)) )        gate BEFORE the norm, RMS over all Im channels, eps = rms_norm_eps
// Non-goals: in_proj / out_proj biases (mamba_proj_bias, refused by the config), a backward (training refuses
// Mamba-2 models), padding masks (packed sequences instead).
#pragma once
#include <cstdint>

#include "core/arena.h"
#include "layers/linear.h"
#include "layers/token_batch.h"
#include "ops/mamba2_ssd/mamba2_ssd.h"

namespace hlm {

struct Mamba2Dims {
  int64_t heads = 0;        // nh
  int64_t head_dim = 0;     // P
  int64_t groups = 1;       // G
  int64_t state_dim = 0;    // N
  int64_t conv_kernel = 4;  // K
  int64_t chunk = 256;      // SSD chunk size (mamba_chunk_size)
  float norm_eps = 1e-6f;
  Mamba2DtLimits limits;
  int64_t inner() const { return heads * head_dim; }                          // Im
  int64_t conv_channels() const { return inner() + 2 * groups * state_dim; }  // Cd
  int64_t ssm_state_elements() const { return heads * head_dim * state_dim; } // per sequence
  int64_t conv_state_elements() const { return conv_channels() * (conv_kernel - 1); }
};

struct Mamba2Weights {
  Linear in_proj;   // mamba.in_proj: weight [Im + Cd + nh, hidden]
  Tensor conv;      // mamba.conv1d.weight [Cd, 1, K] loaded as [Cd, K]
  Tensor conv_bias; // mamba.conv1d.bias [Cd], or undefined (mamba_conv_bias false)
  Tensor dt_bias;   // [nh]
  Tensor A_log;     // [nh]
  Tensor D;         // [nh]
  Tensor norm;      // mamba.norm.weight [Im]
  Linear out_proj;  // weight [hidden, Im]
};

// Per-sequence recurrent state (all optional; nullptr = a fresh sequence / not wanted). The *_out buffers may alias
// the *_in ones. conv: [N_seq, Cd, K−1] raw xBC inputs (ops/causal_conv1d's layout); ssm: [N_seq, nh, P, N].
struct Mamba2State {
  const float* conv_in = nullptr;
  const float* ssm_in = nullptr;
  float* conv_out = nullptr;
  float* ssm_out = nullptr;
};

// out [T, hidden] (overwritten), x [T, hidden] (the block's normed input). Scratch from `arena` (released on return).
void mamba2_layer_forward(float* out, const float* x, const Mamba2Weights& w, const Mamba2Dims& d,
                          const TokenBatch& batch, const Mamba2State& state, Arena& arena);

}  // namespace hlm
