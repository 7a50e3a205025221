// A Qwen3-30B-A3B-shaped routed-expert layer's forward on CUDA (layers/cuda/moe_layer_cuda.h, bf16 compute mode):
// hidden 2048, 128 experts, top-8 renormalised, expert width 768, no shared expert; T tokens of N(0, 1) activations,
// router N(0, 0.02) (so routing spreads over the experts as a trained router's roughly does) and expert weights
// N(0, 0.02) in bf16. Prints the median ms of the whole layer (router GEMM, routing, dispatch, gather, both grouped
// GEMMs, SwiGLU, combine) and of the gate/up grouped GEMM alone, with the expert FLOPs' rate. Compare with
// bench/moe_hf_reference.py (HF transformers' Qwen3MoeSparseMoeBlock, same shape) run in the same device call.
// Usage: bench_moe_layer [T ...]   (default 1 128 4096 16384)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_query.h"
#include "bench_timing.h"
#include "layers/cuda/moe_layer_cuda.h"
#include "ops/cast/cast_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/moe_dispatch/moe_dispatch_cuda.h"
#include "ops/moe_dispatch/moe_grouped_gemm_cuda.h"

using namespace hlm;

namespace {

constexpr int64_t kH = 2048, kE = 128, kK = 8, kF = 768;

// A device tensor of n normal values · scale: one host block of `block` values, copied over n (timing only needs
// realistic magnitudes, not distinct experts).
CudaTensor normal_device(CudaContext& ctx, int64_t n, float scale, DType dtype, uint64_t seed) {
  const int64_t block = std::min<int64_t>(n, int64_t{1} << 22);
  std::vector<float> host(static_cast<size_t>(block));
  rng_fill_normal(host.data(), static_cast<uint64_t>(block), 0.0f, scale, seed, 1);
  CudaTensor f32 = CudaTensor::empty(ctx, {block});
  cuda_copy_to_device(ctx, f32.raw(), host.data(), host.size() * sizeof(float));
  CudaTensor out = CudaTensor::empty(ctx, {n}, dtype);
  for (int64_t at = 0; at < n; at += block) {
    const int64_t len = std::min(block, n - at);
    if (dtype == DType::BF16)
      cast_f32_to_bf16_cuda(out.data<__nv_bfloat16>() + at, f32.data<float>(), len, ctx.stream());
    else
      cuda_copy_device(ctx, out.data<float>() + at, f32.data<float>(), sizeof(float) * static_cast<size_t>(len));
  }
  HLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens;
  for (int i = 1; i < argc; ++i) tokens.push_back(std::atoll(argv[i]));
  if (tokens.empty()) tokens = {1, 128, 4096, 16384};
  CudaContext& ctx = cuda_context();
  ctx.make_current();
  CudaMoeWeights w;
  w.dims = {kE, kK, true};
  w.hidden = kH;
  w.width = kF;
  w.router = normal_device(ctx, kE * kH, 0.02f, DType::F32, 3);
  w.gate_up.weight_bf16 = normal_device(ctx, kE * 2 * kF * kH, 0.02f, DType::BF16, 4);
  w.gate_up.out_features = kE * 2 * kF;
  w.gate_up.in_features = kH;
  w.down.weight_bf16 = normal_device(ctx, kE * kH * kF, 0.02f, DType::BF16, 5);
  w.down.out_features = kE * kH;
  w.down.in_features = kF;
  std::printf("bench_moe_layer: Qwen3-30B-A3B MoE layer shape: hidden %lld, %lld experts, top-%lld (norm_topk_prob), "
              "expert width %lld; bf16 experts, fp32 router; device %s\n",
              static_cast<long long>(kH), static_cast<long long>(kE), static_cast<long long>(kK),
              static_cast<long long>(kF), cuda_devices().empty() ? "?" : cuda_devices()[0].name.c_str());
  for (const int64_t T : tokens) {
    CudaTensor x = normal_device(ctx, T * kH, 1.0f, DType::F32, 6);
    CudaTensor out = CudaTensor::empty(ctx, {T, kH});
    const double ms = bench::median_ms(
        ctx.stream(), [&] { moe_layer_forward_cuda(ctx, out.data<float>(), x.data<float>(), w, T); }, 3, 20);
    // The gate/up grouped GEMM alone, on this T's real routing (dispatch once, untimed).
    const int64_t R = T * kK;
    CudaTensor logits = CudaTensor::empty(ctx, {T, kE}), expert = CudaTensor::empty(ctx, {R}, DType::I32),
               weight = CudaTensor::empty(ctx, {R}), counts = CudaTensor::empty(ctx, {kE}, DType::I32),
               offsets = CudaTensor::empty(ctx, {kE + 1}, DType::I32), perm = CudaTensor::empty(ctx, {R}, DType::I32),
               slot = CudaTensor::empty(ctx, {R}, DType::I32), xs = CudaTensor::empty(ctx, {R, kH}, DType::BF16),
               gu = CudaTensor::empty(ctx, {R, 2 * kF});
    matmul_forward_cuda(ctx.blaslt(), logits.data<float>(), x.data<float>(), w.router.data<float>(), nullptr,
                        {T, kE, kH});
    moe_route_cuda(expert.data<int32_t>(), weight.data<float>(), nullptr, logits.data<float>(), T, kE, kK, true,
                   ctx.stream());
    moe_dispatch_cuda(counts.data<int32_t>(), offsets.data<int32_t>(), perm.data<int32_t>(), slot.data<int32_t>(),
                      expert.data<int32_t>(), T, kK, kE, ctx.stream());
    moe_gather_rows_bf16_cuda(xs.data<__nv_bfloat16>(), x.data<float>(), perm.data<int32_t>(), T, kK, kH,
                              ctx.stream());
    const double gemm_ms = bench::median_ms(
        ctx.stream(),
        [&] {
          moe_grouped_gemm_bf16_cuda(gu.data<float>(), xs.data<__nv_bfloat16>(),
                                     w.gate_up.weight_bf16.data<__nv_bfloat16>(), offsets.data<int32_t>(), kE, R,
                                     2 * kF, kH, ctx.stream());
        },
        3, 20);
    std::vector<int32_t> c(static_cast<size_t>(kE));
    HLM_CUDA_CHECK(cudaMemcpy(c.data(), counts.raw(), c.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    int32_t used = 0, most = 0;
    for (const int32_t n : c) {
      used += n > 0 ? 1 : 0;
      most = std::max(most, n);
    }
    const double expert_flops = 2.0 * static_cast<double>(R) * (kH * 2 * kF + kF * kH);
    const double gu_flops = 2.0 * static_cast<double>(R) * kH * 2 * kF;
    std::printf("hlm T=%lld: layer %.3f ms (%.1f TFLOP/s on the expert FLOPs), gate_up grouped GEMM %.3f ms "
                "(%.1f TFLOP/s); experts used %d of %lld, busiest %d rows\n",
                static_cast<long long>(T), ms, expert_flops / ms / 1e9, gemm_ms, gu_flops / gemm_ms / 1e9, used,
                static_cast<long long>(kE), most);
  }
  return 0;
}
