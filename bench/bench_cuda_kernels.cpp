// CUDA kernel timings at the shapes of the [perf] issue, for comparison with the peer figures that
// ../shared/bench/peer_probe.py prints in the same run (FLA chunk_gated_delta_rule, PyTorch SDPA):
//   gdn  : gated delta rule forward and forward+backward, H = 32 heads (Hk = Hv), dk = dv = 128, fp32 storage, at
//          B8×T1024, B2×T4096, B1×T16384 (B packed sequences of T tokens): the fp32 token recurrence
//          (gated_delta_rule_cuda.h) and the chunked tensor-core form (gated_delta_rule_chunked_cuda.h, bf16 operands),
//          whose fwd+bwd is timed twice: the backward rerunning prep and state (what FLA's does: it keeps only the
//          inverse), and with the forward's scratch kept for the backward ("keep": the recomputing layer's path);
//          every time here is the median of calls synchronized one by one (bench_timing.h, median_ms), and a
//          "gdn_peer_timing" line times the chunked fwd and fwd+bwd as peer_probe.py times FLA (back_to_back_ms: 10
//          calls back to back, the mean; the host's launch work then overlaps the previous call, as the peer's);
//   attn : causal GQA attention forward and forward+backward, 32 q / 8 kv heads, D = 128, B8×T1024, bf16 and fp32;
//   decode: one gated delta rule decode step (gated_delta_rule_decode_cuda.h), B = 64 sequences, H = 32 heads
//          (Hk = Hv), dk = dv = 128, fp32 state updated in place (128 MiB read + 128 MiB written per step). Prints
//          ms per step for a single launch (median of 20) and for 20 back-to-back launches (median of 10 batches,
//          divided by 20), with the achieved bandwidth counting the state read + write plus q, k, v, o, g, β, and its
//          share of the H200's 4.27 TB/s. Peer: FLA's fused recurrent decode, 0.155-0.166 ms at this shape.
//   lmhead: the chunked LM head + forward KL with the student gradient (lm_head_loss_cuda.h) at the distillation
//          steps' shapes: N = 8192 tokens, H = 1024 (the 0.86B step) and 2560 (the 4B step), V = 151,936, teacher and
//          student heads, bf16 compute mode; one line per chunking (row block × vocabulary chunk) with ms and the
//          TFLOP/s of its logits-sized products: six (two passes × two heads + dh + dW, 6·2·N·V·H flops), four when
//          one chunk covers the vocabulary (pass 2 reuses pass 1's tiles).
//   attn_engines: bf16 causal attention forward and forward+backward (32 q / 8 kv heads, D 128) at B8×T1024, B2×T4096
//          and B1×T16384 by the native tensor-core kernels and by the cuDNN engine (attention_cudnn.h; skipped with
//          its reason when cuDNN cannot be loaded or refuses), cuDNN once with each plan choice (HLM_CUDNN_PLAN first,
//          then timed; plans rebuilt for each): ms, TFLOP/s, the ratios, the cuDNN plans' build time (first call), per
//          direction and choice the plan that runs (candidate, count, engine, each candidate's trial ms when timed),
//          and the largest |difference| of out, lse, dq, dk, dv between the native engine and the timed plans; then
//          an "attn_peer_timing" line: the timed plans' fwd and fwd+bwd timed as peer_probe.py times torch's SDPA
//          (back_to_back_ms), the figures to set beside the peer's.
//   adamw8: the lean plan's optimizer step (adamw_lowmem_cuda.h: 8-bit moments, bf16 master with stochastic rounding,
//          bf16 gradient) over one tensor of 2^29 elements; ms, the bandwidth counting 10 bytes per element (gradient
//          2, parameter 2 + 2, the two codes 1 + 1 each; the block scales aside) and the time scaled to the 4B
//          student's 5.12B parameters.
//   conv : the GDN short conv (causal_conv1d_cuda.h) at the 4B student's training shape: T = 4096 tokens (4 packed
//          sequences of 1024), C = 4096 channels (32 heads of 128: the q, k and v convs each have this width), K = 4,
//          SiLU, no state, f32; forward and backward (dx and dw, with the finishing kernel). Prints µs, the bytes a
//          perfect kernel moves (forward x + y + w, backward dy + x + dx + w + dw), the achieved GB/s over them and the
//          share of 4.27 TB/s, then the same with every row pointer one float off 16-byte alignment (the 1-channel
//          path; its y, dx and dw are compared bit for bit with the 4-channel path's), and the conv time of one 4B
//          distillation step at the trace's call counts (324 forward, 162 backward calls). L2 (50 MiB) is flushed
//          by a 256 MiB memset before each timed run; median of 20 runs after 3 warm-ups. Then the backward's interior
//          walk against its general walk (fp32 and bf16 dx) and the conv + per-head l2norm (heads of 128, the GDN q and
//          k) fused in one launch against the two launches, each pair compared bit for bit.
//   gemv : the batch-1 decode GEMV (gemv_cuda.h, one row of x, bf16 weights) at the projection groups of Table 8's
//          7B shapes and of Qwen3-4B (q/k/v, o_proj, gate/up, down, a GDN layer's six projections, the untied head),
//          each launch on a different copy of the weights (≥ 512 MB of copies per shape, so L2 holds none of them),
//          back to back on one stream as the decode step runs them: µs per launch and the weight bytes read per
//          second, with its share of 4.27 TB/s.
//   attn_decode: the decode path of the paged-cache attention (attention_cache_cuda.h: split kernel + merge) at
//          batch-1 and batch-64 decode shapes of Table 8's 7B models (32 q / 32 kv heads) and of Qwen3-4B (32 / 8),
//          D 128, bf16 cache in blocks of 16 tokens, contexts 1,024 + 64, 4,096 + 64 and 32,768 + 64 with
//          max_context bucketed to 256 as the engine's decode graphs do: each decode kernel (tiled, streams, warps)
//          and, for tiled and warps, the merge folded into the last split block; each launch on another copy of the
//          cache (≥ 512 MB of copies, so L2 holds none), back to back: µs per call, the K/V bytes read per second,
//          the splits, and the largest |difference| of each kernel's output from the tiled kernel's.
// Inputs are random (q, k L2-normalised per head; g = log-decay in [-0.1, 0); β in (0, 1)). Each figure is the median
// of 10 timed runs after 2 warm-ups, measured with CUDA events on the context's stream. Prints one line per
// measurement: `name shape ms` plus achieved TFLOP/s for attention (4·T·T/2·D·Hq flops forward, 3.5× that for
// forward+backward: the backward counts 2.5×, the FlashAttention convention).
// Usage: bench_cuda_kernels [gdn] [attn] [attn_engines] [decode] [lmhead] [adamw8] [conv] [gemv] [attn_decode]
//                           (all sections when none is given)
//          [--shapes BxT,...]   gdn and attn_engines: only these of their three shapes 8x1024, 2x4096, 1x16384
//                               (e.g. --shapes 1x16384 for a profile; any other shape is refused)
//          [--chunked-only]     gdn: skip the fp32 token recurrence (tens of ms per call at T16384)
//          [--d-out-ones]       attn_engines: the output gradient all ones (as peer_probe.py's sdpa section: its
//                               o.backward(ones_like(o))) instead of normal values
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_query.h"
#include "bench_timing.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/adamw/adamw_lowmem_cuda.h"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/attention/attention_cudnn.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/l2norm/l2norm_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunked_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_decode_cuda.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"
#include "ops/matmul/gemv_cuda.h"

using namespace hlm;
using namespace hlm::bench;  // median_ms, normal, upload, upload_bf16, upload_i64

