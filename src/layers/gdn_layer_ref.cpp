// Gated DeltaNet layer math, templated on the scalar type (float for the engine, double for gradient checks):
// forward (dataflow in gdn_layer.h) and backward by recomputing the forward and walking it in reverse:
//   dy = d_out Wo;  dWo += d_outᵀ y
//   (d_o, dz, dw_norm) = gated_rmsnorm_backward(dy)
//   (dq, dk, dv, dg, dβ) = gated_delta_rule_recurrent_backward(d_o)      (no state gradients)
//   (da, db, dA_log, ddt_bias) = gdn_gate_backward(dg, dβ)
//   dq̃, dk̃ = l2norm_backward;  then conv backward for q, k, v (→ pre-conv grads and conv-weight grads)
//   dx = Σ_p dp Wp over p ∈ {q, k, v, g, a, b};  dWp += dpᵀ x
// Scratch comes from the arena (released before returning). Op-level gradients are overwritten into scratch and
// then added to the caller's gradients; GEMM weight gradients accumulate directly (beta = 1).
#include <cblas.h>

#include <algorithm>
#include <type_traits>

#include "core/error.h"
#include "layers/gdn_layer.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/gated_delta_rule/gated_delta_rule.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/gdn_gate/gdn_gate.h"
#include "ops/l2norm/l2norm.h"

namespace hlm {

namespace {

// Row-major C[M, N] = alpha · op(A) · op(B) + beta · C, op(A) [M, K], op(B) [K, N] (OpenBLAS, fp32 or fp64).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float beta, float* C) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              1.0f, A, int(ta ? M : K), B, int(tb ? K : N), beta, C, int(N));
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, const double* B, double beta,
          double* C) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              1.0, A, int(ta ? M : K), B, int(tb ? K : N), beta, C, int(N));
}

// Guards the degenerate sizes BLAS implementations disagree on (K = 0 must still apply beta).
template <typename T>
void gemm_safe(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, T beta, T* C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M * N; ++i) C[i] = beta == T(0) ? T(0) : beta * C[i];
    return;
  }
  gemm(ta, tb, M, N, K, A, B, beta, C);
}

// y [M, N] = x [M, K] · w[N, K]ᵀ
template <typename T>
void project(T* y, const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  gemm_safe(false, true, M, N, K, x, w, T(0), y);
}

template <typename T>
T* scratch(Arena& arena, int64_t n) {
  return static_cast<T*>(arena.allocate(sizeof(T) * static_cast<size_t>(std::max<int64_t>(n, 1))));
}

template <typename T>
void add_into(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Forward intermediates (all contiguous, token-major).
template <typename T>
struct Activations {
  T *qp, *kp, *vp;  // projections q̃, k̃ [T, Ck], ṽ [T, Cv] (conv inputs)
  T *z, *a, *b;     // gate z [T, Cv], gate input a and β logits [T, Hv]
  T *qc, *kc, *vc;  // after conv + SiLU
  T *qn, *kn;       // per-head L2-normalised q, k [T, Hk, dk]
  T *g, *beta;      // [T, Hv]
  T *o;             // core output [T, Hv, dv]
  T *y;             // gated-norm output [T, Cv]
};

template <typename T>
Activations<T> allocate_activations(Arena& arena, const GdnDims& d, int64_t n) {
  const int64_t Ck = d.key_channels(), Cv = d.value_channels(), Hv = d.value_heads;
  Activations<T> a;
  for (T** p : {&a.qp, &a.kp, &a.qc, &a.kc, &a.qn, &a.kn}) *p = scratch<T>(arena, n * Ck);
  for (T** p : {&a.vp, &a.z, &a.vc, &a.o, &a.y}) *p = scratch<T>(arena, n * Cv);
  for (T** p : {&a.a, &a.b, &a.g, &a.beta}) *p = scratch<T>(arena, n * Hv);
  return a;
}

// Stash layout (layers/layer_stash.h): buffers = the Activations fields in declaration order.
constexpr size_t kStashSlots = 15;
std::vector<float*> to_stash(const Activations<float>& a) {
  return {a.qp, a.kp, a.vp, a.z, a.a, a.b, a.qc, a.kc, a.vc, a.qn, a.kn, a.g, a.beta, a.o, a.y};
}
Activations<float> from_stash(const LayerStash& s) {
  HLM_CHECK(s.buffers.size() == kStashSlots, "GDN backward: the stash was not filled by a GDN forward");
  const std::vector<float*>& p = s.buffers;
  return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14]};
}

