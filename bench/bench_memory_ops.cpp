// Timings of the memory-bound CUDA ops of a distillation step against the bandwidth floor: for each launch, the time,
// the bytes a perfect kernel must move (every input read once + every output written once; scratch, statistics
// and re-reads are the kernel's own cost and not counted), the achieved GB/s over those bytes, and the fraction of
// 4.27 TB/s (the device-to-device copy bandwidth measured on the H200).
//   conv : causal_conv1d (ops/causal_conv1d/causal_conv1d_cuda.h), T = 8192 tokens (8 packed sequences × 1024),
//          C = 2048, K = 4, SiLU, no state, f32.
//            forward  bytes = x + y (T·C·4 each) + w (C·K·4)
//            backward (dx and dw, no d_state) bytes = dy + x + dx (T·C·4 each) + w + dw (C·K·4 each)
//   norms: rmsnorm (ops/rmsnorm/rmsnorm_cuda.h) forward and backward at [8192, 1024] and [131072, 128];
//          l2norm (ops/l2norm/l2norm_cuda.h) and gated_rmsnorm (ops/gated_rmsnorm/gated_rmsnorm_cuda.h) forward and
//          backward at [131072, 128], f32 ([rows, dim], R·D elements of 4 bytes per activation tensor).
//            rmsnorm  fwd: x, weight → out                 bytes = 2·R·D·4 + D·4
//                     bwd: d_out, x, weight → dx, dweight  bytes = 3·R·D·4 + 2·D·4
//            l2norm   fwd: x → y                           bytes = 2·R·D·4
//                     bwd: dy, x → dx                      bytes = 3·R·D·4
//            gated    fwd: x, z, w → y                     bytes = 3·R·D·4 + D·4
//                     bwd: dy, x, z, w → dx, dz, dw        bytes = 5·R·D·4 + 2·D·4
// Each figure is the median of 20 timed runs after 3 warm-ups, measured with CUDA events on the context's stream;
// L2 is flushed (a 256 MiB memset, outside the timed region) before every run, so inputs come from HBM as they do
// in a training step. Inputs are random normal; workspaces come from the ops' workspace-bytes functions.
// Prints one line per measurement: `name shape  us  MB  GB/s  fraction-of-4.27TB/s`.
// Usage: bench_memory_ops [conv] [norms]   (all when none is given)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_query.h"
#include "bench_timing.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/gated_rmsnorm/gated_rmsnorm_cuda.h"
#include "ops/l2norm/l2norm_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

using namespace hlm;
using namespace hlm::bench;  // median_ms, normal, upload, upload_i64

namespace {

constexpr double kPeakBytesPerSecond = 4.27e12;  // device copy bandwidth measured on the H200
constexpr size_t kFlushBytes = size_t{256} << 20;  // > the H200's 50 MiB L2

// Median microseconds of `fn` over `iters` runs on `stream`, after `warmup` untimed runs; `flush` runs (untimed)
// before each timed run.
double time_us(cudaStream_t stream, const std::function<void()>& fn, const std::function<void()>& flush,
               int warmup = 3, int iters = 20) {
  return 1000.0 * median_ms(stream, fn, warmup, iters, flush);
}

CudaTensor scratch(CudaContext& ctx, size_t bytes) {
  return CudaTensor::empty(ctx, {std::max<int64_t>(1, static_cast<int64_t>((bytes + 3) / 4))});
}

struct Bench {
  CudaContext& ctx;
  CudaTensor flush_buf;
  explicit Bench(CudaContext& c) : ctx(c), flush_buf(scratch(c, kFlushBytes)) {}