namespace {

// Median milliseconds of `fn` over `iters` runs on `stream`, after `warmup` untimed runs.
double time_ms(cudaStream_t stream, const std::function<void()>& fn, int warmup = 2, int iters = 10) {
  return median_ms(stream, fn, warmup, iters);
}

// --shapes: the B×T shapes gdn and attn_engines run (empty: all of theirs).
std::vector<std::pair<int64_t, int64_t>> g_shapes;
bool g_chunked_only = false;
bool g_dout_ones = false;
bool shape_selected(int64_t B, int64_t T) {
  if (g_shapes.empty()) return true;
  return std::find(g_shapes.begin(), g_shapes.end(), std::make_pair(B, T)) != g_shapes.end();
}
// "8x1024,1x16384" → {(8, 1024), (1, 16384)}; false on anything else, or on a shape gdn and attn_engines do not run
// (8x1024, 2x4096, 1x16384), so a mistyped shape is refused instead of running nothing.
bool parse_shapes(const char* text, std::vector<std::pair<int64_t, int64_t>>& out) {
  std::string s(text);
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    long long b = 0, t = 0;
    char tail = 0;
    if (std::sscanf(s.substr(at, end - at).c_str(), "%lldx%lld%c", &b, &t, &tail) != 2 || b <= 0 || t <= 0)
      return false;
    if (!((b == 8 && t == 1024) || (b == 2 && t == 4096) || (b == 1 && t == 16384))) return false;
    out.emplace_back(b, t);
    at = end + 1;
  }
  return !out.empty();
}

std::vector<int64_t> packed(int64_t B, int64_t T) {
  std::vector<int64_t> cu(static_cast<size_t>(B + 1));
  for (int64_t b = 0; b <= B; ++b) cu[static_cast<size_t>(b)] = b * T;
  return cu;
}

void bench_gdn(CudaContext& ctx) {
  constexpr int64_t H = 32, D = 128;
  const struct {
    int64_t B, T;
  } shapes[] = {{8, 1024}, {2, 4096}, {1, 16384}};
  for (const auto& s : shapes) {
    if (!shape_selected(s.B, s.T)) continue;
    const int64_t N = s.B * s.T;
    std::vector<float> q = normal(static_cast<size_t>(N * H * D), 1), k = normal(static_cast<size_t>(N * H * D), 2);
    for (std::vector<float>* x : {&q, &k})
      for (int64_t r = 0; r < N * H; ++r) {
        double ss = 0.0;
        for (int64_t d = 0; d < D; ++d) ss += double((*x)[r * D + d]) * (*x)[r * D + d];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss));
        for (int64_t d = 0; d < D; ++d) (*x)[r * D + d] *= inv;
      }
    std::vector<float> g(static_cast<size_t>(N * H)), beta(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = -0.1f * rng_uniform(1234, 4, i);
      beta[i] = 1.0f / (1.0f + std::exp(-rng_normal(1234, 5, i)));
    }
    const CudaTensor dq_ = upload(ctx, q, {N, H, D}), dk_ = upload(ctx, k, {N, H, D});
    const CudaTensor dv_ = upload(ctx, normal(static_cast<size_t>(N * H * D), 3), {N, H, D});
    const CudaTensor dg_ = upload(ctx, g, {N, H}), db_ = upload(ctx, beta, {N, H});
    const CudaTensor cu = upload_i64(ctx, packed(s.B, s.T));
    const CudaTensor d_o = upload(ctx, normal(static_cast<size_t>(N * H * D), 6), {N, H, D});
    CudaTensor o = CudaTensor::empty(ctx, {N, H, D});
    CudaTensor gq = CudaTensor::empty(ctx, {N, H, D}), gk = CudaTensor::empty(ctx, {N, H, D});
    CudaTensor gv = CudaTensor::empty(ctx, {N, H, D}), gg = CudaTensor::empty(ctx, {N, H});
    CudaTensor gb = CudaTensor::empty(ctx, {N, H});
    const GdnShape shape{N, H, H, D, D};
    GdnInputs<float> in;
    in.q = dq_.data<float>();
    in.k = dk_.data<float>();
    in.v = dv_.data<float>();
    in.g = dg_.data<float>();
    in.beta = db_.data<float>();
    in.cu_seqlens = cu.data<int64_t>();
    in.n_seqs = s.B;
    GdnOutputs<float> out;
    out.o = o.data<float>();
    GdnInputGrads<float> grads;
    grads.dq = gq.data<float>();
    grads.dk = gk.data<float>();
    grads.dv = gv.data<float>();
    grads.dg = gg.data<float>();
    grads.dbeta = gb.data<float>();
    GdnOutputGrads<float> dout;
    dout.d_o = d_o.data<float>();
    const size_t ws_bytes = gated_delta_rule_backward_cuda_workspace_bytes(shape, s.B);
    CudaTensor ws = CudaTensor::empty(ctx, {static_cast<int64_t>((ws_bytes + 3) / 4)});
    const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
    const auto fwd = [&] { gated_delta_rule_forward_cuda(out, in, shape, scale, ctx.stream()); };
    const auto fb = [&] {
      fwd();
      gated_delta_rule_backward_cuda(grads, dout, in, shape, scale, ws.raw(), ws_bytes, ctx.stream());
    };
    if (!g_chunked_only) {
      const double t_fwd = time_ms(ctx.stream(), fwd), t_fb = time_ms(ctx.stream(), fb);
      std::printf("gdn_fwd      B%lld T%lld H%lld D%lld f32 recurrent  %.3f ms\n", (long long)s.B, (long long)s.T,
                  (long long)H, (long long)D, t_fwd);
      std::printf("gdn_fwd_bwd  B%lld T%lld H%lld D%lld f32 recurrent  %.3f ms\n", (long long)s.B, (long long)s.T,
                  (long long)H, (long long)D, t_fb);
    }
    ws = CudaTensor();
    // The chunked tensor-core form (bf16 operands, fp32 state), same inputs.
    const size_t cws_bytes = gated_delta_rule_chunked_backward_cuda_workspace_bytes(shape, s.B);
    CudaTensor cws = CudaTensor::empty(ctx, {static_cast<int64_t>((cws_bytes + 3) / 4)});
    const auto cfwd = [&] {
      gated_delta_rule_chunked_forward_cuda(out, in, shape, scale, cws.raw(), cws_bytes, ctx.stream());
    };
    const auto cfb = [&] {
      cfwd();
      gated_delta_rule_chunked_backward_cuda(grads, dout, in, shape, scale, cws.raw(), cws_bytes, ctx.stream());
    };
    // The forward keeping its scratch for the backward (keep_for_backward / forward_kept: the recomputing layer's
    // path, whose forward runs right before its backward), so the backward skips its rerun of prep and state; the
    // scratch it keeps is the backward's workspace (cws_bytes), not FLA's saved inverse alone.
    const auto cfb_keep = [&] {
      gated_delta_rule_chunked_forward_cuda(out, in, shape, scale, cws.raw(), cws_bytes, ctx.stream(), true);
      gated_delta_rule_chunked_backward_cuda(grads, dout, in, shape, scale, cws.raw(), cws_bytes, ctx.stream(), true);
    };
    const double c_fwd = time_ms(ctx.stream(), cfwd), c_fb = time_ms(ctx.stream(), cfb),
                 c_fb_keep = time_ms(ctx.stream(), cfb_keep);
    std::printf("gdn_fwd      B%lld T%lld H%lld D%lld chunked-tc  %.3f ms\n", (long long)s.B, (long long)s.T,
                (long long)H, (long long)D, c_fwd);
    std::printf("gdn_fwd_bwd  B%lld T%lld H%lld D%lld chunked-tc  %.3f ms\n", (long long)s.B, (long long)s.T,
                (long long)H, (long long)D, c_fb);
    std::printf("gdn_fwd_bwd  B%lld T%lld H%lld D%lld chunked-tc keep  %.3f ms  (scratch kept: %.0f MB)\n",
                (long long)s.B, (long long)s.T, (long long)H, (long long)D, c_fb_keep, cws_bytes / 1e6);
    // The same calls timed as peer_probe.py times FLA (back to back, the mean): the figures to set beside FLA's.
    const double b_fwd = back_to_back_ms(ctx.stream(), cfwd), b_fb = back_to_back_ms(ctx.stream(), cfb);
    std::printf("gdn_peer_timing B%lld T%lld H%lld D%lld chunked-tc back-to-back (peer_probe.py's timing: 3 warm-ups, "
                "10 calls between two events, mean)  fwd %.3f ms  fwd+bwd %.3f ms\n",
                (long long)s.B, (long long)s.T, (long long)H, (long long)D, b_fwd, b_fb);
  }
}