GdnShape rule_shape(const GdnDims& d, int64_t n) { return {n, d.key_heads, d.value_heads, d.key_dim, d.value_dim}; }

// Runs the forward up to the gated norm output `act.y`. conv_in / h0: initial states (nullptr = zeros); conv_out /
// hT: where the final states go (nullptr = discard; conv_out may alias conv_in, hT may not alias h0).
template <typename T>
void forward_activations(Activations<T>& act, const T* x, const GdnParamPtrs<const T*>& w, const GdnDims& d,
                         const GdnBatchView& b, const std::array<const T*, 3>& conv_in,
                         const std::array<T*, 3>& conv_out, const T* h0, T* hT) {
  const int64_t n = b.tokens, D = b.hidden, Ck = d.key_channels(), Cv = d.value_channels(), Hv = d.value_heads;
  project(act.qp, x, w.q_proj, n, Ck, D);
  project(act.kp, x, w.k_proj, n, Ck, D);
  project(act.vp, x, w.v_proj, n, Cv, D);
  project(act.z, x, w.g_proj, n, Cv, D);
  project(act.a, x, w.a_proj, n, Hv, D);
  project(act.b, x, w.b_proj, n, Hv, D);
  const CausalConv1dShape sk{n, Ck, d.conv_kernel}, sv{n, Cv, d.conv_kernel};
  causal_conv1d_forward<T>(act.qc, conv_out[0], act.qp, w.q_conv, conv_in[0], b.cu_seqlens, b.n_seqs, sk, true);
  causal_conv1d_forward<T>(act.kc, conv_out[1], act.kp, w.k_conv, conv_in[1], b.cu_seqlens, b.n_seqs, sk, true);
  causal_conv1d_forward<T>(act.vc, conv_out[2], act.vp, w.v_conv, conv_in[2], b.cu_seqlens, b.n_seqs, sv, true);
  l2norm_forward<T>(act.qn, act.qc, n * d.key_heads, d.key_dim);
  l2norm_forward<T>(act.kn, act.kc, n * d.key_heads, d.key_dim);
  gdn_gate_forward<T>(act.g, act.beta, act.a, act.b, w.A_log, w.dt_bias, n, Hv, d.neg_eigval);
  const GdnInputs<T> in{act.qn, act.kn, act.vc, act.g, act.beta, h0, b.cu_seqlens, b.n_seqs};
  gated_delta_rule_recurrent_forward<T>({act.o, hT}, in, rule_shape(d, n), static_cast<T>(d.q_scale()));
  gated_rmsnorm_forward<T>(act.y, act.o, act.z, w.o_norm, n * Hv, d.value_dim, d.norm_eps);
}

void check_batch(const GdnBatchView& b) {
  HLM_CHECK(b.cu_seqlens != nullptr && b.n_seqs >= 0 && b.tokens >= 0 && b.hidden > 0, "bad GDN batch view");
  HLM_CHECK_INPUT(b.cu_seqlens[0] == 0 && b.cu_seqlens[b.n_seqs] == b.tokens, "cu_seqlens must span the tokens");
}

}  // namespace

template <typename T>
void gdn_layer_forward_ref(T* out, const T* x, const GdnParamPtrs<const T*>& w, const GdnDims& d,
                           const GdnBatchView& b, const GdnStatePtrs<T>* state, Arena& arena,
                           LayerStash* stash) {
  check_batch(b);
  HLM_CHECK(out != x, "GDN forward: out may not alias x");
  if constexpr (std::is_same_v<T, float>) {
    if (stash != nullptr) {  // training without recomputation: the activations live in the stash's arena
      HLM_CHECK(stash->arena != nullptr && state == nullptr, "GDN forward: a stash needs an arena and no state");
      Activations<T> act = allocate_activations<T>(*stash->arena, d, b.tokens);
      forward_activations(act, x, w, d, b, {nullptr, nullptr, nullptr}, {nullptr, nullptr, nullptr},
                          static_cast<const T*>(nullptr), static_cast<T*>(nullptr));
      project(out, act.y, w.o_proj, b.tokens, b.hidden, d.value_channels());
      stash->buffers = to_stash(act);
      stash->output = scratch<T>(*stash->arena, b.tokens * b.hidden);
      std::copy(out, out + b.tokens * b.hidden, stash->output);
      return;
    }
  }
  HLM_CHECK(stash == nullptr, "GDN forward: stashes hold f32 activations");
  const Arena::Mark mark = arena.mark();
  Activations<T> act = allocate_activations<T>(arena, d, b.tokens);
  std::array<const T*, 3> conv_in{nullptr, nullptr, nullptr};
  std::array<T*, 3> conv_out{nullptr, nullptr, nullptr};
  const T* h0 = nullptr;
  T* hT = nullptr;
  const int64_t state_size = b.n_seqs * d.value_heads * d.value_dim * d.key_dim;
  if (state) {
    conv_in = {state->q_conv, state->k_conv, state->v_conv};
    conv_out = {state->q_conv, state->k_conv, state->v_conv};  // the conv op allows in-place state updates
    h0 = state->recurrent;
    hT = scratch<T>(arena, state_size);  // the rule's h0 and hT must not alias: copied back below
  }
  forward_activations(act, x, w, d, b, conv_in, conv_out, h0, hT);
  project(out, act.y, w.o_proj, b.tokens, b.hidden, d.value_channels());
  if (state) std::copy(hT, hT + state_size, state->recurrent);
  arena.release(mark);
}

