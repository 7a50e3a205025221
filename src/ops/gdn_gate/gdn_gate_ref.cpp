// GDN gate (g, β) and its backward: CPU reference (contract in gdn_gate.h).
#include <cmath>

#include "core/error.h"
#include "ops/gdn_gate/gdn_gate.h"

namespace hlm {

namespace {

double softplus(double u) { return u > kSoftplusThreshold ? u : std::log1p(std::exp(u)); }
double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }
// d softplus / du, matching torch's softplus backward (1 above the threshold).
double softplus_grad(double u) { return u > kSoftplusThreshold ? 1.0 : sigmoid(u); }

// −exp(A_log) · softplus(a + dt_bias); the sum a + dt_bias is rounded to T first, as HF adds in fp32.
template <typename T>
double gate_input(const T* a, const T* dt_bias, int64_t t, int64_t h, int64_t H) {
  return static_cast<double>(static_cast<T>(a[t * H + h] + dt_bias[h]));
}

bool worth_threads(int64_t tokens, int64_t heads) { return tokens * heads > 65536; }

}  // namespace

template <typename T>
void gdn_gate_forward(T* g, T* beta, const T* a, const T* b, const T* A_log, const T* dt_bias, int64_t tokens,
                      int64_t heads, bool neg_eigval) {
  HLM_CHECK(tokens >= 0 && heads > 0 && g && beta && a && b && A_log && dt_bias, "bad gdn gate arguments");
  const double scale = neg_eigval ? 2.0 : 1.0;
#pragma omp parallel for if (worth_threads(tokens, heads))
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const double A = std::exp(static_cast<double>(A_log[h]));
      g[t * heads + h] = static_cast<T>(-A * softplus(gate_input(a, dt_bias, t, h, heads)));
      beta[t * heads + h] = static_cast<T>(scale * sigmoid(static_cast<double>(b[t * heads + h])));
    }
}

template <typename T>
void gdn_gate_backward(T* da, T* db, T* dA_log, T* ddt_bias, const T* dg, const T* dbeta, const T* a, const T* b,
                       const T* A_log, const T* dt_bias, int64_t tokens, int64_t heads, bool neg_eigval) {
  HLM_CHECK(tokens >= 0 && heads > 0 && da && db && dA_log && ddt_bias && dg && dbeta && a && b && A_log && dt_bias,
            "bad gdn gate backward arguments");
  const double scale = neg_eigval ? 2.0 : 1.0;
#pragma omp parallel for if (worth_threads(tokens, heads))
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i = t * heads + h;
      const double A = std::exp(static_cast<double>(A_log[h]));
      da[i] = static_cast<T>(static_cast<double>(dg[i]) * -A * softplus_grad(gate_input(a, dt_bias, t, h, heads)));
      const double s = sigmoid(static_cast<double>(b[i]));
      db[i] = static_cast<T>(static_cast<double>(dbeta[i]) * scale * s * (1.0 - s));
    }
#pragma omp parallel for if (worth_threads(tokens, heads))
  for (int64_t h = 0; h < heads; ++h) {
    const double A = std::exp(static_cast<double>(A_log[h]));
    double sum_dt = 0.0, sum_A = 0.0;
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t i = t * heads + h;
      const double u = gate_input(a, dt_bias, t, h, heads), d = static_cast<double>(dg[i]);
      sum_dt += d * -A * softplus_grad(u);
      sum_A += d * -A * softplus(u);  // dg/dA_log = g
    }
    ddt_bias[h] = static_cast<T>(sum_dt);
    dA_log[h] = static_cast<T>(sum_A);
  }
}

template void gdn_gate_forward<float>(float*, float*, const float*, const float*, const float*, const float*, int64_t,
                                      int64_t, bool);
template void gdn_gate_forward<double>(double*, double*, const double*, const double*, const double*, const double*,
                                       int64_t, int64_t, bool);
template void gdn_gate_backward<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                       const float*, const float*, const float*, int64_t, int64_t, bool);
template void gdn_gate_backward<double>(double*, double*, double*, double*, const double*, const double*,
                                        const double*, const double*, const double*, const double*, int64_t, int64_t,
                                        bool);

}  // namespace hlm
