// Chunked LM-head cross-entropy and forward KL on CUDA (contract: lm_head_loss_cuda.h, which follows
// train/lm_head_loss.h). Host loop over row blocks and vocabulary chunks; per tile:
//   matmul_forward_cuda (logits tile [R, C] = h_block · W_chunkᵀ)  ->  lse_update_kernel (one block per row)
// then, per row block, row_finish_* (lse, per-token value); pass 2 recomputes each tile (not when one chunk covers
// the vocabulary: pass 1's tiles are still in the workspace, unchanged, as lse_update only reads them), *_dz_kernel
// turns it into dz (in place, or straight into the bf16 dz operand in the bf16 mode), and matmul_backward_*_cuda
// accumulates dh and dW. A final one-block kernel forms loss / mean / count.
// Workspace (carve()): tiles, per-row statistics of one row block, per-token weights and values (fp64), the count.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"
#include "ops/log_softmax/block_reduce.cuh"
#include "ops/matmul/matmul_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = lm_head_cuda_threads();

// Running log Σ exp of one row over the chunks (the CPU's OnlineLse): max is an exact float value, sum in fp64.
struct RowLse {
  double* max;
  double* sum;
};

// ---- Per-token preparation

// Cross-entropy weights and count (one block): counted = 0 ≤ target < V; weight = token_weight or 1/count on counted
// tokens, 0 otherwise. A target ≥ V sets the flag.
__global__ void __launch_bounds__(kThreads) ce_prepare_kernel(double* weights, int64_t* count_out,
                                                              const int32_t* targets, const float* token_weight,
                                                              int64_t N, int64_t V, int* error_flag) {
  __shared__ double smem[kThreads / 32];
  double count = 0.0;  // exact: N < 2^53
  for (int64_t t = threadIdx.x; t < N; t += kThreads) {
    const int32_t target = targets[t];
    if (target >= 0 && target < V) count += 1.0;
    if (target >= V && error_flag != nullptr) atomicExch(error_flag, 1);
  }
  count = cuda::block_sum_f64<kThreads>(count, smem);
  const double default_weight = count > 0 ? 1.0 / count : 0.0;
  for (int64_t t = threadIdx.x; t < N; t += kThreads) {
    const int32_t target = targets[t];
    const bool counted = target >= 0 && target < V;
    weights[t] = !counted ? 0.0 : (token_weight != nullptr ? static_cast<double>(token_weight[t]) : default_weight);
  }
  if (threadIdx.x == 0) *count_out = static_cast<int64_t>(count);
}

__global__ void kl_prepare_kernel(double* weights, int64_t* count_out, const float* token_weight, int64_t N) {
  const double default_weight = 1.0 / static_cast<double>(N);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < N;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x)
    weights[t] = token_weight != nullptr ? static_cast<double>(token_weight[t]) : default_weight;
  if (blockIdx.x == 0 && threadIdx.x == 0) *count_out = N;
}

// ---- Pass 1

__global__ void init_rows_kernel(double* max_a, double* sum_a, double* max_b, double* sum_b, double* aux, int64_t R) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < R;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    max_a[r] = -INFINITY;
    sum_a[r] = 0.0;
    if (max_b != nullptr) {
      max_b[r] = -INFINITY;
      sum_b[r] = 0.0;
    }
    aux[r] = 0.0;
  }
}