template <typename T>
void bench_attention_dtype(CudaContext& ctx, const char* dtype_name, bool bf16) {
  constexpr int64_t B = 8, S = 1024, Hq = 32, Hkv = 8, D = 128;
  const int64_t N = B * S;
  const auto up = [&](uint64_t stream, int64_t heads) {
    const std::vector<float> host = normal(static_cast<size_t>(N * heads * D), stream);
    return bf16 ? upload_bf16(ctx, host, {N, heads, D}) : upload(ctx, host, {N, heads, D});
  };
  const CudaTensor q = up(11, Hq), k = up(12, Hkv), v = up(13, Hkv), d_out = up(14, Hq);
  const DType dt = bf16 ? DType::BF16 : DType::F32;
  CudaTensor out = CudaTensor::empty(ctx, {N, Hq, D}, dt), lse = CudaTensor::empty(ctx, {N, Hq});
  CudaTensor dq = CudaTensor::empty(ctx, {N, Hq, D}, dt), dk = CudaTensor::empty(ctx, {N, Hkv, D}, dt);
  CudaTensor dv = CudaTensor::empty(ctx, {N, Hkv, D}, dt), flag = CudaTensor::empty(ctx, {1}, DType::I32);
  HLM_CUDA_CHECK(cudaMemsetAsync(flag.raw(), 0, 4, ctx.stream()));
  const CudaTensor cu = upload_i64(ctx, packed(B, S));
  AttentionCudaParams p;
  p.total_tokens = N;
  p.q_heads = Hq;
  p.kv_heads = Hkv;
  p.head_dim = D;
  p.n_seqs = B;
  p.max_seqlen = S;
  p.scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  const size_t ws_bytes = attention_backward_cuda_workspace_bytes(p);
  CudaTensor ws = CudaTensor::empty(ctx, {static_cast<int64_t>((ws_bytes + 3) / 4)});
  int* f = flag.data<int>();
  const auto fwd = [&] {
    attention_forward_cuda(static_cast<T*>(out.raw()), lse.data<float>(), static_cast<const T*>(q.raw()),
                           static_cast<const T*>(k.raw()), static_cast<const T*>(v.raw()), cu.data<int64_t>(), p, f,
                           ctx.stream());
  };
  const auto fb = [&] {
    fwd();
    attention_backward_cuda(static_cast<T*>(dq.raw()), static_cast<T*>(dk.raw()), static_cast<T*>(dv.raw()),
                            static_cast<const T*>(d_out.raw()), static_cast<const T*>(q.raw()),
                            static_cast<const T*>(k.raw()), static_cast<const T*>(v.raw()),
                            static_cast<const T*>(out.raw()), lse.data<float>(), cu.data<int64_t>(), p, ws.raw(),
                            ws_bytes, f, ctx.stream());
  };
  const double t_fwd = time_ms(ctx.stream(), fwd), t_fb = time_ms(ctx.stream(), fb);
  const double flops_fwd = 4.0 * double(B) * double(S) * double(S) / 2.0 * double(D) * double(Hq);
  std::printf("attn_fwd     B%lld T%lld Hq%lld Hkv%lld D%lld %s  %.3f ms  %.1f TFLOP/s\n", (long long)B, (long long)S,
              (long long)Hq, (long long)Hkv, (long long)D, dtype_name, t_fwd, flops_fwd / (t_fwd * 1e9));
  std::printf("attn_fwd_bwd B%lld T%lld Hq%lld Hkv%lld D%lld %s  %.3f ms  %.1f TFLOP/s\n", (long long)B, (long long)S,
              (long long)Hq, (long long)Hkv, (long long)D, dtype_name, t_fb, 3.5 * flops_fwd / (t_fb * 1e9));
}

// Largest |a − b| over two bf16 (or fp32) device tensors of n elements.
double max_abs_diff(const CudaTensor& a, const CudaTensor& b, int64_t n, bool bf16) {
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  if (bf16) {
    std::vector<uint16_t> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n));
    HLM_CUDA_CHECK(cudaMemcpy(ha.data(), a.raw(), 2 * n, cudaMemcpyDeviceToHost));
    HLM_CUDA_CHECK(cudaMemcpy(hb.data(), b.raw(), 2 * n, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t ua = static_cast<uint32_t>(ha[static_cast<size_t>(i)]) << 16;
      const uint32_t ub = static_cast<uint32_t>(hb[static_cast<size_t>(i)]) << 16;
      std::memcpy(&x[static_cast<size_t>(i)], &ua, 4);
      std::memcpy(&y[static_cast<size_t>(i)], &ub, 4);
    }
  } else {
    HLM_CUDA_CHECK(cudaMemcpy(x.data(), a.raw(), 4 * n, cudaMemcpyDeviceToHost));
    HLM_CUDA_CHECK(cudaMemcpy(y.data(), b.raw(), 4 * n, cudaMemcpyDeviceToHost));
  }
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(x[static_cast<size_t>(i)]) - double(y[static_cast<size_t>(i)]));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

