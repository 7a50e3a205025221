// Mamba-2 mixer forward (contract in mamba2_layer.h): in_proj, split, causal conv + bias + SiLU, SSD scan, gated
// RMSNorm (gate first), out_proj. Scratch lives in the arena between a mark and its release.
#include "layers/mamba2_layer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/matmul/matmul.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace hlm {

namespace {

// Columns [begin, begin + width) of a [T, stride] matrix into a contiguous [T, width] one.
void copy_columns(float* dst, const float* src, int64_t T, int64_t stride, int64_t begin, int64_t width) {
#pragma omp parallel for
  for (int64_t t = 0; t < T; ++t) std::copy_n(src + t * stride + begin, width, dst + t * width);
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

void mamba2_layer_forward(float* out, const float* x, const Mamba2Weights& w, const Mamba2Dims& d,
                          const TokenBatch& batch, const Mamba2State& state, Arena& arena) {
  const int64_t T = batch.total_tokens(), H = w.in_proj.in_features();
  const int64_t Im = d.inner(), Cd = d.conv_channels(), nh = d.heads, GN = d.groups * d.state_dim;
  const int64_t W = Im + Cd + nh;
  HLM_CHECK(w.in_proj.out_features() == W, "mamba2 layer: in_proj has ", w.in_proj.out_features(), " rows, expected ",
            W);
  HLM_CHECK(w.out_proj.out_features() == H && w.out_proj.in_features() == Im, "mamba2 layer: out_proj shape");
  const Arena::Mark mark = arena.mark();
  float* proj = arena.tensor({T, W}).f32();
  linear_forward(proj, x, w.in_proj, T);
  float* z = arena.tensor({T, Im}).f32();
  float* xbc_raw = arena.tensor({T, Cd}).f32();
  float* dt = arena.tensor({T, nh}).f32();
  copy_columns(z, proj, T, W, 0, Im);
  copy_columns(xbc_raw, proj, T, W, Im, Cd);
  copy_columns(dt, proj, T, W, Im + Cd, nh);

  // Causal depthwise conv over xBC (state per sequence), then bias and SiLU.
  float* xbc = arena.tensor({T, Cd}).f32();
  causal_conv1d_forward<float>(xbc, state.conv_out, xbc_raw, w.conv.f32(), state.conv_in, batch.cu_seqlens.data(),
                               batch.num_sequences(), {T, Cd, d.conv_kernel}, /*silu=*/false);
  const float* bias = w.conv_bias.defined() ? w.conv_bias.f32() : nullptr;
#pragma omp parallel for
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < Cd; ++c) {
      float& v = xbc[t * Cd + c];
      v = silu(bias ? v + bias[c] : v);
    }
  float* xs = arena.tensor({T, Im}).f32();
  float* B = arena.tensor({T, GN}).f32();
  float* C = arena.tensor({T, GN}).f32();
  copy_columns(xs, xbc, T, Cd, 0, Im);
  copy_columns(B, xbc, T, Cd, Im, GN);
  copy_columns(C, xbc, T, Cd, Im + GN, GN);

  float* y = arena.tensor({T, Im}).f32();
  const Mamba2Shape shape{T, nh, d.head_dim, d.groups, d.state_dim};
  const Mamba2Inputs<float> scan{xs, dt, w.dt_bias.f32(), w.A_log.f32(), B, C, w.D.f32(), state.ssm_in,
                                 batch.cu_seqlens.data(), batch.num_sequences()};
  // One token per sequence (a decode step): the recurrent form, one state update per (sequence, head). Otherwise the
  // chunked SSD form. Both take the carried state in and give the final state out, apply the same dt limits and sum
  // in double, so the result does not depend on how a prompt was cut into steps beyond fp32 rounding.
  if (T == batch.num_sequences())
    mamba2_ssd_recurrent_forward<float>({y, state.ssm_out}, scan, shape, d.limits);
  else
    mamba2_ssd_chunked_forward<float>({y, state.ssm_out}, scan, shape, d.limits, d.chunk);

  // Gated RMSNorm, gate first: u = y ⊙ silu(z), then RMSNorm over the Im channels with weight `norm`.
#pragma omp parallel for
  for (int64_t i = 0; i < T * Im; ++i) y[i] *= silu(z[i]);
  float* normed = arena.tensor({T, Im}).f32();
  rmsnorm_forward(normed, y, w.norm.f32(), T, Im, d.norm_eps);
  linear_forward(out, normed, w.out_proj, T);
  arena.release(mark);
}

}  // namespace hlm