// Folds row r of the logits tile (z = tile · scale, fp32) into the row's running (max, Σ exp). With `targets`, also
// picks up the target logit into target_logit[r] when the target lies in this chunk [c0, c0 + C).
__global__ void __launch_bounds__(kThreads) lse_update_kernel(RowLse acc, const float* tile, int64_t C, float scale,
                                                              const int32_t* targets, int64_t r0, int64_t c0,
                                                              double* target_logit) {
  __shared__ float smem_f[kThreads / 32];
  __shared__ double smem_d[kThreads / 32];
  const int64_t r = blockIdx.x;
  const float* row = tile + r * C;
  const double old_max = acc.max[r];  // read by every thread before the first barrier; thread 0 writes after the last
  const double old_sum = acc.sum[r];
  if (targets != nullptr && threadIdx.x == 0) {
    const int64_t target = targets[r0 + r];
    if (target >= c0 && target < c0 + C) target_logit[r] = static_cast<double>(__fmul_rn(row[target - c0], scale));
  }
  float local_max = -INFINITY;
  bool has_nan = false;
  for (int64_t v = threadIdx.x; v < C; v += kThreads) {
    const float z = __fmul_rn(row[v], scale);
    has_nan |= isnan(z);
    local_max = fmaxf(local_max, z);
  }
  if (__syncthreads_or(has_nan)) {  // NaN anywhere makes the row's sum NaN (the CPU's OnlineLse)
    if (threadIdx.x == 0) acc.sum[r] = cuda::quiet_nan();
    return;
  }
  const float chunk_max = cuda::block_max_f32<kThreads>(local_max, smem_f);
  if (chunk_max == -INFINITY) return;  // every term is exp(-inf) = 0
  const float new_max = static_cast<double>(chunk_max) > old_max ? chunk_max : static_cast<float>(old_max);
  float part = 0.0f;  // ≤ ceil(C / kThreads) terms, each ≤ 1
  for (int64_t v = threadIdx.x; v < C; v += kThreads) part += expf(__fsub_rn(__fmul_rn(row[v], scale), new_max));
  const double chunk_sum = cuda::block_sum_f64<kThreads>(static_cast<double>(part), smem_d);
  if (threadIdx.x == 0) {
    double sum = old_sum;
    if (static_cast<double>(chunk_max) > old_max) sum *= exp(old_max - static_cast<double>(chunk_max));  // 0 at first
    acc.sum[r] = sum + chunk_sum;
    acc.max[r] = static_cast<double>(new_max);
  }
}

// lse = max + log(sum) per row; cross-entropy value per token (0 when ignored, NaN for a target ≥ V).
__global__ void ce_row_finish_kernel(float* ce, double* values, double* lse, const double* max, const double* sum,
                                     const double* target_logit, const int32_t* targets, int64_t r0, int64_t R,
                                     int64_t V) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < R;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    lse[r] = max[r] + log(sum[r]);
    const int32_t target = targets[r0 + r];
    const double value = target < 0 ? 0.0 : (target < V ? lse[r] - target_logit[r] : static_cast<double>(cuda::quiet_nan()));
    ce[r0 + r] = static_cast<float>(value);
    values[r0 + r] = value;
  }
}

__global__ void lse_finish_kernel(double* lse, const double* max, const double* sum, int64_t R) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < R;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    lse[r] = max[r] + log(sum[r]);
}

// ---- Pass 2

// Where a dz value goes: the fp32 tile in place (fp32 mode), or straight into the bf16 operand of the gradient
// products (bf16 mode; dz16 non-null), rounded float first, then bf16 — the same two roundings as writing the fp32
// tile and casting it (cast_f32_to_bf16_cuda), without the fp32 round trip through memory.
__device__ __forceinline__ void store_dz(float* row, __nv_bfloat16* row16, int64_t v, float dz) {
  if (row16 != nullptr)
    row16[v] = __float2bfloat16_rn(dz);
  else
    row[v] = dz;
}

// dz = w · scale · (softmax − onehot) over the tile (w = 0: zeros, whatever the logits), into the tile in place or
// into dz16 [R, C] (store_dz).
__global__ void __launch_bounds__(kThreads) ce_dz_kernel(float* tile, __nv_bfloat16* dz16, int64_t C, float scale,
                                                         double grad_scale, const double* lse, const double* weights,
                                                         const int32_t* targets, int64_t r0, int64_t c0) {
  const int64_t r = blockIdx.x;
  float* row = tile + r * C;
  __nv_bfloat16* row16 = dz16 != nullptr ? dz16 + r * C : nullptr;
  const double w = weights[r0 + r] * grad_scale;
  const int64_t target = targets[r0 + r];
  for (int64_t v = threadIdx.x; v < C; v += kThreads) {
    if (w == 0.0) {
      store_dz(row, row16, v, 0.0f);
      continue;
    }
    const double p = exp(static_cast<double>(__fmul_rn(row[v], scale)) - lse[r]);
    store_dz(row, row16, v, static_cast<float>(w * (p - (c0 + v == target ? 1.0 : 0.0))));
  }
}