namespace {

// The backward after the forward's intermediates `act`; conv_in / init as the forward had them.
template <typename T>
void backward_from(T* dx, const GdnParamPtrs<T*>& gr, const T* d_out, const T* x, const GdnParamPtrs<const T*>& w,
                   const GdnDims& d, const GdnBatchView& b, const GdnStatePtrs<const T>* init,
                   const Activations<T>& act, Arena& arena) {
  const int64_t n = b.tokens, D = b.hidden, Ck = d.key_channels(), Cv = d.value_channels(), Hv = d.value_heads;
  const int64_t K = d.conv_kernel;
  const std::array<const T*, 3> conv_in = init ? std::array<const T*, 3>{init->q_conv, init->k_conv, init->v_conv}
                                               : std::array<const T*, 3>{nullptr, nullptr, nullptr};
  const Arena::Mark mark = arena.mark();
  // Output projection and gated norm.
  T* dy = scratch<T>(arena, n * Cv);
  gemm_safe(false, false, n, Cv, D, d_out, w.o_proj, T(0), dy);     // dy [n, Cv] = d_out [n, D] · Wo [D, Cv]
  gemm_safe(true, false, D, Cv, n, d_out, act.y, T(1), gr.o_proj);  // dWo [D, Cv] += d_outᵀ · y
  T *d_o = scratch<T>(arena, n * Cv), *dz = scratch<T>(arena, n * Cv);
  T* dw_small = scratch<T>(arena, std::max(std::max(Ck, Cv) * K, d.value_dim));  // op-level weight gradients
  gated_rmsnorm_backward<T>(d_o, dz, dw_small, dy, act.o, act.z, w.o_norm, n * Hv, d.value_dim, d.norm_eps);
  add_into(gr.o_norm, dw_small, d.value_dim);

  // Core recurrence (the initial state is a constant here: no dh0).
  T *dqn = scratch<T>(arena, n * Ck), *dkn = scratch<T>(arena, n * Ck), *dvc = scratch<T>(arena, n * Cv);
  T *dg = scratch<T>(arena, n * Hv), *dbeta = scratch<T>(arena, n * Hv);
  const GdnInputs<T> in{act.qn, act.kn, act.vc, act.g, act.beta, init ? init->recurrent : nullptr, b.cu_seqlens,
                        b.n_seqs};
  gated_delta_rule_recurrent_backward<T>({dqn, dkn, dvc, dg, dbeta, nullptr}, {d_o, nullptr}, in, rule_shape(d, n),
                                         static_cast<T>(d.q_scale()));

  // Gate.
  T *da = scratch<T>(arena, n * Hv), *db = scratch<T>(arena, n * Hv);
  T *dA = scratch<T>(arena, Hv), *ddt = scratch<T>(arena, Hv);
  gdn_gate_backward<T>(da, db, dA, ddt, dg, dbeta, act.a, act.b, w.A_log, w.dt_bias, n, Hv, d.neg_eigval);
  add_into(gr.A_log, dA, Hv);
  add_into(gr.dt_bias, ddt, Hv);

  // L2 norms (in place on the incoming gradients), then the convs back to the projections.
  l2norm_backward<T>(dqn, dqn, act.qc, n * d.key_heads, d.key_dim);
  l2norm_backward<T>(dkn, dkn, act.kc, n * d.key_heads, d.key_dim);
  T *dqp = scratch<T>(arena, n * Ck), *dkp = scratch<T>(arena, n * Ck), *dvp = scratch<T>(arena, n * Cv);
  const CausalConv1dShape sk{n, Ck, K}, sv{n, Cv, K};
  causal_conv1d_backward<T>(dqp, dw_small, nullptr, dqn, act.qp, w.q_conv, conv_in[0], b.cu_seqlens, b.n_seqs, sk,
                            true);
  add_into(gr.q_conv, dw_small, Ck * K);
  causal_conv1d_backward<T>(dkp, dw_small, nullptr, dkn, act.kp, w.k_conv, conv_in[1], b.cu_seqlens, b.n_seqs, sk,
                            true);
  add_into(gr.k_conv, dw_small, Ck * K);
  causal_conv1d_backward<T>(dvp, dw_small, nullptr, dvc, act.vp, w.v_conv, conv_in[2], b.cu_seqlens, b.n_seqs, sv,
                            true);
  add_into(gr.v_conv, dw_small, Cv * K);

  // Input projections: dx = Σ dp · Wp (first overwrites), dWp += dpᵀ · x.
  struct Proj {
    const T* dp;
    const T* wp;
    T* gp;
    int64_t rows;
  };
  const Proj projs[] = {{dqp, w.q_proj, gr.q_proj, Ck}, {dkp, w.k_proj, gr.k_proj, Ck},
                        {dvp, w.v_proj, gr.v_proj, Cv}, {dz, w.g_proj, gr.g_proj, Cv},
                        {da, w.a_proj, gr.a_proj, Hv},  {db, w.b_proj, gr.b_proj, Hv}};
  bool first = true;
  for (const Proj& p : projs) {
    gemm_safe(false, false, n, D, p.rows, p.dp, p.wp, first ? T(0) : T(1), dx);  // dx [n, D] += dp [n, R] · Wp [R, D]
    gemm_safe(true, false, p.rows, D, n, p.dp, x, T(1), p.gp);                   // dWp [R, D] += dpᵀ · x
    first = false;
  }
  arena.release(mark);
}


}  // namespace

