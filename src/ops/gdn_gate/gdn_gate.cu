// GDN gate CUDA kernels and launchers (contract: gdn_gate.h, gdn_gate_cuda.h).
//   forward:  elementwise over [tokens, heads].
//   backward: elementwise da, db; dA_log[h] = Σ_t dg·g and ddt_bias[h] = Σ_t da by the two-pass column sum
//             (rows = tokens, columns = heads) into zeroed outputs (the contract overwrites them).
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/gdn_gate/gdn_gate.h"
#include "ops/gdn_gate/gdn_gate_cuda.h"
#include "ops/gdn_gate/gdn_gate_math.cuh"

namespace hlm {

namespace {

using cuda::gdn_sigmoid;
using cuda::gdn_softplus_grad;

__global__ void gdn_gate_forward_kernel(float* g, float* beta, const float* a, const float* b, const float* A_log,
                                        const float* dt_bias, int64_t n, int64_t H, float beta_scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = i % H;
    cuda::gdn_gate_element(g[i], beta[i], a[i], b[i], A_log[h], dt_bias[h], beta_scale);
  }
}

__global__ void gdn_gate_backward_kernel(float* da, float* db, const float* dg, const float* dbeta, const float* a,
                                         const float* b, const float* A_log, const float* dt_bias, int64_t n,
                                         int64_t H, float beta_scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = i % H;
    const float u = a[i] + dt_bias[h];
    da[i] = dg[i] * -expf(A_log[h]) * gdn_softplus_grad(u);
    db[i] = dbeta[i] * beta_scale * (gdn_sigmoid(b[i]) * gdn_sigmoid(-b[i]));
  }
}

// Column-sum terms (row = token, column = head).
struct DdtBiasTerm {
  const float *dg, *a, *A_log, *dt_bias;
  int64_t H;
  __device__ float operator()(int64_t t, int64_t h) const {
    const int64_t i = t * H + h;
    return dg[i] * -expf(A_log[h]) * gdn_softplus_grad(a[i] + dt_bias[h]);
  }
};
struct DALogTerm {  // dg · g: dg/dA_log = g
  const float *dg, *a, *A_log, *dt_bias;
  int64_t H;
  __device__ float operator()(int64_t t, int64_t h) const {
    const int64_t i = t * H + h;
    return dg[i] * (-expf(A_log[h]) * cuda::gdn_softplus(a[i] + dt_bias[h]));
  }
};

void check_params(const GdnGateCudaParams& p) {
  HLM_CHECK(p.tokens >= 0 && p.heads > 0, "gdn_gate_cuda: bad shape [", p.tokens, ", ", p.heads, "]");
}

ColumnSumPlan plan_of(const GdnGateCudaParams& p) { return column_sum_plan(p.tokens, p.heads, ~size_t{0} / 2); }

}  // namespace

void gdn_gate_forward_cuda(float* g, float* beta, const float* a, const float* b, const float* A_log,
                           const float* dt_bias, const GdnGateCudaParams& p, cudaStream_t stream) {
  check_params(p);
  const int64_t n = p.tokens * p.heads;
  if (n == 0) return;
  gdn_gate_forward_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(
      g, beta, a, b, A_log, dt_bias, n, p.heads, p.neg_eigval ? 2.0f : 1.0f);
  HLM_CUDA_CHECK_LAUNCH();
}

size_t gdn_gate_backward_cuda_workspace_bytes(const GdnGateCudaParams& p) {
  check_params(p);
  return 2 * cuda::align_up_256(plan_of(p).scratch_bytes);
}

void gdn_gate_backward_cuda(float* da, float* db, float* dA_log, float* ddt_bias, const float* dg, const float* dbeta,
                            const float* a, const float* b, const float* A_log, const float* dt_bias,
                            const GdnGateCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_params(p);
  const ColumnSumPlan plan = plan_of(p);
  const size_t piece = cuda::align_up_256(plan.scratch_bytes);
  HLM_CHECK(workspace_bytes >= 2 * piece && (workspace != nullptr || piece == 0),
            "gdn_gate_backward_cuda: workspace of ", workspace_bytes, " bytes, needs ", 2 * piece);
  const float beta_scale = p.neg_eigval ? 2.0f : 1.0f;
  HLM_CUDA_CHECK(cudaMemsetAsync(dA_log, 0, static_cast<size_t>(p.heads) * sizeof(float), stream));
  HLM_CUDA_CHECK(cudaMemsetAsync(ddt_bias, 0, static_cast<size_t>(p.heads) * sizeof(float), stream));
  const int64_t n = p.tokens * p.heads;
  if (n == 0) return;
  auto* scratch = static_cast<char*>(workspace);
  cuda::column_sum_accumulate(ddt_bias, DdtBiasTerm{dg, a, A_log, dt_bias, p.heads}, p.tokens, p.heads, plan,
                              reinterpret_cast<float*>(scratch), stream);
  cuda::column_sum_accumulate(dA_log, DALogTerm{dg, a, A_log, dt_bias, p.heads}, p.tokens, p.heads, plan,
                              piece ? reinterpret_cast<float*>(scratch + piece) : nullptr, stream);
  gdn_gate_backward_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(
      da, db, dg, dbeta, a, b, A_log, dt_bias, n, p.heads, beta_scale);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