// KL terms of row r over the chunk into kl_acc[r] (+=), and with write_dz dz = w · dz_scale · (p_S − p_T)
// (dz_scale = τ² / (τ · divisor_S)) into the student tile in place or into dz16 [R, C] (store_dz). The log
// probabilities, the term p_T·(log p_T − log p_S), the difference p_S − p_T and the sum are fp64; the two exps are
// fp32 (expf of the log probability rounded to f32: relative error ≤ (4 + |log p|)·u, the bound the tests add): the
// fp64 exps made this pass compute-bound (2.0 ms per 2,048 × 151,936 tile on an H200, session 36's trace).
__global__ void __launch_bounds__(kThreads) kl_chunk_kernel(float* tile_s, __nv_bfloat16* dz16, const float* tile_t,
                                                            int64_t ld_t, int64_t C, float scale_s, float scale_t,
                                                            const double* lse_s, const double* lse_t, double* kl_acc,
                                                            const double* weights, double dz_scale, bool write_dz,
                                                            int64_t r0) {
  __shared__ double smem[kThreads / 32];
  const int64_t r = blockIdx.x;
  float* row_s = tile_s + r * C;
  __nv_bfloat16* row16 = dz16 != nullptr ? dz16 + r * C : nullptr;
  const float* row_t = tile_t + r * ld_t;  // ld_t: C, or V for precomputed teacher logits
  const double w = write_dz ? weights[r0 + r] * dz_scale : 0.0;
  double sum = 0.0;
  for (int64_t v = threadIdx.x; v < C; v += kThreads) {
    const double log_p_t = static_cast<double>(__fmul_rn(row_t[v], scale_t)) - lse_t[r];
    const double log_p_s = static_cast<double>(__fmul_rn(row_s[v], scale_s)) - lse_s[r];
    const double p_t = expf(static_cast<float>(log_p_t));
    sum += p_t * (log_p_t - log_p_s);
    if (write_dz) store_dz(row_s, row16, v, static_cast<float>(w * (expf(static_cast<float>(log_p_s)) - p_t)));
  }
  sum = cuda::block_sum_f64<kThreads>(sum, smem);
  if (threadIdx.x == 0) kl_acc[r] += sum;
}

__global__ void kl_row_finish_kernel(float* kl, double* values, const double* kl_acc, int64_t r0, int64_t R) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < R;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    kl[r0 + r] = static_cast<float>(kl_acc[r]);
    values[r0 + r] = kl_acc[r];
  }
}

// loss = factor · Σ_t w_t · value_t, mean = Σ_t value_t / count (0 when count is 0), in fixed-order fp64 (one block).
__global__ void __launch_bounds__(kThreads) loss_finish_kernel(TokenLossCudaResult* result, const double* values,
                                                               const double* weights, const int64_t* count,
                                                               int64_t N, double factor) {
  __shared__ double smem[kThreads / 32];
  double loss = 0.0, sum = 0.0;
  for (int64_t t = threadIdx.x; t < N; t += kThreads) {
    loss += weights[t] * values[t];
    sum += values[t];
  }
  loss = cuda::block_sum_f64<kThreads>(loss, smem);
  sum = cuda::block_sum_f64<kThreads>(sum, smem);
  if (threadIdx.x == 0) {
    const int64_t n = *count;
    result->loss = factor * loss;
    result->mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
    result->count = n;
  }
}

// ---- Host side

void check_head(const LmHeadCuda& head, const char* what) {
  HLM_CHECK_INPUT(head.vocab > 0 && head.hidden > 0, what, " head needs V > 0 and H > 0, got V=", head.vocab,
                  " H=", head.hidden);
  // The fp32 weight is read only without the bf16 one (a bf16-master head has no fp32 weight).
  HLM_CHECK_INPUT(head.weight != nullptr || head.weight_bf16 != nullptr, what, " head weight is null");
  HLM_CHECK((head.weight_bf16 == nullptr) == (head.hidden_bf16 == nullptr), what,
            " head: weight_bf16 and hidden_bf16 must be set together");
  HLM_CHECK_INPUT(std::isfinite(head.divisor) && head.divisor != 0.0, what,
                  " logits divisor must be finite and non-zero, got ", head.divisor);
}

