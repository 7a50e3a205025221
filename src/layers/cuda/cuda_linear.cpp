// CudaLinear: upload and forward (contract in cuda_linear.h).
#include "layers/cuda/cuda_linear.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "ops/cast/cast_cuda.h"
#include "ops/matmul/gemv_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/residual/residual_cuda.h"

namespace hlm {

CudaTensor cuda_upload_f32(CudaContext& ctx, const Tensor& host, const char* name) {
  HLM_CHECK_INPUT(host.defined() && host.dtype() == DType::F32 && host.is_contiguous(), "tensor ", name,
                  " must be contiguous f32 to upload to the GPU");
  return cuda_upload(ctx, host);
}

CudaTensor cuda_upload_f32_sized(CudaContext& ctx, const Tensor& host, int64_t n, const char* name) {
  HLM_CHECK_INPUT(host.defined() && host.numel() == n, "tensor ", name, " must have ", n, " entries");
  return cuda_upload_f32(ctx, host, name);
}

CudaLinear cuda_upload_linear(CudaContext& ctx, const Linear& host, const char* name) {
  HLM_CHECK_INPUT(host.weight.defined() && host.weight.rank() == 2, "linear ", name, " has no 2-d weight");
  CudaLinear l;
  l.weight = cuda_upload_f32(ctx, host.weight, name);
  l.out_features = host.out_features();
  l.in_features = host.in_features();
  if (host.bias.defined()) {
    HLM_CHECK_INPUT(host.bias.numel() == l.out_features, "linear ", name, " bias has ", host.bias.numel(),
                    " entries, expected ", l.out_features);
    l.bias = cuda_upload_f32(ctx, host.bias, name);
    l.has_bias = true;
  }
  return l;
}

CudaTensor cuda_round_bf16(CudaContext& ctx, const float* src, int64_t n) {
  CudaTensor t = CudaTensor::empty(ctx, {n > 0 ? n : 1}, DType::BF16);
  cast_f32_to_bf16_cuda(t.data<__nv_bfloat16>(), src, n, ctx.stream());
  return t;
}

CudaTensor cuda_round_bf16(CudaContext& ctx, const CudaTensor& src) {
  CudaTensor t = CudaTensor::empty(ctx, src.shape(), DType::BF16);
  if (src.numel() > 0) cast_f32_to_bf16_cuda(t.data<__nv_bfloat16>(), src.data<float>(), src.numel(), ctx.stream());
  return t;
}

void cuda_linear_set_bf16(CudaContext& ctx, CudaLinear& layer, bool on) {
  if (!on) {
    layer.weight_bf16 = CudaTensor();
    return;
  }
  if (layer.weight_bf16.raw() == nullptr || layer.weight_bf16.numel() != layer.weight.numel())
    layer.weight_bf16 = CudaTensor::empty(ctx, layer.weight.shape(), DType::BF16);
  cuda_linear_refresh_bf16(ctx, layer);
}

void cuda_linear_refresh_bf16(CudaContext& ctx, CudaLinear& layer) {
  if (layer.weight_bf16.raw() == nullptr) return;
  cast_f32_to_bf16_cuda(layer.weight_bf16.data<__nv_bfloat16>(), layer.weight.data<float>(), layer.weight.numel(),
                        ctx.stream());
}

bool cuda_linear_is_bf16(const CudaLinear& layer) { return layer.weight_bf16.raw() != nullptr; }

CudaLinearInput cuda_linear_input(const CudaTensor& f32, const CudaTensor& bf16) {
  CudaLinearInput in;
  if (f32.raw() != nullptr) in.f32 = f32.data<float>();
  if (bf16.raw() != nullptr) in.bf16 = bf16.data<__nv_bfloat16>();
  return in;
}

void cuda_linear_settle(CudaContext& ctx, const CudaLinearInput& x) {
  if (x.norm == nullptr || x.norm->issued) return;
  gemv_norm_launches_cuda(x.norm->op, x.norm->rows, x.norm->dim, ctx.stream());
  x.norm->issued = true;
}

CudaLinearInput cuda_linear_round_input(CudaContext& ctx, CudaTensor& rounded, const CudaLinearInput& x,
                                        const CudaLinear& reader, int64_t rows) {
  cuda_linear_settle(ctx, x);
  if (x.bf16 != nullptr || !cuda_linear_is_bf16(reader)) return x;
  HLM_CHECK(x.f32 != nullptr || rows == 0, "linear input: neither an fp32 nor a bf16 tensor");
  rounded = cuda_round_bf16(ctx, x.f32, rows * reader.in_features);
  return {x.f32, rounded.data<__nv_bfloat16>()};
}

namespace {

// Rows up to which the GEMV is taken: 1 by default (H200, session 11: at 1 row it beat cuBLASLt, 4.88 → 3.70 ms per
// Qwen3-4B decode step; at 4 rows the first version lost, 5.23 → 7.23 ms). HLM_GEMV=off (or 0) never, =N up to N.
int64_t gemv_max_rows_taken() {
  static const int64_t max_rows = [] {
    const char* v = std::getenv("HLM_GEMV");
    if (v == nullptr || std::string(v).empty()) return int64_t{1};
    if (std::string(v) == "off") return int64_t{0};
    return std::clamp<int64_t>(std::atoll(v), 0, gemv_max_rows());
  }();
  return max_rows;
}

// The gate/up SwiGLU GEMV fold (cuda_linear.h), and the launches queued so far.
OverridableSwitch g_swiglu_gemv{"HLM_GATE_UP_SWIGLU", true};
std::atomic<int64_t> g_swiglu_gemv_launches{0};

std::atomic<int64_t> g_prologue_norms{0};  // cuda_linear_prologue_norms

// For the GEMV about to read x: x's deferred norm, taken (marked issued and counted) when the GEMV can compute it in
// its prologue (not queued yet, the shape it was made for, gemv_norm_supported); otherwise x's norm is settled here
// (launched, if any) and nullptr returned.
const GemvNorm* take_prologue_norm(CudaContext& ctx, const CudaLinearInput& x, int64_t rows, int64_t K) {
  if (x.norm == nullptr || x.norm->issued) return nullptr;
  if (x.norm->rows != rows || x.norm->dim != K || !gemv_norm_supported(rows, K, x.norm->op)) {
    cuda_linear_settle(ctx, x);
    return nullptr;
  }
  x.norm->issued = true;
  ++g_prologue_norms;
  return &x.norm->op;
}

// The small-row GEMV for these outputs, when it applies (see cuda_linear_forward_group); false: not launched.
bool try_gemv(CudaContext& ctx, std::span<const CudaLinearOut> outs, const CudaLinearInput& x, int64_t rows) {
  const int64_t max_rows = gemv_max_rows_taken();
  if (rows < 1 || rows > max_rows || outs.empty() ||
      outs.size() > static_cast<size_t>(gemv_max_outputs()))
    return false;
  if (x.f32 == nullptr && x.bf16 == nullptr) return false;
  GemvOutput g[gemv_max_outputs()];
  const int64_t K = outs[0].layer->in_features;
  for (size_t i = 0; i < outs.size(); ++i) {
    const CudaLinear& l = *outs[i].layer;
    if (!cuda_linear_is_bf16(l) || l.in_features != K) return false;
    g[i] = GemvOutput{l.weight_bf16.data<__nv_bfloat16>(), l.has_bias ? l.bias.data<float>() : nullptr, outs[i].y,
                      l.out_features};
  }
  const int n = static_cast<int>(outs.size());
  if (!gemv_supported(rows, K, g, n)) return false;
  const GemvNorm* norm = take_prologue_norm(ctx, x, rows, K);
  gemv_bf16_cuda(g, n, x.bf16 != nullptr ? nullptr : x.f32, x.bf16, rows, K, ctx.stream(), norm);
  return true;
}

}  // namespace

bool cuda_linear_swiglu_gemv_enabled() { return g_swiglu_gemv.on(); }

int64_t cuda_linear_prologue_norms() { return g_prologue_norms.load(); }

void cuda_linear_set_swiglu_gemv(bool on) { g_swiglu_gemv.set(on ? 1 : 0); }

bool cuda_linear_try_swiglu_gemv(CudaContext& ctx, float* h_f32, __nv_bfloat16* h_bf16, const CudaLinearInput& x,
                                 const CudaLinear& gate, const CudaLinear& up, int64_t rows) {
  HLM_CHECK((h_f32 != nullptr) != (h_bf16 != nullptr), "swiglu gemv: exactly one output");
  if (!cuda_linear_swiglu_gemv_enabled() || rows < 1 || rows > gemv_max_rows_taken()) return false;
  if (x.f32 == nullptr && x.bf16 == nullptr) return false;
  if (!cuda_linear_is_bf16(gate) || !cuda_linear_is_bf16(up) || gate.in_features != up.in_features) return false;
  const GemvOutput g{gate.weight_bf16.data<__nv_bfloat16>(), gate.has_bias ? gate.bias.data<float>() : nullptr,
                     nullptr, gate.out_features};
  const GemvOutput u{up.weight_bf16.data<__nv_bfloat16>(), up.has_bias ? up.bias.data<float>() : nullptr, nullptr,
                     up.out_features};
  const int64_t K = gate.in_features;
  if (!gemv_swiglu_supported(rows, K, g, u)) return false;
  gemv_bf16_swiglu_cuda(g, u, h_f32, h_bf16, x.bf16 != nullptr ? nullptr : x.f32, x.bf16, rows, K, ctx.stream(),
                        take_prologue_norm(ctx, x, rows, K));
  g_swiglu_gemv_launches.fetch_add(1);
  return true;
}

int64_t cuda_linear_swiglu_gemv_launches() { return g_swiglu_gemv_launches.load(); }

void cuda_linear_forward_group(CudaContext& ctx, std::span<const CudaLinearOut> outs, const CudaLinearInput& x,
                               int64_t rows) {
  if (outs.empty() || try_gemv(ctx, outs, x, rows)) return;
  CudaTensor rounded;  // (cuda_linear_round_input settles x's norm)
  const CudaLinearInput in = cuda_linear_round_input(ctx, rounded, x, *outs[0].layer, rows);
  for (const CudaLinearOut& o : outs) cuda_linear_forward(ctx, o.y, in, *o.layer, rows);
}

void cuda_linear_forward(CudaContext& ctx, float* y, const CudaLinearInput& x, const CudaLinear& layer, int64_t rows) {
  // (try_gemv settles x or takes its norm; the other paths read x after cuda_linear_round_input's or this settle)
  const float* bias = layer.has_bias ? layer.bias.data<float>() : nullptr;
  const MatmulCudaParams p{rows, layer.out_features, layer.in_features};
  if (cuda_linear_is_bf16(layer)) {
    const CudaLinearOut one{y, &layer};
    if (try_gemv(ctx, std::span<const CudaLinearOut>(&one, 1), x, rows)) return;
    CudaTensor scratch;  // x rounded here when the caller did not
    const CudaLinearInput in = cuda_linear_round_input(ctx, scratch, x, layer, rows);
    matmul_forward_mixed_cuda(ctx.blaslt(), y, in.bf16, layer.weight_bf16.data<__nv_bfloat16>(), bias, p);
    return;
  }
  HLM_CHECK(x.f32 != nullptr || rows == 0, "linear forward: the fp32 mode needs an fp32 input");
  cuda_linear_settle(ctx, x);
  matmul_forward_cuda(ctx.blaslt(), y, x.f32, layer.weight.data<float>(), bias, p);
}

void cuda_linear_forward_bf16_out(CudaContext& ctx, __nv_bfloat16* y16, const CudaLinearInput& x,
                                  const CudaLinear& layer, int64_t rows) {
  HLM_CHECK(cuda_linear_is_bf16(layer) && !layer.has_bias,
            "linear forward with a bf16 output: needs the bf16 mode and no bias");
  CudaTensor scratch;  // x rounded here when the caller did not
  const CudaLinearInput in = cuda_linear_round_input(ctx, scratch, x, layer, rows);
  matmul_forward_cuda(ctx.blaslt(), y16, in.bf16, layer.weight_bf16.data<__nv_bfloat16>(), nullptr,
                      MatmulCudaParams{rows, layer.out_features, layer.in_features});
}

bool cuda_linear_gemv_may_take(int64_t rows) { return rows >= 1 && rows <= gemv_max_rows_taken(); }

void cuda_linear_forward(CudaContext& ctx, float* y, const float* x, const CudaLinear& layer, int64_t rows) {
  cuda_linear_forward(ctx, y, CudaLinearInput{x, nullptr}, layer, rows);
}

namespace {
OverridableSwitch g_dw_bf16_overwrite{"HLM_DW_BF16_OVERWRITE", true};
OverridableSwitch g_dw_bf16_epilogue{"HLM_DW_BF16_EPILOGUE", true};  // on since session 38 (cuda_linear.h)
std::atomic<int64_t> g_dw_overwrites{0};
}  // namespace

bool cuda_linear_dw_bf16_epilogue() { return g_dw_bf16_epilogue.on(); }
void cuda_linear_set_dw_bf16_epilogue(int on) { g_dw_bf16_epilogue.set(on); }

bool cuda_linear_dw_bf16_overwrite() { return g_dw_bf16_overwrite.on(); }
void cuda_linear_set_dw_bf16_overwrite(int on) { g_dw_bf16_overwrite.set(on); }
int64_t cuda_linear_dw_overwrites() { return g_dw_overwrites.load(); }

void cuda_linear_backward(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy, const CudaLinearInput& x,
                          const CudaLinear& layer, int64_t rows, bool accumulate_dx) {
  HLM_CHECK(grad.out_features == layer.out_features && grad.in_features == layer.in_features &&
                grad.has_bias == layer.has_bias,
            "linear backward: the gradient holder does not match the layer");
  float* dbias = layer.has_bias ? grad.bias.data<float>() : nullptr;
  const MatmulCudaParams p{rows, layer.out_features, layer.in_features};
  if (cuda_linear_is_bf16(layer)) {
    // dy first, then x (when not given): the order of allocations and casts of the one-input form.
    const CudaTensor dy16 = cuda_round_bf16(ctx, dy, rows * layer.out_features);
    cuda_linear_backward_bf16_dy(ctx, dx, grad, dy16.data<__nv_bfloat16>(), x, layer, rows, accumulate_dx);
    return;
  }
  HLM_CHECK(x.f32 != nullptr || rows == 0, "linear backward: the fp32 mode needs an fp32 input");
  cuda_linear_settle(ctx, x);
  matmul_backward_cuda(ctx.blaslt(), dx, grad.weight.data<float>(), dbias, dy, x.f32, layer.weight.data<float>(), p,
                       accumulate_dx);
  grad.weight_zeroed = false;
}

void cuda_linear_backward_bf16_dy(CudaContext& ctx, float* dx, CudaLinear& grad, const __nv_bfloat16* dy16,
                                  const CudaLinearInput& x, const CudaLinear& layer, int64_t rows, bool accumulate_dx) {
  HLM_CHECK(cuda_linear_is_bf16(layer), "linear backward: a bf16 dy needs the bf16 compute mode");
  HLM_CHECK(grad.out_features == layer.out_features && grad.in_features == layer.in_features &&
                grad.has_bias == layer.has_bias,
            "linear backward: the gradient holder does not match the layer");
  float* dbias = layer.has_bias ? grad.bias.data<float>() : nullptr;
  const MatmulCudaParams p{rows, layer.out_features, layer.in_features};
  CudaTensor scratch;
  const CudaLinearInput in = cuda_linear_round_input(ctx, scratch, x, layer, rows);
  if (grad.weight.dtype() == DType::BF16) {  // a bf16 gradient holder (the lean plan: cuda_hold_bf16_linear_grads)
    // A holder known to hold zeros: the product's bf16 rounding written by the GEMM (nothing to add). Otherwise the
    // product in fp32 scratch, then added and rounded to bf16 once (matmul_cuda.h); the block goes back to the
    // allocator's cache on return, so one block per linear shape serves every call. HLM_DW_BF16_EPILOGUE=on:
    // cuBLASLt's bf16 output with beta 1 into dw itself, no scratch (not one rounding; cuda_linear.h).
    if (grad.weight_zeroed && cuda_linear_dw_bf16_overwrite()) {
      matmul_backward_mixed_bf16_overwrite_cuda(ctx.blaslt(), dx, grad.weight.data<__nv_bfloat16>(), dbias, dy16,
                                                in.bf16, layer.weight_bf16.data<__nv_bfloat16>(), p, accumulate_dx);
      g_dw_overwrites.fetch_add(1);
    } else if (cuda_linear_dw_bf16_epilogue()) {
      matmul_backward_mixed_bf16_epilogue_cuda(ctx.blaslt(), dx, grad.weight.data<__nv_bfloat16>(), dbias, dy16,
                                               in.bf16, layer.weight_bf16.data<__nv_bfloat16>(), p, accumulate_dx);
    } else {
      CudaTensor product = CudaTensor::empty(ctx, {layer.out_features * layer.in_features});
      matmul_backward_mixed_cuda(ctx.blaslt(), dx, grad.weight.data<__nv_bfloat16>(), product.data<float>(), dbias,
                                 dy16, in.bf16, layer.weight_bf16.data<__nv_bfloat16>(), p, accumulate_dx);
    }
  } else {
    matmul_backward_mixed_cuda(ctx.blaslt(), dx, grad.weight.data<float>(), dbias, dy16, in.bf16,
                               layer.weight_bf16.data<__nv_bfloat16>(), p, accumulate_dx);
  }
  grad.weight_zeroed = false;
}

void cuda_linear_backward_bf16_dx(CudaContext& ctx, __nv_bfloat16* dx16, CudaLinear& grad, const float* dy,
                                  const CudaLinearInput& x, const CudaLinear& layer, int64_t rows,
                                  const __nv_bfloat16* dy16) {
  HLM_CHECK(cuda_linear_is_bf16(layer), "linear backward: a bf16 dx needs the bf16 compute mode");
  const MatmulCudaParams p{rows, layer.out_features, layer.in_features};
  CudaTensor rounded;
  if (dy16 == nullptr) {
    rounded = cuda_round_bf16(ctx, dy, rows * layer.out_features);
    dy16 = rounded.data<__nv_bfloat16>();
  }
  // dx alone (no dw, no dbias: nullptr = not wanted), then the weight gradient through the usual holder paths.
  matmul_backward_cuda(ctx.blaslt(), dx16, nullptr, nullptr, dy16, nullptr, layer.weight_bf16.data<__nv_bfloat16>(), p,
                       /*accumulate_dx=*/false);
  cuda_linear_backward_bf16_dy(ctx, nullptr, grad, dy16, x, layer, rows, false);
}

void cuda_linear_backward_dy16(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy,
                               const __nv_bfloat16* dy16, const CudaLinearInput& x, const CudaLinear& layer,
                               int64_t rows, bool accumulate_dx) {
  if (dy16 != nullptr && cuda_linear_is_bf16(layer))
    cuda_linear_backward_bf16_dy(ctx, dx, grad, dy16, x, layer, rows, accumulate_dx);
  else
    cuda_linear_backward(ctx, dx, grad, dy, x, layer, rows, accumulate_dx);
}

void cuda_linear_backward(CudaContext& ctx, float* dx, CudaLinear& grad, const float* dy, const float* x,
                          const CudaLinear& layer, int64_t rows, bool accumulate_dx) {
  cuda_linear_backward(ctx, dx, grad, dy, CudaLinearInput{x, nullptr}, layer, rows, accumulate_dx);
}

CudaTensor cuda_scratch_bytes(CudaContext& ctx, size_t bytes) {
  // Whole 4-byte words, at least one (an empty tensor has no storage).
  const int64_t words = static_cast<int64_t>((bytes + 3) / 4);
  return CudaTensor::empty(ctx, {words > 0 ? words : 1}, DType::I32);
}

void cuda_copy_device(CudaContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  HLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
}

void cuda_add_into(CudaContext& ctx, float* dst, const float* src, int64_t n) {
  // x += 1·delta: the product 1·delta is exact, so this is the CPU's plain float +=.
  residual_add_forward_cuda(dst, src, 1.0f, n, ctx.stream());
}

}  // namespace hlm