void bench_attention_engines(CudaContext& ctx) {
  std::string why;
  if (!attention_cudnn_available(&why)) {
    std::printf("attn_engines cuDNN not available: %s\n", why.c_str());
    return;
  }
  std::printf("attn_engines %s\n", why.c_str());
  constexpr int64_t Hq = 32, Hkv = 8, D = 128;
  const std::pair<int64_t, int64_t> shapes[] = {{8, 1024}, {2, 4096}, {1, 16384}};
  for (const auto& [B, S] : shapes) {
    if (!shape_selected(B, S)) continue;
    const int64_t N = B * S;
    const auto up = [&](uint64_t stream, int64_t heads) {
      return upload_bf16(ctx, normal(static_cast<size_t>(N * heads * D), stream), {N, heads, D});
    };
    const CudaTensor q = up(11, Hq), k = up(12, Hkv), v = up(13, Hkv);
    const CudaTensor d_out = g_dout_ones ? upload_bf16(ctx, std::vector<float>(static_cast<size_t>(N * Hq * D), 1.0f),
                                                       {N, Hq, D})
                                         : up(14, Hq);
    std::printf("attn_engines B%lld T%lld d_out %s\n", (long long)B, (long long)S, g_dout_ones ? "ones" : "normal");
    struct Out {
      CudaTensor out, lse, dq, dk, dv;
    };
    const auto make = [&] {
      return Out{CudaTensor::empty(ctx, {N, Hq, D}, DType::BF16), CudaTensor::empty(ctx, {N, Hq}),
                 CudaTensor::empty(ctx, {N, Hq, D}, DType::BF16), CudaTensor::empty(ctx, {N, Hkv, D}, DType::BF16),
                 CudaTensor::empty(ctx, {N, Hkv, D}, DType::BF16)};
    };
    Out nat = make(), cud = make();
    CudaTensor flag = CudaTensor::empty(ctx, {1}, DType::I32);
    HLM_CUDA_CHECK(cudaMemsetAsync(flag.raw(), 0, 4, ctx.stream()));
    const CudaTensor cu = upload_i64(ctx, packed(B, S));
    const AttentionCudaParams p{N, Hq, Hkv, D, B, S, static_cast<float>(1.0 / std::sqrt(double(D))), 0};
    const size_t ws_bytes = attention_backward_cuda_workspace_bytes(p);
    CudaTensor ws = CudaTensor::empty(ctx, {static_cast<int64_t>((ws_bytes + 3) / 4)});
    using bf = __nv_bfloat16;
    const auto B16 = [](const CudaTensor& t) { return static_cast<bf*>(t.raw()); };
    const auto native_fwd = [&] {
      attention_forward_cuda(B16(nat.out), nat.lse.data<float>(), B16(q), B16(k), B16(v), cu.data<int64_t>(), p,
                             flag.data<int>(), ctx.stream());
    };
    const auto native_fb = [&] {
      native_fwd();
      attention_backward_cuda(B16(nat.dq), B16(nat.dk), B16(nat.dv), B16(d_out), B16(q), B16(k), B16(v), B16(nat.out),
                              nat.lse.data<float>(), cu.data<int64_t>(), p, ws.raw(), ws_bytes, flag.data<int>(),
                              ctx.stream());
    };
    bool ok = true;
    std::string err;
    const auto cudnn_fwd = [&] {
      ok = ok && attention_cudnn_forward(B16(cud.out), cud.lse.data<float>(), B16(q), B16(k), B16(v), p, ctx.stream(),
                                         &err);
    };
    const auto cudnn_fb = [&] {
      cudnn_fwd();
      ok = ok && attention_cudnn_backward(B16(cud.dq), B16(cud.dk), B16(cud.dv), B16(d_out), B16(q), B16(k), B16(v),
                                          B16(cud.out), cud.lse.data<float>(), p, ctx.stream(), &err);
    };
    const double flops_fwd = 4.0 * double(B) * double(S) * double(S) / 2.0 * double(D) * double(Hq);
    // The native kernels pinned: under the default engine (auto, since session 13) attention_forward_cuda runs cuDNN,
    // and this column printed cuDNN's time (seen in session 15's call: |native − cudnn| = 0).
    attention_set_engine(AttentionEngine::kNative);
    const double n_fwd = time_ms(ctx.stream(), native_fwd), n_fb = time_ms(ctx.stream(), native_fb);
    attention_clear_engine_override();
    // cuDNN with each plan choice (HLM_CUDNN_PLAN first / timed), plans rebuilt for each; timed last, so the
    // differences printed below are the timed plans'.
    struct Run {
      const char* name;
      AttentionCudnnPlanChoice choice;
      double fwd = 0, fb = 0, build_s = 0;
      AttentionCudnnPlanInfo fi, bi;
    };
    Run runs[] = {{"first", AttentionCudnnPlanChoice::kFirst}, {"timed", AttentionCudnnPlanChoice::kTimed}};
    for (Run& r : runs) {
      attention_cudnn_reset_plans();
      attention_cudnn_set_plan_choice(r.choice);
      const auto w0 = std::chrono::steady_clock::now();
      cudnn_fb();  // builds both plans
      HLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
      r.build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      if (!ok) break;
      r.fwd = time_ms(ctx.stream(), cudnn_fwd);
      r.fb = time_ms(ctx.stream(), cudnn_fb);
      HLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
      attention_cudnn_plan_info(false, p, &r.fi);
      attention_cudnn_plan_info(true, p, &r.bi);
    }
    attention_cudnn_clear_plan_choice();
    if (!ok) {
      std::printf("attn_engines B%lld T%lld: cuDNN refused: %s\n", (long long)B, (long long)S, err.c_str());
      continue;
    }
    // The timed plans again (still cached), timed as peer_probe.py times torch's SDPA (back to back, the mean): the
    // figures to set beside the peer's.
    const double b_fwd = back_to_back_ms(ctx.stream(), cudnn_fwd), b_fb = back_to_back_ms(ctx.stream(), cudnn_fb);
    std::printf("attn_peer_timing B%lld T%lld Hq%lld Hkv%lld D%lld bf16 cudnn-timed back-to-back (peer_probe.py's "
                "timing: 3 warm-ups, 10 calls between two events, mean)  fwd %.3f ms  fwd+bwd %.3f ms\n",
                (long long)B, (long long)S, (long long)Hq, (long long)Hkv, (long long)D, b_fwd, b_fb);
    const Run &first = runs[0], &timed = runs[1];
    std::printf("attn_engines B%lld T%lld Hq%lld Hkv%lld D%lld bf16 fwd: native %.3f ms (%.0f TFLOP/s) cudnn-first "
                "%.3f ms (%.0f) cudnn-timed %.3f ms (%.0f) first/timed %.3f; fwd+bwd: native %.3f ms (%.0f) "
                "cudnn-first %.3f ms (%.0f) cudnn-timed %.3f ms (%.0f) first/timed %.3f native/timed %.2f; plans built "
                "in %.2f s (first) %.2f s (timed)\n",
                (long long)B, (long long)S, (long long)Hq, (long long)Hkv, (long long)D, n_fwd,
                flops_fwd / (n_fwd * 1e9), first.fwd, flops_fwd / (first.fwd * 1e9), timed.fwd,
                flops_fwd / (timed.fwd * 1e9), first.fwd / timed.fwd, n_fb, 3.5 * flops_fwd / (n_fb * 1e9), first.fb,
                3.5 * flops_fwd / (first.fb * 1e9), timed.fb, 3.5 * flops_fwd / (timed.fb * 1e9), first.fb / timed.fb,
                n_fb / timed.fb, first.build_s, timed.build_s);
    for (const Run& r : runs)
      for (const auto& [dir, info] : {std::pair<const char*, const AttentionCudnnPlanInfo*>{"fwd", &r.fi},
                                      std::pair<const char*, const AttentionCudnnPlanInfo*>{"bwd", &r.bi}}) {
        std::string times;
        for (const double t : info->ms) {
          char buf[32];
          std::snprintf(buf, sizeof(buf), "%s%.3f", times.empty() ? "" : " ", t);
          times += buf;
        }
        std::printf("attn_engines B%lld T%lld plan %s %s: candidate %d of %d (%s)%s%s%s\n", (long long)B, (long long)S,
                    r.name, dir, info->chosen, info->candidates, info->engine.c_str(), times.empty() ? "" : "; ms [",
                    times.c_str(), times.empty() ? "" : "]");
      }
    std::printf("attn_engines B%lld T%lld max |native - cudnn(timed)|: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g\n",
                (long long)B, (long long)S, max_abs_diff(nat.out, cud.out, N * Hq * D, true),
                max_abs_diff(nat.lse, cud.lse, N * Hq, false), max_abs_diff(nat.dq, cud.dq, N * Hq * D, true),
                max_abs_diff(nat.dk, cud.dk, N * Hkv * D, true), max_abs_diff(nat.dv, cud.dv, N * Hkv * D, true));
  }
}

void bench_decode(CudaContext& ctx) {
  constexpr int64_t B = 64, H = 32, D = 128, kBatch = 20;
  const GdnDecodeShape shape{B, H, H, D, D};
  std::vector<float> q = normal(static_cast<size_t>(B * H * D), 21), k = normal(static_cast<size_t>(B * H * D), 22);
  for (std::vector<float>* x : {&q, &k})
    for (int64_t r = 0; r < B * H; ++r) {
      double ss = 0.0;
      for (int64_t d = 0; d < D; ++d) ss += double((*x)[r * D + d]) * (*x)[r * D + d];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss));
      for (int64_t d = 0; d < D; ++d) (*x)[r * D + d] *= inv;
    }
  std::vector<float> g(static_cast<size_t>(B * H)), beta(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = -0.1f * rng_uniform(1234, 24, i);
    beta[i] = 1.0f / (1.0f + std::exp(-rng_normal(1234, 25, i)));
  }
  std::vector<float> state_host = normal(static_cast<size_t>(shape.state_elements()), 26);
  for (float& x : state_host) x *= 0.1f;
  const CudaTensor dq = upload(ctx, q, {B, H, D}), dk = upload(ctx, k, {B, H, D});
  const CudaTensor dv = upload(ctx, normal(static_cast<size_t>(B * H * D), 23), {B, H, D});
  const CudaTensor dg = upload(ctx, g, {B, H}), db = upload(ctx, beta, {B, H});
  CudaTensor state = upload(ctx, state_host, {B, H, D, D});
  CudaTensor o = CudaTensor::empty(ctx, {B, H, D});
  GdnDecodeInputs<float> in;
  in.q = dq.data<float>();
  in.k = dk.data<float>();
  in.v = dv.data<float>();
  in.g = dg.data<float>();
  in.beta = db.data<float>();
  const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  // The state keeps evolving from step to step (g < 0, β < 1, unit keys: it stays bounded).
  const auto step = [&] {
    gated_delta_rule_decode_cuda(o.data<float>(), state.data<float>(), in, shape, scale, ctx.stream());
  };
  const auto steps = [&] {
    for (int64_t i = 0; i < kBatch; ++i) step();
  };
  const double t_one = time_ms(ctx.stream(), step, 3, 20);
  const double t_batch = time_ms(ctx.stream(), steps, 1, 10) / double(kBatch);
  const double state_bytes = double(shape.state_elements()) * 4.0;
  const double bytes = 2.0 * state_bytes + 4.0 * double(2 * B * H * D + 2 * B * H * D + 2 * B * H);
  const char* path = gated_delta_rule_decode_cuda_vectorized(state.data<float>(), in, shape) ? "vector" : "scalar";
  for (const auto& [label, t] : {std::pair{"single", t_one}, std::pair{"x20   ", t_batch}}) {
    const double gbs = bytes / (t * 1e6);
    std::printf("gdn_decode   B%lld H%lld dk%lld dv%lld f32 state (%s path, %s)  %.4f ms/step  %.0f GB/s  "
                "%.1f%% of 4.27 TB/s\n",
                (long long)B, (long long)H, (long long)D, (long long)D, path, label, t, gbs, 100.0 * gbs / 4270.0);
  }
}