void check_grad(const LmHeadGradCuda* grad) {
  if (grad != nullptr)
    HLM_CHECK_INPUT(grad->d_hidden != nullptr && grad->d_weight != nullptr, "gradient outputs must both be set");
}

// Pieces of the workspace; carve(nullptr, ...) only sizes it.
struct Workspace {
  float* tile_a = nullptr;  // CE logits / KL student   [Rb, Cb]
  float* tile_b = nullptr;  // KL teacher               [Rb, Cb]
  double *max_a = nullptr, *sum_a = nullptr, *lse_a = nullptr;  // [Rb] each
  double *max_b = nullptr, *sum_b = nullptr, *lse_b = nullptr;  // [Rb] each (KL teacher)
  __nv_bfloat16* dz16 = nullptr;  // [Rb, Cb]: dz rounded to bf16 (bf16 compute mode)
  double* aux = nullptr;      // [Rb]: CE target logit, KL running Σ
  double* weights = nullptr;  // [N]
  double* values = nullptr;   // [N]
  int64_t* count = nullptr;   // [1]
  int64_t Rb = 0, Cb = 0;
  size_t bytes = 0;
};

Workspace carve(void* base, int64_t N, int64_t V, const LmHeadCudaChunking& chunking, bool two_heads) {
  Workspace ws;
  ws.Rb = std::max<int64_t>(1, std::min(chunking.row_block, N));
  ws.Cb = std::min(chunking.vocab_chunk, V);
  const size_t tile = cuda::align_up_256(static_cast<size_t>(ws.Rb * ws.Cb) * sizeof(float));
  const size_t rows = cuda::align_up_256(static_cast<size_t>(ws.Rb) * sizeof(double));
  const size_t tokens = cuda::align_up_256(static_cast<size_t>(std::max<int64_t>(N, 1)) * sizeof(double));
  size_t offset = 0;
  auto* b = static_cast<char*>(base);
  const auto take = [&](size_t bytes) -> char* {
    char* p = b != nullptr ? b + offset : nullptr;
    offset += bytes;
    return p;
  };
  ws.tile_a = reinterpret_cast<float*>(take(tile));
  if (two_heads) ws.tile_b = reinterpret_cast<float*>(take(tile));
  ws.dz16 = reinterpret_cast<__nv_bfloat16*>(take(cuda::align_up_256(static_cast<size_t>(ws.Rb * ws.Cb) * 2)));
  ws.max_a = reinterpret_cast<double*>(take(rows));
  ws.sum_a = reinterpret_cast<double*>(take(rows));
  ws.lse_a = reinterpret_cast<double*>(take(rows));
  if (two_heads) {
    ws.max_b = reinterpret_cast<double*>(take(rows));
    ws.sum_b = reinterpret_cast<double*>(take(rows));
    ws.lse_b = reinterpret_cast<double*>(take(rows));
  }
  ws.aux = reinterpret_cast<double*>(take(rows));
  ws.weights = reinterpret_cast<double*>(take(tokens));
  ws.values = reinterpret_cast<double*>(take(tokens));
  ws.count = reinterpret_cast<int64_t*>(take(256));
  ws.bytes = offset;
  return ws;
}

// Logits tile [R, C] (unscaled) of rows r0.. and vocabulary c0.. .
void logits_tile(const CudaBlasLt& lt, float* tile, const float* hidden, const LmHeadCuda& head, int64_t r0,
                 int64_t R, int64_t c0, int64_t C) {
  const int64_t H = head.hidden;
  if (head.weight_bf16 != nullptr) {
    matmul_forward_mixed_cuda(lt, tile, head.hidden_bf16 + r0 * H, head.weight_bf16 + c0 * H, nullptr,
                              MatmulCudaParams{R, C, H});
    return;
  }
  matmul_forward_cuda(lt, tile, hidden + r0 * H, head.weight + c0 * H, nullptr, MatmulCudaParams{R, C, H});
}

