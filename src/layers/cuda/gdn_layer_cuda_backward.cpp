// Gated DeltaNet layer backward on CUDA, step for step as gdn_layer_ref.cpp's forward_activations + backward_from
// (zero initial state: no conv or recurrent state gradients): the recomputing entry point, and the walk back from
// given activations.
#include <algorithm>

#include "core/error.h"
#include "layers/cuda/gdn_layer_cuda.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunked_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_cuda.h"
#include "ops/gated_rmsnorm/gated_rmsnorm_cuda.h"
#include "ops/gdn_gate/gdn_gate_cuda.h"
#include "ops/l2norm/l2norm_cuda.h"

namespace hlm {

void gdn_layer_backward_cuda(CudaContext& ctx, float* dx, CudaGdnWeights& gr, const float* d_out, const float* x,
                             const CudaGdnWeights& w, const GdnDims& d, const CudaBatchView& b) {
  gdn_layer_backward_cuda(ctx, dx, gr, d_out, CudaLinearInput{x, nullptr}, w, d, b);
}

void gdn_layer_backward_cuda(CudaContext& ctx, float* dx, CudaGdnWeights& gr, const float* d_out,
                             const CudaLinearInput& x, const CudaGdnWeights& w, const GdnDims& d,
                             const CudaBatchView& b, const __nv_bfloat16* d_out16) {
  CudaTensor x16;  // bf16 mode: x rounded once for the recomputed forward and the backward (unless given rounded)
  const CudaLinearInput in = cuda_linear_round_input(ctx, x16, x, w.q_proj, b.tokens);
  const GdnCudaActivations act = gdn_forward_activations_cuda(ctx, in, w, d, b, /*keep_rule_scratch=*/true);
  gdn_layer_backward_from_cuda(ctx, dx, gr, d_out, in, act, w, d, b, d_out16);
}

void gdn_layer_backward_from_cuda(CudaContext& ctx, float* dx, CudaGdnWeights& gr, const float* d_out,
                                  const CudaLinearInput& x, const GdnCudaActivations& act, const CudaGdnWeights& w,
                                  const GdnDims& d, const CudaBatchView& b, const __nv_bfloat16* d_out16) {
  HLM_CHECK(dx != x.f32 && static_cast<const void*>(dx) != static_cast<const void*>(x.bf16) && dx != d_out,
            "GDN backward: dx may not alias x or d_out");
  const int64_t n = b.tokens, Ck = d.key_channels(), Cv = d.value_channels(), Hv = d.value_heads;
  const int64_t K = d.conv_kernel;
  const cudaStream_t stream = ctx.stream();
  HLM_CHECK((cuda_linear_is_bf16(w.o_proj) ? act.y16 : act.y).numel() == n * Cv && act.qn.numel() == n * Ck &&
                act.g.numel() == n * Hv,
            "GDN backward: the activations do not match the batch or the compute mode");
  // Op-level weight gradients are overwritten here, then added into gr (the CPU's dw_small + add_into).
  CudaTensor dw_small = CudaTensor::empty(ctx, {std::max(std::max(Ck, Cv) * K, d.value_dim)});
  float* dws = dw_small.data<float>();

  // Output projection and gated norm.
  CudaTensor dy = CudaTensor::empty(ctx, {n, Cv});
  cuda_linear_backward_dy16(ctx, dy.data<float>(), gr.o_proj, d_out, d_out16, cuda_linear_input(act.y, act.y16),
                            w.o_proj, n, false);
  // dz: in the bf16 mode only its rounding (g_proj's backward products are its one reader; the norm writes the bits
  // of casting the fp32 dz, gated_rmsnorm_backward_bf16_dz_cuda), else fp32.
  const bool bf16_dz = cuda_linear_is_bf16(w.g_proj);
  CudaTensor d_o = CudaTensor::empty(ctx, {n, Cv});
  CudaTensor dz = CudaTensor::empty(ctx, {n, Cv}, bf16_dz ? DType::BF16 : DType::F32);
  {
    const GatedRmsnormCudaParams p{n * Hv, d.value_dim, d.norm_eps};
    const size_t bytes = gated_rmsnorm_backward_cuda_workspace_bytes(p);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    if (bf16_dz)
      gated_rmsnorm_backward_bf16_dz_cuda(d_o.data<float>(), dz.data<__nv_bfloat16>(), dws, dy.data<float>(),
                                          act.o.data<float>(), act.z.data<float>(), w.o_norm.data<float>(), p,
                                          ws.raw(), bytes, stream);
    else
      gated_rmsnorm_backward_cuda(d_o.data<float>(), dz.data<float>(), dws, dy.data<float>(), act.o.data<float>(),
                                  act.z.data<float>(), w.o_norm.data<float>(), p, ws.raw(), bytes, stream);
    cuda_add_into(ctx, gr.o_norm.data<float>(), dws, d.value_dim);
  }

  // Core recurrence (zero initial state: no dh0).
  CudaTensor dqn = CudaTensor::empty(ctx, {n, Ck}), dkn = CudaTensor::empty(ctx, {n, Ck});
  CudaTensor dvc = CudaTensor::empty(ctx, {n, Cv});
  CudaTensor dg = CudaTensor::empty(ctx, {n, Hv}), dbeta = CudaTensor::empty(ctx, {n, Hv});
  {
    const GdnInputs<float> in = gdn_rule_inputs_cuda(act, b);
    GdnInputGrads<float> grads;
    grads.dq = dqn.data<float>();
    grads.dk = dkn.data<float>();
    grads.dv = dvc.data<float>();
    grads.dg = dg.data<float>();
    grads.dbeta = dbeta.data<float>();
    GdnOutputGrads<float> dout;
    dout.d_o = d_o.data<float>();
    const GdnShape shape{n, d.key_heads, d.value_heads, d.key_dim, d.value_dim};
    const float scale = static_cast<float>(d.q_scale());
    if (w.bf16_compute && act.rule_scratch.raw() != nullptr) {
      // The forward kept prep's and the state pass's results (recomputed right before, or kept activations): only
      // the backward's own scratch is needed.
      const size_t bytes = gated_delta_rule_chunked_backward_scratch_bytes(shape, b.n_seqs);
      CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
      gated_delta_rule_chunked_backward_kept_cuda(grads, dout, in, shape, scale, act.rule_scratch.raw(),
                                                  act.rule_scratch.nbytes(), ws.raw(), bytes, stream);
    } else {
      const size_t bytes = w.bf16_compute ? gated_delta_rule_chunked_backward_cuda_workspace_bytes(shape, b.n_seqs)
                                          : gated_delta_rule_backward_cuda_workspace_bytes(shape, b.n_seqs);
      CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
      if (w.bf16_compute)
        gated_delta_rule_chunked_backward_cuda(grads, dout, in, shape, scale, ws.raw(), bytes, stream);
      else
        gated_delta_rule_backward_cuda(grads, dout, in, shape, scale, ws.raw(), bytes, stream);
    }
  }

  // Gate.
  CudaTensor da = CudaTensor::empty(ctx, {n, Hv}), db = CudaTensor::empty(ctx, {n, Hv});
  CudaTensor dA = CudaTensor::empty(ctx, {Hv}), ddt = CudaTensor::empty(ctx, {Hv});
  {
    const GdnGateCudaParams p{n, Hv, d.neg_eigval};
    const size_t bytes = gdn_gate_backward_cuda_workspace_bytes(p);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    gdn_gate_backward_cuda(da.data<float>(), db.data<float>(), dA.data<float>(), ddt.data<float>(), dg.data<float>(),
                           dbeta.data<float>(), act.a.data<float>(), act.b.data<float>(), w.A_log.data<float>(),
                           w.dt_bias.data<float>(), p, ws.raw(), bytes, stream);
    cuda_add_into(ctx, gr.A_log.data<float>(), dA.data<float>(), Hv);
    cuda_add_into(ctx, gr.dt_bias.data<float>(), ddt.data<float>(), Hv);
  }

  // The q/k l2norms and the convs back to the projections: for q and k the l2norm's backward and the conv's in one
  // launch where the heads are 128 wide (causal_conv1d_l2norm_backward_cuda: the bits of the two; dqn, dkn clobbered).
  const L2normCudaParams l2{n * d.key_heads, d.key_dim};
  // The convs' dx: in the bf16 mode only their roundings (the q/k/v projections' backward products are their one
  // reader; the conv writes the bits of casting its fp32 dx, causal_conv1d_backward_bf16_dx_cuda), else fp32.
  const bool bf16_dp = cuda_linear_is_bf16(w.q_proj) && cuda_linear_is_bf16(w.k_proj) && cuda_linear_is_bf16(w.v_proj);
  const DType dp_type = bf16_dp ? DType::BF16 : DType::F32;
  CudaTensor dqp = CudaTensor::empty(ctx, {n, Ck}, dp_type), dkp = CudaTensor::empty(ctx, {n, Ck}, dp_type);
  CudaTensor dvp = CudaTensor::empty(ctx, {n, Cv}, dp_type);
  const struct {
    CudaTensor& dx;
    CudaTensor& dy;       // for q and k: the l2norm's output gradient (clobbered)
    const CudaTensor* y;  // q, k: the conv's output, the l2norm's input; v: none (no l2norm)
    const CudaTensor& x;
    const CudaTensor& w;
    CudaTensor& gw;
    int64_t channels;
  } convs[] = {{dqp, dqn, &act.qc, act.qp, w.q_conv, gr.q_conv, Ck},
               {dkp, dkn, &act.kc, act.kp, w.k_conv, gr.k_conv, Ck},
               {dvp, dvc, nullptr, act.vp, w.v_conv, gr.v_conv, Cv}};
  for (const auto& c : convs) {
    const CausalConv1dCudaParams p{n, c.channels, K, b.n_seqs, true};
    const size_t bytes = causal_conv1d_backward_cuda_workspace_bytes(p);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    float* dy = c.dy.data<float>();
    const float *x_in = c.x.data<float>(), *cw = c.w.data<float>();
    if (c.y != nullptr && bf16_dp)
      causal_conv1d_l2norm_backward_bf16_dx_cuda(c.dx.data<__nv_bfloat16>(), dws, dy, c.y->data<float>(), x_in, cw,
                                                 b.cu_seqlens, p, d.key_dim, l2.eps, ws.raw(), bytes, stream);
    else if (c.y != nullptr)
      causal_conv1d_l2norm_backward_cuda(c.dx.data<float>(), dws, dy, c.y->data<float>(), x_in, cw, b.cu_seqlens, p,
                                         d.key_dim, l2.eps, ws.raw(), bytes, stream);
    else if (bf16_dp)
      causal_conv1d_backward_bf16_dx_cuda(c.dx.data<__nv_bfloat16>(), dws, nullptr, dy, x_in, cw, nullptr,
                                          b.cu_seqlens, p, ws.raw(), bytes, stream);
    else
      causal_conv1d_backward_cuda(c.dx.data<float>(), dws, nullptr, dy, x_in, cw, nullptr, b.cu_seqlens, p, ws.raw(),
                                  bytes, stream);
    cuda_add_into(ctx, c.gw.data<float>(), dws, c.channels * K);
  }

  // Input projections: dx = Σ dp · Wp (the first overwrites), dWp += dpᵀ · x, in the CPU's order; in the bf16 mode
  // all six read one rounding of x.
  CudaTensor x16;
  const CudaLinearInput xin = cuda_linear_round_input(ctx, x16, x, w.q_proj, n);
  // A bf16 dy (the convs' dx, dz) goes to cuda_linear_backward_bf16_dy: the products of cuda_linear_backward on the
  // fp32 values, bit for bit.
  const struct {
    const CudaTensor& dp;
    const CudaLinear& wp;
    CudaLinear& gp;
  } projs[] = {{dqp, w.q_proj, gr.q_proj}, {dkp, w.k_proj, gr.k_proj}, {dvp, w.v_proj, gr.v_proj},
               {dz, w.g_proj, gr.g_proj},  {da, w.a_proj, gr.a_proj},  {db, w.b_proj, gr.b_proj}};
  bool first = true;
  for (const auto& p : projs) {
    if (p.dp.dtype() == DType::BF16)
      cuda_linear_backward_bf16_dy(ctx, dx, p.gp, p.dp.data<__nv_bfloat16>(), xin, p.wp, n, /*accumulate_dx=*/!first);
    else
      cuda_linear_backward(ctx, dx, p.gp, p.dp.data<float>(), xin, p.wp, n, /*accumulate_dx=*/!first);
    first = false;
  }
}

}  // namespace hlm