void bench_gemv(CudaContext& ctx) {
  struct GemvShape {
    const char* name;
    int64_t K;
    std::vector<int64_t> n;  // the group's outputs
  };
  const std::vector<GemvShape> shapes = {
      {"7b q/k/v", 4096, {4096, 4096, 4096}},
      {"7b o_proj", 4096, {4096}},
      {"7b gate/up", 4096, {11008, 11008}},
      {"7b down", 11008, {4096}},
      {"7b gdn in (q,k,v,g,a,b)", 4096, {4096, 4096, 4096, 4096, 32, 32}},
      {"7b head", 4096, {100278}},
      {"4b q/k/v", 2560, {4096, 1024, 1024}},
      {"4b o_proj", 4096, {2560}},
      {"4b gate/up", 2560, {9728, 9728}},
      {"4b down", 9728, {2560}},
      {"4b head", 2560, {151936}},
  };
  const CudaTensor x = upload(ctx, normal(11008, 41), {11008});
  for (const GemvShape& sh : shapes) {
    int64_t columns = 0;
    for (int64_t n : sh.n) columns += n;
    const double bytes = 2.0 * double(columns) * double(sh.K);
    const int copies = static_cast<int>(std::max(2.0, std::ceil(512e6 / bytes)));
    std::vector<CudaTensor> w, y;
    for (int c = 0; c < copies; ++c) {
      w.push_back(CudaTensor::empty(ctx, {columns, sh.K}, DType::BF16));
      HLM_CUDA_CHECK(cudaMemsetAsync(w.back().raw(), 0x3c, static_cast<size_t>(bytes), ctx.stream()));
      y.push_back(CudaTensor::empty(ctx, {columns}));
    }
    const auto run_all = [&] {
      for (int c = 0; c < copies; ++c) {
        GemvOutput outs[gemv_max_outputs()];
        int64_t at = 0;
        for (size_t i = 0; i < sh.n.size(); ++i) {
          outs[i].w = static_cast<const __nv_bfloat16*>(w[c].raw()) + at * sh.K;
          outs[i].y = y[c].data<float>() + at;
          outs[i].n = sh.n[i];
          at += sh.n[i];
        }
        gemv_bf16_cuda(outs, static_cast<int>(sh.n.size()), x.data<float>(), nullptr, 1, sh.K, ctx.stream());
      }
    };
    const double us = 1e3 * time_ms(ctx.stream(), run_all, 2, 10) / copies;
    const double tbs = bytes / (us * 1e6);
    std::printf("gemv  %-26s K %5lld  N %6lld  %7.2f us  %.2f TB/s  %.1f%% of 4.27 TB/s  (%d copies)\n", sh.name,
                (long long)sh.K, (long long)columns, us, tbs, 100.0 * tbs / 4.27, copies);
  }
}