// The bf16 destination of dz in the bf16 compute mode, else null (dz stays in the fp32 tile).
__nv_bfloat16* dz16_for(const LmHeadCuda& head, const Workspace& ws) {
  return head.weight_bf16 != nullptr ? ws.dz16 : nullptr;
}

// dh[r0 : r0+R] += dz · W_chunk, dW_chunk += dzᵀ · h[r0 : r0+R]; dz is the fp32 tile, or dz16 in the bf16 mode.
void accumulate_tile_grad(const CudaBlasLt& lt, const LmHeadGradCuda& grad, const float* dz, const float* hidden,
                          const LmHeadCuda& head, int64_t r0, int64_t R, int64_t c0, int64_t C,
                          const __nv_bfloat16* dz16) {
  const int64_t H = head.hidden;
  if (head.weight_bf16 != nullptr) {
    matmul_backward_mixed_cuda(lt, grad.d_hidden + r0 * H, grad.d_weight + c0 * H, nullptr, dz16,
                               head.hidden_bf16 + r0 * H, head.weight_bf16 + c0 * H, MatmulCudaParams{R, C, H},
                               /*accumulate_dx=*/true);
    return;
  }
  matmul_backward_cuda(lt, grad.d_hidden + r0 * H, grad.d_weight + c0 * H, nullptr, dz, hidden + r0 * H,
                       head.weight + c0 * H, MatmulCudaParams{R, C, H}, /*accumulate_dx=*/true);
}

void lse_update(const CudaBlasLt& lt, RowLse acc, const float* tile, int64_t R, int64_t C, float scale,
                const int32_t* targets, int64_t r0, int64_t c0, double* target_logit) {
  lse_update_kernel<<<static_cast<unsigned>(R), kThreads, 0, lt.stream>>>(acc, tile, C, scale, targets, r0, c0,
                                                                         target_logit);
  HLM_CUDA_CHECK_LAUNCH();
}