  void run(const std::string& name, const std::string& shape, double bytes, const std::function<void()>& fn) {
    const auto flush = [&] { HLM_CUDA_CHECK(cudaMemsetAsync(flush_buf.raw(), 0, kFlushBytes, ctx.stream())); };
    const double us = time_us(ctx.stream(), fn, flush);
    const double gbs = bytes / (us * 1e-6) / 1e9;
    std::printf("%-22s %-28s %9.1f us  %8.1f MB  %7.0f GB/s  %5.1f%% of 4.27 TB/s\n", name.c_str(), shape.c_str(), us,
                bytes / 1e6, gbs, 100.0 * gbs * 1e9 / kPeakBytesPerSecond);
  }
};

void bench_conv(Bench& b) {
  CudaContext& ctx = b.ctx;
  constexpr int64_t B = 8, S = 1024, T = B * S, C = 2048, K = 4;
  std::vector<int64_t> cu(B + 1);
  for (int64_t s = 0; s <= B; ++s) cu[static_cast<size_t>(s)] = s * S;
  const CudaTensor dcu = upload_i64(ctx, cu);
  const CudaTensor x = upload(ctx, normal(static_cast<size_t>(T * C), 1), {T, C});
  const CudaTensor w = upload(ctx, normal(static_cast<size_t>(C * K), 2), {C, K});
  const CudaTensor dy = upload(ctx, normal(static_cast<size_t>(T * C), 3), {T, C});
  CudaTensor y = CudaTensor::empty(ctx, {T, C}), dx = CudaTensor::empty(ctx, {T, C}), dw = CudaTensor::empty(ctx, {C, K});
  const CausalConv1dCudaParams p{T, C, K, B, true};
  const size_t ws_bytes = causal_conv1d_backward_cuda_workspace_bytes(p);
  CudaTensor ws = scratch(ctx, ws_bytes);
  const std::string shape = "T8192(8x1024) C2048 K4 silu";
  const double act = double(T * C) * 4, wb = double(C * K) * 4;
  b.run("conv_fwd", shape, 2 * act + wb, [&] {
    causal_conv1d_forward_cuda(y.data<float>(), nullptr, x.data<float>(), w.data<float>(), nullptr, dcu.data<int64_t>(),
                               p, ctx.stream());
  });
  b.run("conv_bwd (dx, dw)", shape, 3 * act + 2 * wb, [&] {
    causal_conv1d_backward_cuda(dx.data<float>(), dw.data<float>(), nullptr, dy.data<float>(), x.data<float>(),
                                w.data<float>(), nullptr, dcu.data<int64_t>(), p, ws.raw(), ws_bytes, ctx.stream());
  });
}

std::string shape_of(int64_t R, int64_t D) { return "[" + std::to_string(R) + ", " + std::to_string(D) + "]"; }

void bench_rmsnorm(Bench& b, int64_t R, int64_t D) {
  CudaContext& ctx = b.ctx;
  const CudaTensor x = upload(ctx, normal(static_cast<size_t>(R * D), 11), {R, D});
  const CudaTensor d_out = upload(ctx, normal(static_cast<size_t>(R * D), 12), {R, D});
  const CudaTensor weight = upload(ctx, normal(static_cast<size_t>(D), 13), {D});
  CudaTensor out = CudaTensor::empty(ctx, {R, D}), dx = CudaTensor::empty(ctx, {R, D});
  CudaTensor dweight = CudaTensor::empty(ctx, {D});
  HLM_CUDA_CHECK(cudaMemsetAsync(dweight.raw(), 0, static_cast<size_t>(D) * 4, ctx.stream()));
  RmsnormCudaParams p;
  p.rows = R;
  p.dim = D;
  const size_t ws_bytes = rmsnorm_backward_cuda_workspace_bytes(p);
  CudaTensor ws = scratch(ctx, ws_bytes);
  const double act = double(R * D) * 4, vec = double(D) * 4;
  b.run("rmsnorm_fwd", shape_of(R, D), 2 * act + vec, [&] {
    rmsnorm_forward_cuda(out.data<float>(), x.data<float>(), weight.data<float>(), p, ctx.stream());
  });
  b.run("rmsnorm_bwd", shape_of(R, D), 3 * act + 2 * vec, [&] {  // dweight accumulates across runs: timing only
    rmsnorm_backward_cuda(dx.data<float>(), dweight.data<float>(), d_out.data<float>(), x.data<float>(),
                          weight.data<float>(), p, ws.raw(), ws_bytes, ctx.stream());
  });
}

void bench_l2norm(Bench& b, int64_t R, int64_t D) {
  CudaContext& ctx = b.ctx;
  const CudaTensor x = upload(ctx, normal(static_cast<size_t>(R * D), 21), {R, D});
  const CudaTensor dy = upload(ctx, normal(static_cast<size_t>(R * D), 22), {R, D});
  CudaTensor y = CudaTensor::empty(ctx, {R, D}), dx = CudaTensor::empty(ctx, {R, D});
  L2normCudaParams p;
  p.rows = R;
  p.dim = D;
  const double act = double(R * D) * 4;
  b.run("l2norm_fwd", shape_of(R, D), 2 * act,
        [&] { l2norm_forward_cuda(y.data<float>(), x.data<float>(), p, ctx.stream()); });
  b.run("l2norm_bwd", shape_of(R, D), 3 * act,
        [&] { l2norm_backward_cuda(dx.data<float>(), dy.data<float>(), x.data<float>(), p, ctx.stream()); });
}

void bench_gated_rmsnorm(Bench& b, int64_t R, int64_t D) {
  CudaContext& ctx = b.ctx;
  const CudaTensor x = upload(ctx, normal(static_cast<size_t>(R * D), 31), {R, D});
  const CudaTensor z = upload(ctx, normal(static_cast<size_t>(R * D), 32), {R, D});
  const CudaTensor dy = upload(ctx, normal(static_cast<size_t>(R * D), 33), {R, D});
  const CudaTensor w = upload(ctx, normal(static_cast<size_t>(D), 34), {D});
  CudaTensor y = CudaTensor::empty(ctx, {R, D}), dx = CudaTensor::empty(ctx, {R, D});
  CudaTensor dz = CudaTensor::empty(ctx, {R, D}), dw = CudaTensor::empty(ctx, {D});
  GatedRmsnormCudaParams p;
  p.rows = R;
  p.dim = D;
  const size_t ws_bytes = gated_rmsnorm_backward_cuda_workspace_bytes(p);
  CudaTensor ws = scratch(ctx, ws_bytes);
  const double act = double(R * D) * 4, vec = double(D) * 4;
  b.run("gated_rmsnorm_fwd", shape_of(R, D), 3 * act + vec, [&] {
    gated_rmsnorm_forward_cuda(y.data<float>(), x.data<float>(), z.data<float>(), w.data<float>(), p, ctx.stream());
  });
  b.run("gated_rmsnorm_bwd", shape_of(R, D), 5 * act + 2 * vec, [&] {
    gated_rmsnorm_backward_cuda(dx.data<float>(), dz.data<float>(), dw.data<float>(), dy.data<float>(),
                                x.data<float>(), z.data<float>(), w.data<float>(), p, ws.raw(), ws_bytes,
                                ctx.stream());
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_available()) {
    std::fprintf(stderr, "bench_memory_ops: no usable GPU (%s)\n", cuda_unavailable_reason().c_str());
    return 2;
  }
  bool conv = argc == 1, norms = argc == 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "conv") == 0) conv = true;
    else if (std::strcmp(argv[i], "norms") == 0) norms = true;
    else {
      std::fprintf(stderr, "usage: bench_memory_ops [conv] [norms]\n");
      return 2;
    }
  }
  CudaContext& ctx = cuda_context();
  Bench b(ctx);
  if (conv) bench_conv(b);
  if (norms) {
    bench_rmsnorm(b, 8192, 1024);
    bench_rmsnorm(b, 131072, 128);
    bench_l2norm(b, 131072, 128);
    bench_gated_rmsnorm(b, 131072, 128);
  }
  HLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  return 0;
}