// The decode path of the paged-cache attention (header comment, attn_decode).
void bench_attn_decode(CudaContext& ctx) {
  struct Shape {
    const char* name;
    int64_t Hq, Hkv;
  };
  const Shape shapes[] = {{"7b (32/32)", 32, 32}, {"4b (32/8)", 32, 8}};
  const std::pair<int64_t, int64_t> runs[] = {{1, 1024}, {1, 4096}, {1, 32768}, {64, 1024}};  // (B, L)
  constexpr int64_t D = 128, kBlock = 16, kBucket = 256, kExtra = 64;
  struct Variant {
    const char* name;
    DecodeKernel kernel;
    DecodeMerge merge;
  };
  const Variant variants[] = {{"tiled", DecodeKernel::tiled, DecodeMerge::kernel},
                              {"tiled+fused", DecodeKernel::tiled, DecodeMerge::fused},
                              {"streams", DecodeKernel::streams, DecodeMerge::kernel},
                              {"warps", DecodeKernel::warps, DecodeMerge::kernel},
                              {"warps+fused", DecodeKernel::warps, DecodeMerge::fused}};
  const DecodeKernel saved_kernel = attention_cache_cuda_decode_kernel();
  const DecodeMerge saved_merge = attention_cache_cuda_decode_merge();
  for (const Shape& sh : shapes)
    for (const auto& [B, L] : runs) {
      const int64_t ctx_len = L + kExtra, blocks_per_seq = (ctx_len + kBlock - 1) / kBlock;
      const int64_t bucket = (ctx_len + kBucket - 1) / kBucket * kBucket;
      const int64_t max_blocks = bucket / kBlock;
      AttentionCacheCudaParams p;
      p.total_tokens = B;
      p.n_seqs = B;
      p.q_heads = sh.Hq;
      p.kv_heads = sh.Hkv;
      p.head_dim = D;
      p.num_blocks = B * blocks_per_seq;
      p.block_size = kBlock;
      p.max_blocks = max_blocks;
      p.max_query_len = 1;
      p.max_context = bucket;
      p.scale = 1.0f / std::sqrt(static_cast<float>(D));
      const int64_t cache_elems = p.num_blocks * kBlock * sh.Hkv * D;
      const double kv_bytes = 2.0 * double(B * ctx_len * sh.Hkv * D) * 2.0;  // K and V rows read, bf16
      const int copies = static_cast<int>(std::max(2.0, std::ceil(512e6 / kv_bytes)));
      std::vector<int32_t> tables(static_cast<size_t>(B * max_blocks), -1);
      for (int64_t n = 0; n < B; ++n)
        for (int64_t b = 0; b < blocks_per_seq; ++b)
          tables[n * max_blocks + b] = static_cast<int32_t>(n * blocks_per_seq + b);
      std::vector<int64_t> ctxs(static_cast<size_t>(B), ctx_len), cu(static_cast<size_t>(B + 1));
      for (int64_t n = 0; n <= B; ++n) cu[n] = n;
      CudaTensor tables_d = CudaTensor::empty(ctx, {B * max_blocks}, DType::I32);
      HLM_CUDA_CHECK(
          cudaMemcpy(tables_d.raw(), tables.data(), tables.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      const CudaTensor ctx_d = upload_i64(ctx, ctxs), cu_d = upload_i64(ctx, cu);
      const CudaTensor q = upload(ctx, normal(static_cast<size_t>(B * sh.Hq * D), 51), {B * sh.Hq * D});
      std::vector<CudaTensor> kc, vc;
      // Random rows (at most 2^24 values drawn, repeated across the pool: the timing does not depend on them).
      const auto pool_values = [&](uint64_t stream) {
        const std::vector<float> drawn = normal(static_cast<size_t>(std::min<int64_t>(cache_elems, 1 << 24)), stream);
        std::vector<float> v(static_cast<size_t>(cache_elems));
        for (size_t i = 0; i < v.size(); ++i) v[i] = drawn[i % drawn.size()];
        return v;
      };
      const CudaTensor k_src = upload_bf16(ctx, pool_values(52), {cache_elems});
      const CudaTensor v_src = upload_bf16(ctx, pool_values(53), {cache_elems});
      for (int c = 0; c < copies; ++c) {
        kc.push_back(CudaTensor::empty(ctx, {cache_elems}, DType::BF16));
        vc.push_back(CudaTensor::empty(ctx, {cache_elems}, DType::BF16));
        const size_t bytes = static_cast<size_t>(cache_elems) * 2;
        HLM_CUDA_CHECK(cudaMemcpyAsync(kc.back().raw(), k_src.raw(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
        HLM_CUDA_CHECK(cudaMemcpyAsync(vc.back().raw(), v_src.raw(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
      }
      const size_t ws_bytes = attention_cache_forward_cuda_workspace_bytes(p);
      CudaTensor ws = CudaTensor::empty(ctx, {static_cast<int64_t>(std::max<size_t>(ws_bytes, 4) / 4)});
      CudaTensor out = CudaTensor::empty(ctx, {B * sh.Hq * D}), flag = CudaTensor::empty(ctx, {1}, DType::I32);
      HLM_CUDA_CHECK(cudaMemsetAsync(flag.raw(), 0, sizeof(int), ctx.stream()));
      const auto call = [&](int c) {
        attention_cache_forward_cuda(out.data<float>(), q.data<float>(),
                                     static_cast<const __nv_bfloat16*>(kc[static_cast<size_t>(c)].raw()),
                                     static_cast<const __nv_bfloat16*>(vc[static_cast<size_t>(c)].raw()),
                                     static_cast<const int32_t*>(tables_d.raw()),
                                     static_cast<const int64_t*>(ctx_d.raw()),
                                     static_cast<const int64_t*>(cu_d.raw()), p, ws.raw(), ws_bytes,
                                     static_cast<int*>(flag.raw()), ctx.stream());
      };
      std::vector<float> reference;
      for (const Variant& v : variants) {
        attention_cache_cuda_set_decode_kernel(v.kernel);
        attention_cache_cuda_set_decode_merge(v.merge);
        HLM_CUDA_CHECK(cudaMemsetAsync(flag.raw(), 0, sizeof(int), ctx.stream()));  // this variant's flag
        const auto all_copies = [&] {
          for (int c = 0; c < copies; ++c) call(c);
        };
        const double us = 1e3 * time_ms(ctx.stream(), all_copies, 2, 10) / copies;
        call(0);
        std::vector<float> o(static_cast<size_t>(B * sh.Hq * D));
        HLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
        HLM_CUDA_CHECK(cudaMemcpy(o.data(), out.raw(), o.size() * sizeof(float), cudaMemcpyDeviceToHost));
        int flag_h = 0;
        HLM_CUDA_CHECK(cudaMemcpy(&flag_h, flag.raw(), sizeof(int), cudaMemcpyDeviceToHost));
        if (reference.empty()) reference = o;
        double diff = 0.0;
        for (size_t i = 0; i < o.size(); ++i) diff = std::max(diff, double(std::fabs(o[i] - reference[i])));
        const double tbs = kv_bytes / (us * 1e6);
        std::printf("attn_decode  %-10s B%-3lld L%-6lld %-12s %3lld splits  %8.2f us  %.2f TB/s  %.1f%% of 4.27 TB/s  "
                    "max|d| vs tiled %.2e  flag %d  (%d copies)\n",
                    sh.name, (long long)B, (long long)ctx_len, v.name, (long long)attention_cache_cuda_decode_splits(p),
                    us, tbs, 100.0 * tbs / 4.27, diff, flag_h, copies);
      }
    }
  attention_cache_cuda_set_decode_kernel(saved_kernel);
  attention_cache_cuda_set_decode_merge(saved_merge);
}

// Chunked LM head + forward KL with the student gradient, bf16 compute mode, at the distillation step's shape.
void bench_lm_head_kl(CudaContext& ctx, int64_t H) {
  const int64_t N = 8192, V = 151936;
  const std::vector<float> w_host = normal(static_cast<size_t>(V * H), 41);
  std::vector<float> h_host = normal(static_cast<size_t>(N * H), 42);
  for (float& x : h_host) x *= 0.05f;  // logits of a few units, as a trained model's
  std::vector<float> ht_host = normal(static_cast<size_t>(N * H), 44);
  for (float& x : ht_host) x *= 0.05f;
  // One weight matrix for both heads (the timing does not depend on the values; the hidden states differ).
  const CudaTensor w_s = upload(ctx, w_host, {V, H}), w_t = upload(ctx, w_host, {V, H});
  const CudaTensor h_s = upload(ctx, h_host, {N, H}), h_t = upload(ctx, ht_host, {N, H});
  const CudaTensor w_s16 = upload_bf16(ctx, w_host, {V, H}), w_t16 = upload_bf16(ctx, w_host, {V, H});
  const CudaTensor h_s16 = upload_bf16(ctx, h_host, {N, H}), h_t16 = upload_bf16(ctx, ht_host, {N, H});
  CudaTensor kl = CudaTensor::empty(ctx, {N}), dh = CudaTensor::empty(ctx, {N, H}), dw = CudaTensor::empty(ctx, {V, H});
  CudaTensor result = CudaTensor::empty(ctx, {static_cast<int64_t>(sizeof(TokenLossCudaResult) / 4) + 1}, DType::I32);
  LmHeadCuda teacher{w_t.data<float>(), V, H, 1.0, w_t16.data<__nv_bfloat16>(), h_t16.data<__nv_bfloat16>()};
  LmHeadCuda student{w_s.data<float>(), V, H, 1.0, w_s16.data<__nv_bfloat16>(), h_s16.data<__nv_bfloat16>()};
  const LmHeadGradCuda grad{dh.data<float>(), dw.data<float>()};
  // The last three: one chunk over the vocabulary, so pass 2 reuses pass 1's tiles (four products instead of six).
  const LmHeadCudaChunking chunkings[] = {{4096, 1024}, {4096, 2048}, {4096, 4096}, {4096, 8192}, {8192, 4096},
                                          {16384, 2048}, {2048, 8192}, {V, 1024},     {V, 2048},    {V, 4096}};
  for (const LmHeadCudaChunking& c : chunkings) {
    const int products = c.vocab_chunk >= V ? 4 : 6;
    const double flops = products * 2.0 * static_cast<double>(N) * static_cast<double>(V) * static_cast<double>(H);
    const size_t bytes = lm_head_forward_kl_cuda_workspace_bytes(N, V, c);
    CudaTensor ws = CudaTensor::empty(ctx, {static_cast<int64_t>(bytes / 4) + 1}, DType::I32);
    const double ms = time_ms(ctx.stream(), [&] {
      lm_head_forward_kl_cuda(ctx.blaslt(), kl.data<float>(), static_cast<TokenLossCudaResult*>(result.raw()),
                              h_t.data<float>(), teacher, h_s.data<float>(), student, N, 1.0, nullptr, &grad, c,
                              ws.raw(), bytes);
    }, 1, 5);
    std::printf("lm_head_kl   N%lld H%lld V%lld bf16 rows %5lld x vocab %6lld  %.3f ms  %d products  %.0f TFLOP/s  "
                "workspace %.0f MiB\n",
                (long long)N, (long long)H, (long long)V, (long long)c.row_block, (long long)c.vocab_chunk, ms,
                products, flops / (ms * 1e-3) / 1e12, static_cast<double>(bytes) / (1 << 20));
  }
}

void bench_adamw8(CudaContext& ctx) {
  const int64_t n = int64_t{1} << 29, blocks = q8_blocks(n);
  // Values: codes and bf16 bits drawn at random (the kernel's time does not depend on them beyond the search
  // lengths, which a realistic spread of codes exercises).
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  uint64_t x = 12345;
  for (int64_t i = 0; i < n; ++i) {
    x = splitmix64(x);
    bits[static_cast<size_t>(i)] = static_cast<uint16_t>(0x3C00u + (x & 0x3FFu));  // bf16 in [2^-7, 2^-6)
    codes[static_cast<size_t>(i)] = static_cast<uint8_t>(x >> 32);
  }
  CudaTensor param = CudaTensor::empty(ctx, {n}, DType::BF16), grad = CudaTensor::empty(ctx, {n}, DType::BF16);
  CudaTensor q_m = CudaTensor::empty(ctx, {n / 4}, DType::I32), q_v = CudaTensor::empty(ctx, {n / 4}, DType::I32);
  CudaTensor am = CudaTensor::empty(ctx, {blocks}), av = CudaTensor::empty(ctx, {blocks});
  HLM_CUDA_CHECK(cudaMemcpy(param.raw(), bits.data(), 2 * n, cudaMemcpyHostToDevice));
  HLM_CUDA_CHECK(cudaMemcpy(grad.raw(), bits.data(), 2 * n, cudaMemcpyHostToDevice));
  HLM_CUDA_CHECK(cudaMemcpy(q_m.raw(), codes.data(), n, cudaMemcpyHostToDevice));
  HLM_CUDA_CHECK(cudaMemcpy(q_v.raw(), codes.data(), n, cudaMemcpyHostToDevice));
  const std::vector<float> ones(static_cast<size_t>(blocks), 0.01f);
  HLM_CUDA_CHECK(cudaMemcpy(am.raw(), ones.data(), 4 * blocks, cudaMemcpyHostToDevice));
  HLM_CUDA_CHECK(cudaMemcpy(av.raw(), ones.data(), 4 * blocks, cudaMemcpyHostToDevice));
  AdamWLowmemCudaTensor t;
  t.param_bf16 = static_cast<uint16_t*>(param.raw());
  t.q_m = static_cast<uint8_t*>(q_m.raw());
  t.q_v = static_cast<uint8_t*>(q_v.raw());
  t.absmax_m = am.data<float>();
  t.absmax_v = av.data<float>();
  t.grad_bf16 = static_cast<const uint16_t*>(grad.raw());
  t.n = n;
  const AdamWLowmemStep s = adamw_lowmem_step(1e-5, 0.01, 0.9, 0.999, 1e-8, 10, 77);
  const double ms = time_ms(ctx.stream(), [&] { adamw_lowmem_step_cuda(t, nullptr, s, ctx.stream()); }, 2, 10);
  std::printf("adamw8 lean n %lld  %.3f ms  %.0f GB/s (10 B/element)  %.1f ms per 5.12e9 parameters\n", (long long)n,
              ms, 10.0 * static_cast<double>(n) / (ms * 1e-3) / 1e9, ms * 5.12e9 / static_cast<double>(n));
}

void bench_conv(CudaContext& ctx) {
  constexpr int64_t B = 4, S = 1024, T = B * S, C = 4096, K = 4;
  constexpr size_t kFlushBytes = size_t{256} << 20;  // > the H200's 50 MiB L2
  constexpr double kPeak = 4.27e12;                  // device copy bandwidth measured on the H200
  const std::vector<float> xh = normal(static_cast<size_t>(T * C), 31), dyh = normal(static_cast<size_t>(T * C), 32);
  std::vector<float> wh = normal(static_cast<size_t>(C * K), 33);
  for (float& v : wh) v *= 0.5f;
  // Aligned tensors (the 4-channel path) and copies one float in (pointer + 1: the 1-channel path).
  const auto shifted = [](const std::vector<float>& v) {
    std::vector<float> out(v.size() + 1, 0.0f);
    std::copy(v.begin(), v.end(), out.begin() + 1);
    return out;
  };
  const CudaTensor x = upload(ctx, xh, {T, C}), dy = upload(ctx, dyh, {T, C}), w = upload(ctx, wh, {C, K});
  const CudaTensor x1 = upload(ctx, shifted(xh), {T * C + 1}), dy1 = upload(ctx, shifted(dyh), {T * C + 1});
  const CudaTensor cu = upload_i64(ctx, packed(B, S));
  CudaTensor y = CudaTensor::empty(ctx, {T, C}), dx = CudaTensor::empty(ctx, {T, C});
  CudaTensor y1 = CudaTensor::empty(ctx, {T * C + 1}), dx1 = CudaTensor::empty(ctx, {T * C + 1});
  CudaTensor dw = CudaTensor::empty(ctx, {C, K}), dw1 = CudaTensor::empty(ctx, {C, K});
  CudaTensor flush = CudaTensor::empty(ctx, {static_cast<int64_t>(kFlushBytes / 4)});
  const CausalConv1dCudaParams p{T, C, K, B, true};
  const size_t ws_bytes = causal_conv1d_backward_cuda_workspace_bytes(p);
  CudaTensor ws = CudaTensor::empty(ctx, {std::max<int64_t>(1, static_cast<int64_t>((ws_bytes + 3) / 4))});
  const double act = double(T * C) * 4, wb = double(C * K) * 4;
  const double fwd_bytes = 2 * act + wb, bwd_bytes = 3 * act + 2 * wb;
  const auto flush_l2 = [&] { HLM_CUDA_CHECK(cudaMemsetAsync(flush.raw(), 0, kFlushBytes, ctx.stream())); };
  double fwd_us[2] = {}, bwd_us[2] = {};
  for (int path = 0; path < 2; ++path) {  // 0: aligned rows (4 channels per thread), 1: rows one float off
    float* yp = path == 0 ? y.data<float>() : y1.data<float>() + 1;
    float* dxp = path == 0 ? dx.data<float>() : dx1.data<float>() + 1;
    float* dwp = path == 0 ? dw.data<float>() : dw1.data<float>();
    const float* xp = path == 0 ? x.data<float>() : x1.data<float>() + 1;
    const float* dyp = path == 0 ? dy.data<float>() : dy1.data<float>() + 1;
    const auto fwd = [&] {
      causal_conv1d_forward_cuda(yp, nullptr, xp, w.data<float>(), nullptr, cu.data<int64_t>(), p, ctx.stream());
    };
    const auto bwd = [&] {
      causal_conv1d_backward_cuda(dxp, dwp, nullptr, dyp, xp, w.data<float>(), nullptr, cu.data<int64_t>(), p,
                                  ws.raw(), ws_bytes, ctx.stream());
    };
    fwd_us[path] = 1000.0 * median_ms(ctx.stream(), fwd, 3, 20, flush_l2);
    bwd_us[path] = 1000.0 * median_ms(ctx.stream(), bwd, 3, 20, flush_l2);
    const char* what = path == 0 ? "4-channel path (aligned rows)" : "1-channel path (rows 4 B off)";
    for (int dir = 0; dir < 2; ++dir) {
      const double us = dir == 0 ? fwd_us[path] : bwd_us[path], bytes = dir == 0 ? fwd_bytes : bwd_bytes;
      const double gbs = bytes / (us * 1e-6) / 1e9;
      std::printf("conv_%s T%lld(%lldx%lld) C%lld K%lld silu f32  %-30s %8.1f us  %6.1f MB  %5.0f GB/s  "
                  "%5.1f%% of 4.27 TB/s\n",
                  dir == 0 ? "fwd" : "bwd", (long long)T, (long long)B, (long long)S, (long long)C, (long long)K, what,
                  us, bytes / 1e6, gbs, 100.0 * gbs * 1e9 / kPeak);
    }
  }
  // Whether two device buffers hold the same `bytes` (each A/B pair below is compared bit for bit).
  const auto same_bytes = [&](const void* a, const void* b, size_t bytes) {
    std::vector<unsigned char> ha(bytes), hb(bytes);
    HLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
    HLM_CUDA_CHECK(cudaMemcpy(ha.data(), a, bytes, cudaMemcpyDeviceToHost));
    HLM_CUDA_CHECK(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost));
    return ha == hb;
  };
  // The backward's interior walk against the general walk (causal_conv1d_cuda_set_interior_walk), with the fp32 dx
  // and with the bf16 dx the 4B step's GDN layers use, aligned rows; the dx and dw bits of each pair compared.
  CudaTensor dx16 = CudaTensor::empty(ctx, {T * C / 2}), dx_off = CudaTensor::empty(ctx, {T * C});
  CudaTensor dx16_off = CudaTensor::empty(ctx, {T * C / 2}), dw_off = CudaTensor::empty(ctx, {C, K});
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    double us[2] = {};
    for (int walk = 1; walk >= 0; --walk) {  // 1: interior walk (the default), 0: the general walk only
      causal_conv1d_cuda_set_interior_walk(walk);
      void* dxp = walk == 1 ? (bf16 ? dx16.raw() : dx.raw()) : (bf16 ? dx16_off.raw() : dx_off.raw());
      float* dwp = walk == 1 ? dw.data<float>() : dw_off.data<float>();
      const auto bwd = [&] {
        if (bf16)
          causal_conv1d_backward_bf16_dx_cuda(static_cast<__nv_bfloat16*>(dxp), dwp, nullptr, dy.data<float>(),
                                              x.data<float>(), w.data<float>(), nullptr, cu.data<int64_t>(), p,
                                              ws.raw(), ws_bytes, ctx.stream());
        else
          causal_conv1d_backward_cuda(static_cast<float*>(dxp), dwp, nullptr, dy.data<float>(), x.data<float>(),
                                      w.data<float>(), nullptr, cu.data<int64_t>(), p, ws.raw(), ws_bytes,
                                      ctx.stream());
      };
      us[walk] = 1000.0 * median_ms(ctx.stream(), bwd, 3, 20, flush_l2);
    }
    causal_conv1d_cuda_set_interior_walk(-1);
    const size_t dx_bytes = static_cast<size_t>(T * C) * (bf16 ? 2 : 4);
    const bool same = same_bytes(bf16 ? dx16.raw() : dx.raw(), bf16 ? dx16_off.raw() : dx_off.raw(), dx_bytes) &&
                      same_bytes(dw.raw(), dw_off.raw(), static_cast<size_t>(C * K) * 4);
    std::printf("conv_bwd %s dx, 4-channel path: interior walk %.1f us, general walk %.1f us (%.2fx); dx and dw "
                "bit-identical: %s\n",
                bf16 ? "bf16" : "f32", us[1], us[0], us[0] / us[1], same ? "yes" : "NO");
  }
  // The conv + per-head l2norm (heads of 128, the GDN q and k): fused in one launch against the two launches.
  {
    CudaTensor yn = CudaTensor::empty(ctx, {T, C}), y2 = CudaTensor::empty(ctx, {T, C});
    CudaTensor yn2 = CudaTensor::empty(ctx, {T, C});
    const float eps = L2normCudaParams{}.eps;
    double us[2] = {};
    for (int fused = 1; fused >= 0; --fused) {
      causal_conv1d_cuda_set_l2norm_fused(fused);
      float* yp = fused ? y.data<float>() : y2.data<float>();
      float* ynp = fused ? yn.data<float>() : yn2.data<float>();
      const auto both = [&] {
        causal_conv1d_l2norm_forward_cuda(yp, ynp, x.data<float>(), w.data<float>(), cu.data<int64_t>(), p, 128, eps,
                                          ctx.stream());
      };
      us[fused] = 1000.0 * median_ms(ctx.stream(), both, 3, 20, flush_l2);
    }
    causal_conv1d_cuda_set_l2norm_fused(-1);
    const size_t bytes = static_cast<size_t>(T * C) * 4;
    const bool same_fwd = same_bytes(y.raw(), y2.raw(), bytes) && same_bytes(yn.raw(), yn2.raw(), bytes);
    std::printf("conv_fwd+l2norm heads of 128: fused %.1f us, two launches %.1f us (%.2fx); y and yn "
                "bit-identical: %s\n",
                us[1], us[0], us[0] / us[1], same_fwd ? "yes" : "NO");
    // The backward (bf16 dx, as the 4B step's GDN layers): the l2norm's backward fused against the two launches. The
    // fallback takes the l2norm's gradient in place, so each run starts from a fresh copy of dy (the copy is timed in
    // both forms).
    CudaTensor dyn = CudaTensor::empty(ctx, {T, C}), dx16 = CudaTensor::empty(ctx, {T * C / 2});
    CudaTensor dx16b = CudaTensor::empty(ctx, {T * C / 2}), dwl = CudaTensor::empty(ctx, {C, K});
    for (int fused = 1; fused >= 0; --fused) {
      causal_conv1d_cuda_set_l2norm_fused(fused);
      CudaTensor& out = fused ? dx16 : dx16b;
      const auto bwd = [&] {
        HLM_CUDA_CHECK(cudaMemcpyAsync(dyn.raw(), dy.raw(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
        causal_conv1d_l2norm_backward_bf16_dx_cuda(static_cast<__nv_bfloat16*>(out.raw()), dwl.data<float>(),
                                                   dyn.data<float>(), y.data<float>(), x.data<float>(),
                                                   w.data<float>(), cu.data<int64_t>(), p, 128, eps, ws.raw(),
                                                   ws_bytes, ctx.stream());
      };
      us[fused] = 1000.0 * median_ms(ctx.stream(), bwd, 3, 20, flush_l2);
    }
    causal_conv1d_cuda_set_l2norm_fused(-1);
    std::printf("conv_bwd+l2norm heads of 128, bf16 dx (with a copy of dy each): fused %.1f us, two launches %.1f us "
                "(%.2fx); dx bit-identical: %s\n",
                us[1], us[0], us[0] / us[1], same_bytes(dx16.raw(), dx16b.raw(), bytes / 2) ? "yes" : "NO");
  }
  // The two paths must agree bit for bit (causal_conv1d_cuda.h).
  const auto bits_equal = [](const std::vector<float>& a, const float* b) {
    return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
  };
  const auto download = [&](const CudaTensor& t) {
    std::vector<float> h(static_cast<size_t>(t.numel()));
    HLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
    HLM_CUDA_CHECK(cudaMemcpy(h.data(), t.raw(), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  };
  const std::vector<float> ya = download(y), y1a = download(y1), dxa = download(dx), dx1a = download(dx1);
  const std::vector<float> dwa = download(dw), dw1a = download(dw1);
  std::printf("conv paths bit-identical: y %s  dx %s  dw %s\n", bits_equal(ya, y1a.data() + 1) ? "yes" : "NO",
              bits_equal(dxa, dx1a.data() + 1) ? "yes" : "NO", bits_equal(dwa, dw1a.data()) ? "yes" : "NO");
  std::printf("conv per 4B distillation step (324 fwd + 162 bwd calls): %.1f ms (fwd %.1f + bwd %.1f; trace s20: "
              "18.7 + 34.4 ms)\n",
              (324 * fwd_us[0] + 162 * bwd_us[0]) / 1000.0, 324 * fwd_us[0] / 1000.0, 162 * bwd_us[0] / 1000.0);
}

}  // namespace

int main(int argc, char** argv) {
  bool gdn = false, attn = false, engines = false, decode = false, lmhead = false, adamw8 = false, conv = false,
       gemv = false, attn_decode = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "gdn") == 0) gdn = true;
    else if (std::strcmp(argv[i], "attn") == 0) attn = true;
    else if (std::strcmp(argv[i], "attn_engines") == 0) engines = true;
    else if (std::strcmp(argv[i], "decode") == 0) decode = true;
    else if (std::strcmp(argv[i], "lmhead") == 0) lmhead = true;
    else if (std::strcmp(argv[i], "adamw8") == 0) adamw8 = true;
    else if (std::strcmp(argv[i], "conv") == 0) conv = true;
    else if (std::strcmp(argv[i], "gemv") == 0) gemv = true;
    else if (std::strcmp(argv[i], "attn_decode") == 0) attn_decode = true;
    else if (std::strcmp(argv[i], "--chunked-only") == 0) g_chunked_only = true;
    else if (std::strcmp(argv[i], "--d-out-ones") == 0) g_dout_ones = true;
    else if (std::strcmp(argv[i], "--shapes") == 0 && i + 1 < argc && parse_shapes(argv[i + 1], g_shapes)) ++i;
    else {
      const bool with_value = std::strcmp(argv[i], "--shapes") == 0 && i + 1 < argc;
      std::fprintf(stderr, "bench_cuda_kernels: cannot use '%s%s%s'\n", argv[i], with_value ? " " : "",
                   with_value ? argv[i + 1] : "");
      std::fprintf(stderr, "usage: bench_cuda_kernels [gdn] [attn] [attn_engines] [decode] [lmhead] [adamw8] [conv] [gemv] "
                           "[attn_decode] [--shapes BxT,...] [--chunked-only] [--d-out-ones]\n"
                           "  --shapes takes 8x1024, 2x4096 and/or 1x16384, e.g. --shapes 1x16384\n");
      return 2;
    }
  }
  if (!(gdn || attn || engines || decode || lmhead || adamw8 || conv || gemv || attn_decode))  // none named: all
    gdn = attn = engines = decode = lmhead = adamw8 = conv = gemv = attn_decode = true;
  if (!cuda_available()) {
    std::fprintf(stderr, "bench_cuda_kernels: no usable GPU (%s)\n", cuda_unavailable_reason().c_str());
    return 2;
  }
  CudaContext& ctx = cuda_context();
  if (gdn) bench_gdn(ctx);
  if (attn) {
    bench_attention_dtype<__nv_bfloat16>(ctx, "bf16", true);
    bench_attention_dtype<float>(ctx, "f32 ", false);
  }
  if (engines) bench_attention_engines(ctx);
  if (decode) bench_decode(ctx);
  if (lmhead)
    for (const int64_t H : {int64_t{1024}, int64_t{2560}}) bench_lm_head_kl(ctx, H);
  if (adamw8) bench_adamw8(ctx);
  if (conv) bench_conv(ctx);
  if (gemv) bench_gemv(ctx);
  if (attn_decode) bench_attn_decode(ctx);
  return 0;
}