void finish_loss(cudaStream_t stream, TokenLossCudaResult* result, const Workspace& ws, int64_t N, double factor) {
  loss_finish_kernel<<<1, kThreads, 0, stream>>>(result, ws.values, ws.weights, ws.count, N, factor);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void lm_head_cuda_check_chunking(const LmHeadCudaChunking& c) {
  HLM_CHECK_INPUT(c.vocab_chunk > 0 && c.vocab_chunk <= INT32_MAX, "vocab_chunk must be in [1, INT_MAX], got ",
                  c.vocab_chunk);
  HLM_CHECK_INPUT(c.row_block > 0 && c.row_block <= INT32_MAX, "row_block must be in [1, INT_MAX], got ",
                  c.row_block);
}

size_t lm_head_cross_entropy_cuda_workspace_bytes(int64_t N, int64_t V, const LmHeadCudaChunking& chunking) {
  lm_head_cuda_check_chunking(chunking);
  return carve(nullptr, N, V, chunking, false).bytes;
}

size_t lm_head_forward_kl_cuda_workspace_bytes(int64_t N, int64_t V, const LmHeadCudaChunking& chunking,
                                               bool teacher_ahead) {
  lm_head_cuda_check_chunking(chunking);
  return carve(nullptr, N, V, chunking, !teacher_ahead).bytes;
}

size_t lm_head_teacher_logits_cuda_workspace_bytes(int64_t N, int64_t V, const LmHeadCudaChunking& chunking) {
  lm_head_cuda_check_chunking(chunking);
  return carve(nullptr, N, V, chunking, false).bytes;  // the row statistics (its tile is not used)
}

void lm_head_teacher_logits_cuda(const CudaBlasLt& lt, float* logits, double* lse, const float* hidden_teacher,
                                 const LmHeadCuda& teacher, int64_t N, double tau, const LmHeadCudaChunking& chunking,
                                 void* workspace, size_t workspace_bytes) {
  check_head(teacher, "teacher");
  lm_head_cuda_check_chunking(chunking);
  HLM_CHECK_INPUT(std::isfinite(tau) && tau > 0.0, "temperature must be finite and positive, got ", tau);
  HLM_CHECK_INPUT(N >= 0, "negative token count ", N);
  const int64_t V = teacher.vocab;
  HLM_CHECK_INPUT(lm_head_teacher_logits_supported(V, chunking), "precomputed teacher logits need one vocabulary "
                  "chunk (vocab_chunk ", chunking.vocab_chunk, " < V ", V, ")");
  if (N == 0) return;
  HLM_CHECK_INPUT(hidden_teacher != nullptr && logits != nullptr && lse != nullptr, "null input or output pointer");
  const Workspace ws = carve(workspace, N, V, chunking, false);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= ws.bytes, "lm_head_teacher_logits_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  const cudaStream_t stream = lt.stream;
  const float scale_t = static_cast<float>(1.0 / (teacher.divisor * tau));
  // The KL call's pass 1 for the teacher (lm_head_forward_kl_cuda), each row block's tile written in place.
  for (int64_t r0 = 0; r0 < N; r0 += ws.Rb) {
    const int64_t R = std::min(ws.Rb, N - r0);
    float* tile = logits + r0 * V;
    init_rows_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(ws.max_a, ws.sum_a, nullptr,
                                                                                    nullptr, ws.aux, R);
    HLM_CUDA_CHECK_LAUNCH();
    logits_tile(lt, tile, hidden_teacher, teacher, r0, R, 0, V);
    lse_update(lt, {ws.max_a, ws.sum_a}, tile, R, V, scale_t, nullptr, r0, 0, nullptr);
    lse_finish_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(lse + r0, ws.max_a, ws.sum_a,
                                                                                     R);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

void lm_head_cross_entropy_cuda(const CudaBlasLt& lt, float* ce, TokenLossCudaResult* result, const float* hidden,
                                int64_t N, const LmHeadCuda& head, const int32_t* targets, const float* token_weight,
                                const LmHeadGradCuda* grad, const LmHeadCudaChunking& chunking, void* workspace,
                                size_t workspace_bytes, int* error_flag) {
  check_head(head, "LM");
  lm_head_cuda_check_chunking(chunking);
  check_grad(grad);
  HLM_CHECK_INPUT(N >= 0, "negative token count ", N);
  HLM_CHECK(result != nullptr, "lm_head_cross_entropy_cuda: no result pointer");
  const int64_t V = head.vocab, H = head.hidden;
  cudaStream_t stream = lt.stream;
  if (grad != nullptr && N > 0)
    HLM_CUDA_CHECK(cudaMemsetAsync(grad->d_hidden, 0, static_cast<size_t>(N * H) * sizeof(float), stream));
  if (N == 0) {
    HLM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(TokenLossCudaResult), stream));  // all-zero bits: 0.0, 0
    return;
  }
  HLM_CHECK_INPUT(hidden != nullptr && targets != nullptr && ce != nullptr, "null input or output pointer");
  const Workspace ws = carve(workspace, N, V, chunking, false);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= ws.bytes, "lm_head_cross_entropy_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  const double scale = 1.0 / head.divisor;
  const float scale_f = static_cast<float>(scale);

  ce_prepare_kernel<<<1, kThreads, 0, stream>>>(ws.weights, ws.count, targets, token_weight, N, V, error_flag);
  HLM_CUDA_CHECK_LAUNCH();
  const bool one_chunk = ws.Cb >= V;  // pass 2 reuses pass 1's tile
  for (int64_t r0 = 0; r0 < N; r0 += ws.Rb) {
    const int64_t R = std::min(ws.Rb, N - r0);
    init_rows_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(ws.max_a, ws.sum_a, nullptr,
                                                                                    nullptr, ws.aux, R);
    HLM_CUDA_CHECK_LAUNCH();
    // Pass 1: log-sum-exp and target logit of each row.
    for (int64_t c0 = 0; c0 < V; c0 += ws.Cb) {
      const int64_t C = std::min(ws.Cb, V - c0);
      logits_tile(lt, ws.tile_a, hidden, head, r0, R, c0, C);
      lse_update(lt, {ws.max_a, ws.sum_a}, ws.tile_a, R, C, scale_f, targets, r0, c0, ws.aux);
    }
    ce_row_finish_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(
        ce, ws.values, ws.lse_a, ws.max_a, ws.sum_a, ws.aux, targets, r0, R, V);
    HLM_CUDA_CHECK_LAUNCH();
    if (grad == nullptr) continue;
    // Pass 2: dz = w · (softmax − onehot) / divisor, chunk by chunk, into dh (+=) and dW (+=).
    for (int64_t c0 = 0; c0 < V; c0 += ws.Cb) {
      const int64_t C = std::min(ws.Cb, V - c0);
      if (!one_chunk) logits_tile(lt, ws.tile_a, hidden, head, r0, R, c0, C);
      ce_dz_kernel<<<static_cast<unsigned>(R), kThreads, 0, stream>>>(ws.tile_a, dz16_for(head, ws), C, scale_f,
                                                                     scale, ws.lse_a, ws.weights, targets, r0, c0);
      HLM_CUDA_CHECK_LAUNCH();
      accumulate_tile_grad(lt, *grad, ws.tile_a, hidden, head, r0, R, c0, C, ws.dz16);
    }
  }
  finish_loss(stream, result, ws, N, 1.0);
}

void lm_head_forward_kl_cuda(const CudaBlasLt& lt, float* kl, TokenLossCudaResult* result,
                             const float* hidden_teacher, const LmHeadCuda& teacher, const float* hidden_student,
                             const LmHeadCuda& student, int64_t N, double tau, const float* token_weight,
                             const LmHeadGradCuda* grad, const LmHeadCudaChunking& chunking, void* workspace,
                             size_t workspace_bytes, const LmHeadTeacherLogitsCuda* teacher_ahead) {
  check_head(teacher, "teacher");
  check_head(student, "student");
  lm_head_cuda_check_chunking(chunking);
  check_grad(grad);
  HLM_CHECK_INPUT(teacher.vocab == student.vocab, "teacher and student vocabularies differ: ", teacher.vocab, " vs ",
                  student.vocab);
  HLM_CHECK_INPUT(std::isfinite(tau) && tau > 0.0, "temperature must be finite and positive, got ", tau);
  HLM_CHECK_INPUT(N >= 0, "negative token count ", N);
  HLM_CHECK(result != nullptr, "lm_head_forward_kl_cuda: no result pointer");
  const int64_t V = student.vocab, H_S = student.hidden;
  cudaStream_t stream = lt.stream;
  if (grad != nullptr && N > 0)
    HLM_CUDA_CHECK(cudaMemsetAsync(grad->d_hidden, 0, static_cast<size_t>(N * H_S) * sizeof(float), stream));
  if (N == 0) {
    HLM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(TokenLossCudaResult), stream));
    return;
  }
  HLM_CHECK_INPUT((hidden_teacher != nullptr || teacher_ahead != nullptr) && hidden_student != nullptr && kl != nullptr,
                  "null input or output pointer");
  HLM_CHECK_INPUT(teacher_ahead == nullptr || lm_head_teacher_logits_supported(V, chunking), "precomputed teacher "
                  "logits need one vocabulary chunk (vocab_chunk ", chunking.vocab_chunk, " < V ", V, ")");
  HLM_CHECK(teacher_ahead == nullptr || (teacher_ahead->logits != nullptr && teacher_ahead->lse != nullptr),
            "lm_head_forward_kl_cuda: precomputed teacher logits without their arrays");
  const Workspace ws = carve(workspace, N, V, chunking, teacher_ahead == nullptr);  // no teacher tile when precomputed
  HLM_CHECK(workspace != nullptr && workspace_bytes >= ws.bytes, "lm_head_forward_kl_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  const double scale_t = 1.0 / (teacher.divisor * tau), scale_s = 1.0 / (student.divisor * tau);
  // d(τ² · KL)/d(z_S/τ) = τ² (p_S − p_T); the chain rule through z_S/τ = (h_S · W_Sᵀ) · scale_S adds scale_S.
  const double dz_scale = tau * tau * scale_s;

  kl_prepare_kernel<<<cuda::grid_blocks(N), cuda::kElementwiseThreads, 0, stream>>>(ws.weights, ws.count,
                                                                                   token_weight, N);
  HLM_CUDA_CHECK_LAUNCH();
  const bool one_chunk = ws.Cb >= V;  // pass 2 reuses pass 1's tiles
  for (int64_t r0 = 0; r0 < N; r0 += ws.Rb) {
    const int64_t R = std::min(ws.Rb, N - r0);
    // a = student, b = teacher; aux = the running KL of each row.
    init_rows_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(ws.max_a, ws.sum_a, ws.max_b,
                                                                                    ws.sum_b, ws.aux, R);
    HLM_CUDA_CHECK_LAUNCH();
    // Pass 1: log-sum-exp of z/τ for teacher and student (the teacher's precomputed: its tile is then a row block
    // of its [N, V] logits, one chunk wide).
    const float* tile_t = teacher_ahead != nullptr ? teacher_ahead->logits + r0 * V : ws.tile_b;
    const double* lse_t = teacher_ahead != nullptr ? teacher_ahead->lse + r0 : ws.lse_b;
    for (int64_t c0 = 0; c0 < V; c0 += ws.Cb) {
      const int64_t C = std::min(ws.Cb, V - c0);
      if (teacher_ahead == nullptr) logits_tile(lt, ws.tile_b, hidden_teacher, teacher, r0, R, c0, C);
      logits_tile(lt, ws.tile_a, hidden_student, student, r0, R, c0, C);
      if (teacher_ahead == nullptr)
        lse_update(lt, {ws.max_b, ws.sum_b}, ws.tile_b, R, C, static_cast<float>(scale_t), nullptr, r0, c0, nullptr);
      lse_update(lt, {ws.max_a, ws.sum_a}, ws.tile_a, R, C, static_cast<float>(scale_s), nullptr, r0, c0, nullptr);
    }
    lse_finish_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(ws.lse_a, ws.max_a, ws.sum_a,
                                                                                     R);
    HLM_CUDA_CHECK_LAUNCH();
    if (teacher_ahead == nullptr) {
      lse_finish_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(ws.lse_b, ws.max_b, ws.sum_b,
                                                                                       R);
      HLM_CUDA_CHECK_LAUNCH();
    }
    // Pass 2: KL terms and, with gradients, dz for the student.
    for (int64_t c0 = 0; c0 < V; c0 += ws.Cb) {
      const int64_t C = std::min(ws.Cb, V - c0);
      if (!one_chunk) {  // (never with precomputed teacher logits: one chunk)
        logits_tile(lt, ws.tile_b, hidden_teacher, teacher, r0, R, c0, C);
        logits_tile(lt, ws.tile_a, hidden_student, student, r0, R, c0, C);
      }
      kl_chunk_kernel<<<static_cast<unsigned>(R), kThreads, 0, stream>>>(
          ws.tile_a, dz16_for(student, ws), tile_t + (teacher_ahead != nullptr ? c0 : 0),
          teacher_ahead != nullptr ? V : C, C, static_cast<float>(scale_s), static_cast<float>(scale_t), ws.lse_a,
          lse_t, ws.aux, ws.weights, dz_scale, grad != nullptr, r0);
      HLM_CUDA_CHECK_LAUNCH();
      if (grad != nullptr)
        accumulate_tile_grad(lt, *grad, ws.tile_a, hidden_student, student, r0, R, c0, C, ws.dz16);
    }
    kl_row_finish_kernel<<<cuda::grid_blocks(R), cuda::kElementwiseThreads, 0, stream>>>(kl, ws.values, ws.aux, r0,
                                                                                        R);
    HLM_CUDA_CHECK_LAUNCH();
  }
  finish_loss(stream, result, ws, N, tau * tau);
}

}  // namespace hlm