template <typename T>
void gdn_layer_backward_ref(T* dx, const GdnParamPtrs<T*>& gr, const T* d_out, const T* x,
                            const GdnParamPtrs<const T*>& w, const GdnDims& d, const GdnBatchView& b,
                            const GdnStatePtrs<const T>* init, Arena& arena, const LayerStash* stash) {
  check_batch(b);
  if constexpr (std::is_same_v<T, float>) {
    if (stash != nullptr) {
      backward_from(dx, gr, d_out, x, w, d, b, init, from_stash(*stash), arena);
      return;
    }
  }
  HLM_CHECK(stash == nullptr, "GDN backward: stashes hold f32 activations");
  const Arena::Mark mark = arena.mark();
  Activations<T> act = allocate_activations<T>(arena, d, b.tokens);
  const std::array<const T*, 3> conv_in = init ? std::array<const T*, 3>{init->q_conv, init->k_conv, init->v_conv}
                                               : std::array<const T*, 3>{nullptr, nullptr, nullptr};
  forward_activations(act, x, w, d, b, conv_in, {nullptr, nullptr, nullptr}, init ? init->recurrent : nullptr,
                      static_cast<T*>(nullptr));
  backward_from(dx, gr, d_out, x, w, d, b, init, act, arena);
  arena.release(mark);
}

template void gdn_layer_forward_ref<float>(float*, const float*, const GdnParamPtrs<const float*>&, const GdnDims&,
                                           const GdnBatchView&, const GdnStatePtrs<float>*, Arena&, LayerStash*);
template void gdn_layer_forward_ref<double>(double*, const double*, const GdnParamPtrs<const double*>&,
                                            const GdnDims&, const GdnBatchView&, const GdnStatePtrs<double>*, Arena&,
                                            LayerStash*);
template void gdn_layer_backward_ref<float>(float*, const GdnParamPtrs<float*>&, const float*, const float*,
                                            const GdnParamPtrs<const float*>&, const GdnDims&, const GdnBatchView&,
                                            const GdnStatePtrs<const float>*, Arena&, const LayerStash*);
template void gdn_layer_backward_ref<double>(double*, const GdnParamPtrs<double*>&, const double*, const double*,
                                             const GdnParamPtrs<const double*>&, const GdnDims&, const GdnBatchView&,
                                             const GdnStatePtrs<const double>*, Arena&, const LayerStash*);

}  // namespace hlm
