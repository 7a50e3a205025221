// Mamba-2 mixer forward on CUDA, step for step as layers/mamba2_layer.cpp (contract in mamba2_layer_cuda.h).
#include "layers/cuda/mamba2_layer_cuda.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/mamba2_ssd/mamba2_ssd_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

CudaMamba2Weights cuda_upload_mamba2(CudaContext& ctx, const Mamba2Weights& w, const Mamba2Dims& d) {
  const int64_t Im = d.inner(), Cd = d.conv_channels(), nh = d.heads;
  HLM_CHECK_INPUT(w.in_proj.weight.defined() && w.in_proj.out_features() == Im + Cd + nh,
                  "mamba.in_proj.weight must have ", Im + Cd + nh, " rows");
  HLM_CHECK_INPUT(!w.in_proj.bias.defined() && !w.out_proj.bias.defined(),
                  "the CUDA Mamba-2 layer has no projection biases (mamba_proj_bias)");
  HLM_CHECK_INPUT(w.out_proj.weight.defined() && w.out_proj.in_features() == Im, "mamba.out_proj.weight must have ",
                  Im, " columns");
  HLM_CHECK_INPUT(w.conv.defined() && w.conv.numel() == Cd * d.conv_kernel, "mamba.conv1d.weight must have ",
                  Cd * d.conv_kernel, " entries");
  HLM_CHECK_INPUT(d.conv_kernel <= causal_conv1d_cuda_max_kernel(), "Mamba-2 conv kernel ", d.conv_kernel,
                  " exceeds the CUDA limit of ", causal_conv1d_cuda_max_kernel());
  HLM_CHECK_INPUT(d.head_dim <= mamba2_ssd_cuda_max_dim() && d.state_dim <= mamba2_ssd_cuda_max_dim(),
                  "Mamba-2 head dim ", d.head_dim, " / state dim ", d.state_dim, " exceed the CUDA limit of ",
                  mamba2_ssd_cuda_max_dim());
  HLM_CHECK_INPUT(d.chunk >= 1 && d.chunk <= mamba2_ssd_cuda_max_chunk(), "mamba_chunk_size ", d.chunk,
                  " outside the CUDA range [1, ", mamba2_ssd_cuda_max_chunk(), "]");
  CudaMamba2Weights c;
  c.in_z = cuda_upload_linear(ctx, linear_row_block(w.in_proj, 0, Im), "mamba.in_proj (z rows)");
  c.in_xbc = cuda_upload_linear(ctx, linear_row_block(w.in_proj, Im, Cd), "mamba.in_proj (xBC rows)");
  c.in_dt = cuda_upload_linear(ctx, linear_row_block(w.in_proj, Im + Cd, nh), "mamba.in_proj (dt rows)");
  c.conv = cuda_upload_f32(ctx, w.conv, "mamba.conv1d.weight");
  if (w.conv_bias.defined()) c.conv_bias = cuda_upload_f32_sized(ctx, w.conv_bias, Cd, "mamba.conv1d.bias");
  c.dt_bias = cuda_upload_f32_sized(ctx, w.dt_bias, nh, "mamba.dt_bias");
  c.A_log = cuda_upload_f32_sized(ctx, w.A_log, nh, "mamba.A_log");
  c.D = cuda_upload_f32_sized(ctx, w.D, nh, "mamba.D");
  c.norm = cuda_upload_f32_sized(ctx, w.norm, Im, "mamba.norm.weight");
  c.out_proj = cuda_upload_linear(ctx, w.out_proj, "mamba.out_proj");
  return c;
}

void mamba2_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaMamba2Weights& w,
                               const Mamba2Dims& d, const CudaBatchView& b, const CudaMamba2State& state) {
  HLM_CHECK(out != x, "Mamba-2 forward: out may not alias x");
  const int64_t T = b.tokens, N = b.n_seqs, Im = d.inner(), Cd = d.conv_channels(), nh = d.heads;
  const cudaStream_t stream = ctx.stream();
  if (T == 0) return;
  CudaTensor z = CudaTensor::empty(ctx, {T, Im}), xbc_raw = CudaTensor::empty(ctx, {T, Cd});
  CudaTensor dt = CudaTensor::empty(ctx, {T, nh});
  const CudaLinearOut projections[] = {
      {z.data<float>(), &w.in_z}, {xbc_raw.data<float>(), &w.in_xbc}, {dt.data<float>(), &w.in_dt}};
  cuda_linear_forward_group(ctx, projections, CudaLinearInput{x, nullptr}, T);

  // One token per sequence (a decode step): the one-token conv and the recurrence, as the CPU layer chooses.
  const bool decode = T == N;
  CudaTensor xbc = CudaTensor::empty(ctx, {T, Cd});
  const CausalConv1dCudaParams cp{T, Cd, d.conv_kernel, N, /*silu=*/false};
  if (decode && state.conv != nullptr)
    causal_conv1d_decode_cuda(xbc.data<float>(), state.conv, xbc_raw.data<float>(), w.conv.data<float>(), cp, stream);
  else
    causal_conv1d_forward_cuda(xbc.data<float>(), state.conv, xbc_raw.data<float>(), w.conv.data<float>(), state.conv,
                               b.cu_seqlens, cp, stream);
  mamba2_conv_bias_silu_cuda(xbc.data<float>(), w.conv_bias.raw() != nullptr ? w.conv_bias.data<float>() : nullptr, T, Cd,
                             stream);

  Mamba2CudaParams p;
  p.total_tokens = T;
  p.heads = nh;
  p.head_dim = d.head_dim;
  p.groups = d.groups;
  p.state_dim = d.state_dim;
  p.n_seqs = N;
  p.chunk = d.chunk;
  p.x_stride = p.bc_stride = Cd;
  p.dt_clamp = d.limits.apply;
  p.dt_lo = static_cast<float>(d.limits.lo);
  p.dt_hi = static_cast<float>(d.limits.hi);  // +inf stays +inf
  const float* xs = xbc.data<float>();
  const int64_t GN = d.groups * d.state_dim;
  const Mamba2CudaInputs in{xs,           dt.data<float>(), w.dt_bias.data<float>(), w.A_log.data<float>(),
                            xs + Im,      xs + Im + GN,     w.D.data<float>(),       state.ssm,
                            b.cu_seqlens};
  CudaTensor y = CudaTensor::empty(ctx, {T, Im});
  if (decode) {
    CudaTensor scratch;  // no carried state: the recurrence still needs somewhere to keep it
    float* s = state.ssm;
    if (s == nullptr) {
      scratch = CudaTensor::empty(ctx, {N, nh * d.head_dim * d.state_dim});
      s = scratch.data<float>();
    }
    mamba2_ssd_recurrent_forward_cuda(y.data<float>(), s, in, p, stream);
  } else {
    const size_t bytes = mamba2_ssd_chunked_cuda_workspace_bytes(p);
    CudaTensor ws = cuda_scratch_bytes(ctx, std::max<size_t>(bytes, 16));
    mamba2_ssd_chunked_forward_cuda(y.data<float>(), state.ssm, in, p, ws.raw(), bytes, stream);
  }
  // Gate first, then RMSNorm over all Im channels (eps = rms_norm_eps), then out_proj.
  mamba2_gate_silu_cuda(y.data<float>(), z.data<float>(), T * Im, stream);
  rmsnorm_forward_cuda(y.data<float>(), y.data<float>(), w.norm.data<float>(), {T, Im, d.norm_eps}, stream);
  cuda_linear_forward(ctx, out, y.data<float>(), w.out_proj, T);
}

}  // namespace hlm
