// Full-attention layer: the f32 entry points (shape checks, tensor -> pointer views, gradient helpers) and the layer
// math templated on the scalar type (float for the engine, double for gradient checks). Backward, walking the
// forward (recomputed) in reverse:
//   do = d_out Wo;  dWo += d_outᵀ o;  dbo += Σ d_out                       (matmul_backward)
//   (dq, dk, dv) = attention_backward(do)                                  (softmax recomputed per query block)
//   dq, dk ← rope_backward (transposed rotation);  then rmsnorm_backward → dq̃, dk̃, dq_norm, dk_norm
//   dx = dq̃ Wq + dk̃ Wk + dv Wv (first overwrites);  dWp += dpᵀ x;  dbp += Σ dp
// With an output gate, o_proj reads og = o ⊙ σ(g): (do, dg) = sigmoid_gate_backward(dog), dx += dg Wg, dWg += dgᵀ x.
#include "layers/attention_layer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/attention/attention.h"
#include "ops/matmul/matmul.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/sigmoid_gate/sigmoid_gate.h"

namespace hlm {

namespace {

template <typename T>
T* scratch(Arena& arena, int64_t n) {
  return static_cast<T*>(arena.allocate(sizeof(T) * static_cast<size_t>(std::max<int64_t>(n, 1))));
}

// Rows and width of a q/k norm over `heads` heads: per head (width D) or the whole projection (width H·D).
struct NormRows {
  int64_t rows, width;
};
NormRows norm_rows(int64_t norm_size, int64_t tokens, int64_t heads, int64_t D) {
  HLM_CHECK(norm_size == D || norm_size == heads * D, "q/k norm of ", norm_size, " entries for ", heads,
            " heads of ", D);
  return {tokens * heads * D / norm_size, norm_size};
}

// Forward intermediates (token-major): projections before the norm (q̃, k̃), q and k as attention reads them (after
// norm and rope), v, the attention output o, and with an output gate its input g = x Wgᵀ and og = o ⊙ σ(g), which
// o_proj reads (og == o and g == nullptr without a gate). q_lin == q (k_lin == k) when not kept apart.
template <typename T>
struct Activations {
  T *q_lin, *k_lin, *q, *k, *v, *o, *gate, *og;
};

// og = o ⊙ sigmoid(x Wgᵀ) into a.gate / a.og (new scratch), or og = o without a gate.
template <typename T>
void apply_output_gate(Activations<T>& a, const T* x, const AttentionParamPtrs<const T*>& w, const AttentionDims& d,
                       int64_t n, int64_t hidden, Arena& arena);

// q, k (after norm and rope at `positions`) and v of n tokens into a.q, a.k, a.v (a.q_lin / a.k_lin: the
// projections before the norm, which may be the same buffers as a.q / a.k).
template <typename T>
void project_qkv(const Activations<T>& a, const T* x, const AttentionParamPtrs<const T*>& w, const AttentionDims& d,
                 const RopeTable* rope, int64_t n, int64_t hidden, const int32_t* positions) {
  const int64_t D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;
  matmul_forward<T>(a.q_lin, x, w.q_proj, w.q_bias, n, Cq, hidden);
  matmul_forward<T>(a.k_lin, x, w.k_proj, w.k_bias, n, Ckv, hidden);
  matmul_forward<T>(a.v, x, w.v_proj, w.v_bias, n, Ckv, hidden);
  if (a.q_lin != a.q) std::copy(a.q_lin, a.q_lin + n * Cq, a.q);
  if (a.k_lin != a.k) std::copy(a.k_lin, a.k_lin + n * Ckv, a.k);
  if (w.q_norm != nullptr) {
    const NormRows r = norm_rows(w.q_norm_size, n, d.q_heads, D);
    rmsnorm_forward<T>(a.q, a.q, w.q_norm, r.rows, r.width, d.norm_eps);
  }
  if (w.k_norm != nullptr) {
    const NormRows r = norm_rows(w.k_norm_size, n, d.kv_heads, D);
    rmsnorm_forward<T>(a.k, a.k, w.k_norm, r.rows, r.width, d.norm_eps);
  }
  if (rope != nullptr) {
    HLM_CHECK(rope->head_dim == D, "rope table head_dim ", rope->head_dim, " != attention head_dim ", D);
    rope_forward<T>(a.q, positions, n, d.q_heads, *rope);
    rope_forward<T>(a.k, positions, n, d.kv_heads, *rope);
  }
}

// keep_pre_norm: the backward needs q̃ / k̃ apart from q / k when they are normalised; otherwise they share storage.
template <typename T>
Activations<T> forward_activations(const T* x, const AttentionParamPtrs<const T*>& w, const AttentionDims& d,
                                   const RopeTable* rope, const AttentionBatchView& b, bool keep_pre_norm,
                                   Arena& arena) {
  const int64_t n = b.tokens, D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;
  Activations<T> a{};
  a.q = scratch<T>(arena, n * Cq);
  a.k = scratch<T>(arena, n * Ckv);
  a.v = scratch<T>(arena, n * Ckv);
  a.o = scratch<T>(arena, n * Cq);
  a.q_lin = keep_pre_norm && w.q_norm != nullptr ? scratch<T>(arena, n * Cq) : a.q;
  a.k_lin = keep_pre_norm && w.k_norm != nullptr ? scratch<T>(arena, n * Ckv) : a.k;
  project_qkv(a, x, w, d, rope, n, b.hidden, b.positions);
  const AttentionShape shape{n, d.q_heads, d.kv_heads, D, d.window};
  attention_forward<T>(a.o, a.q, a.k, a.v, b.cu_seqlens, b.n_seqs, shape, d.scale);
  apply_output_gate(a, x, w, d, n, b.hidden, arena);
  return a;
}

template <typename T>
void apply_output_gate(Activations<T>& a, const T* x, const AttentionParamPtrs<const T*>& w, const AttentionDims& d,
                       int64_t n, int64_t hidden, Arena& arena) {
  a.gate = nullptr;
  a.og = a.o;
  if (w.gate_proj == nullptr) return;
  const int64_t Cq = d.q_heads * d.head_dim;
  a.gate = scratch<T>(arena, n * Cq);
  a.og = scratch<T>(arena, n * Cq);
  matmul_forward<T>(a.gate, x, w.gate_proj, static_cast<const T*>(nullptr), n, Cq, hidden);
  sigmoid_gate_forward<T>(a.og, a.o, a.gate, n * Cq);
}

void check_tensor(const Tensor& t, Shape expect, const char* name) {
  HLM_CHECK_INPUT(t.dtype() == DType::F32 && t.is_contiguous(), "attention tensor ", name, " must be contiguous f32");
  HLM_CHECK_INPUT(t.shape() == expect, "attention tensor ", name, " has shape ", t.shape().str(), ", expected ",
                  expect.str());
}

// Fills a pointer set from a tensor set through the two tables (undefined -> nullptr), checking the names agree.
template <class P, class S>
AttentionParamPtrs<P> ptrs_from(S& set) {
  AttentionParamPtrs<P> p{};
  const auto tensors = attention_param_tensors(set);
  const auto fields = attention_param_ptr_fields(p);
  for (size_t i = 0; i < kAttentionParamCount; ++i) {
    HLM_CHECK(std::strcmp(tensors[i].first, fields[i].first) == 0, "attention parameter tables disagree at ", i);
    const Tensor& t = *tensors[i].second;
    HLM_CHECK_INPUT(!t.defined() || (t.dtype() == DType::F32 && t.is_contiguous()), "attention tensor ",
                    tensors[i].first, " must be contiguous f32");
    *fields[i].second = t.defined() ? static_cast<P>(t.raw()) : nullptr;
  }
  p.q_norm_size = set.q_norm.defined() ? set.q_norm.numel() : 0;
  p.k_norm_size = set.k_norm.defined() ? set.k_norm.numel() : 0;
  return p;
}

AttentionBatchView batch_view(const TokenBatch& batch, int64_t hidden, const int32_t* positions) {
  batch.validate();
  return {batch.total_tokens(), hidden, batch.cu_seqlens.data(), batch.num_sequences(), positions};
}

}  // namespace

AttentionGrads attention_grads_like(const AttentionWeights& w) {
  AttentionGrads g;
  const auto src = attention_param_tensors(w);
  const auto dst = attention_param_tensors(g);
  for (size_t i = 0; i < kAttentionParamCount; ++i)
    if (src[i].second->defined()) *dst[i].second = Tensor::zeros(src[i].second->shape());
  return g;
}

void attention_check_weights(const AttentionWeights& w, const AttentionDims& d) {
  HLM_CHECK_INPUT(d.q_heads > 0 && d.kv_heads > 0 && d.head_dim > 0 && d.q_heads % d.kv_heads == 0,
                  "bad attention dims: ", d.q_heads, " q heads, ", d.kv_heads, " kv heads, head_dim ", d.head_dim);
  HLM_CHECK_INPUT(w.q_proj.weight.defined() && w.q_proj.weight.rank() == 2, "attention q_proj.weight is missing");
  const int64_t hidden = w.q_proj.in_features(), Cq = d.q_heads * d.head_dim, Ckv = d.kv_heads * d.head_dim;
  const struct {
    const Linear& l;
    int64_t out, in;
    const char *weight, *bias;
  } linears[] = {{w.q_proj, Cq, hidden, "q_proj.weight", "q_proj.bias"},
                 {w.k_proj, Ckv, hidden, "k_proj.weight", "k_proj.bias"},
                 {w.v_proj, Ckv, hidden, "v_proj.weight", "v_proj.bias"},
                 {w.o_proj, hidden, Cq, "o_proj.weight", "o_proj.bias"}};
  for (const auto& p : linears) {
    HLM_CHECK_INPUT(p.l.weight.defined(), "attention tensor ", p.weight, " is missing");
    check_tensor(p.l.weight, {p.out, p.in}, p.weight);
    if (p.l.bias.defined()) check_tensor(p.l.bias, {p.out}, p.bias);
  }
  if (w.gate_proj.weight.defined()) {
    check_tensor(w.gate_proj.weight, {Cq, hidden}, "gate_proj.weight");
    HLM_CHECK_INPUT(!w.gate_proj.bias.defined(), "attention gate_proj has no bias");
  }
  const struct {
    const Tensor& t;
    int64_t heads;
    const char* name;
  } norms[] = {{w.q_norm, d.q_heads, "q_norm.weight"}, {w.k_norm, d.kv_heads, "k_norm.weight"}};
  for (const auto& n : norms)
    if (n.t.defined())
      HLM_CHECK_INPUT(n.t.numel() == d.head_dim || n.t.numel() == n.heads * d.head_dim, "attention tensor ", n.name,
                      " has ", n.t.numel(), " entries, expected ", d.head_dim, " or ", n.heads * d.head_dim);
}

AttentionParamPtrs<const float*> attention_param_ptrs(const AttentionWeights& w) {
  return ptrs_from<const float*>(w);
}
AttentionParamPtrs<float*> attention_param_ptrs(AttentionGrads& g) { return ptrs_from<float*>(g); }

AttentionQkv attention_layer_project(const float* x, const AttentionWeights& w, const AttentionDims& dims,
                                     const RopeTable* rope, int64_t tokens, int64_t hidden, const int32_t* positions,
                                     Arena& arena) {
  const int64_t Cq = dims.q_heads * dims.head_dim, Ckv = dims.kv_heads * dims.head_dim;
  Activations<float> a{};
  a.q = a.q_lin = scratch<float>(arena, tokens * Cq);
  a.k = a.k_lin = scratch<float>(arena, tokens * Ckv);
  a.v = scratch<float>(arena, tokens * Ckv);
  project_qkv(a, x, attention_param_ptrs(w), dims, rope, tokens, hidden, positions);
  return {a.q, a.k, a.v};
}

template <typename T>
void attention_layer_forward_ref(T* out, const T* x, const AttentionParamPtrs<const T*>& w, const AttentionDims& d,
                                 const RopeTable* rope, const AttentionBatchView& b, Arena& arena) {
  HLM_CHECK(out != x, "attention forward: out may not alias x");
  const Arena::Mark mark = arena.mark();
  const Activations<T> a = forward_activations(x, w, d, rope, b, /*keep_pre_norm=*/false, arena);
  matmul_forward<T>(out, a.og, w.o_proj, w.o_bias, b.tokens, b.hidden, d.q_heads * d.head_dim);
  arena.release(mark);
}

namespace {

// The backward after the forward's intermediates `a` (kept with keep_pre_norm).
template <typename T>
void backward_from(T* dx, const AttentionParamPtrs<T*>& g, const T* d_out, const T* x,
                   const AttentionParamPtrs<const T*>& w, const AttentionDims& d, const RopeTable* rope,
                   const AttentionBatchView& b, const Activations<T>& a, Arena& arena) {
  const int64_t n = b.tokens, D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;
  const Arena::Mark mark = arena.mark();
  T* d_o = scratch<T>(arena, n * Cq);  // [n, Hq·D]
  matmul_backward<T>(d_o, g.o_proj, g.o_bias, d_out, a.og, w.o_proj, n, b.hidden, Cq);
  T* d_gate = nullptr;  // [n, Hq·D]: d loss / d (x Wgᵀ)
  if (w.gate_proj != nullptr) {
    HLM_CHECK(g.gate_proj != nullptr && a.gate != nullptr, "attention backward: missing gate gradient or input");
    d_gate = scratch<T>(arena, n * Cq);
    sigmoid_gate_backward<T>(d_o, d_gate, d_o, a.o, a.gate, n * Cq);  // d_o: d og -> d o, in place
  }
  T *dq = scratch<T>(arena, n * Cq), *dk = scratch<T>(arena, n * Ckv), *dv = scratch<T>(arena, n * Ckv);
  const AttentionShape shape{n, d.q_heads, d.kv_heads, D, d.window};
  attention_backward<T>(dq, dk, dv, d_o, a.q, a.k, a.v, b.cu_seqlens, b.n_seqs, shape, d.scale);
  if (rope != nullptr) {
    rope_backward<T>(dq, b.positions, n, d.q_heads, *rope);
    rope_backward<T>(dk, b.positions, n, d.kv_heads, *rope);
  }
  if (w.q_norm != nullptr) {  // in place: dq -> dq̃
    const NormRows r = norm_rows(w.q_norm_size, n, d.q_heads, D);
    rmsnorm_backward<T>(dq, g.q_norm, dq, a.q_lin, w.q_norm, r.rows, r.width, d.norm_eps);
  }
  if (w.k_norm != nullptr) {
    const NormRows r = norm_rows(w.k_norm_size, n, d.kv_heads, D);
    rmsnorm_backward<T>(dk, g.k_norm, dk, a.k_lin, w.k_norm, r.rows, r.width, d.norm_eps);
  }
  matmul_backward<T>(dx, g.q_proj, g.q_bias, dq, x, w.q_proj, n, Cq, b.hidden, /*accumulate_dx=*/false);
  matmul_backward<T>(dx, g.k_proj, g.k_bias, dk, x, w.k_proj, n, Ckv, b.hidden, /*accumulate_dx=*/true);
  matmul_backward<T>(dx, g.v_proj, g.v_bias, dv, x, w.v_proj, n, Ckv, b.hidden, /*accumulate_dx=*/true);
  if (d_gate != nullptr)
    matmul_backward<T>(dx, g.gate_proj, static_cast<T*>(nullptr), d_gate, x, w.gate_proj, n, Cq, b.hidden,
                       /*accumulate_dx=*/true);
  arena.release(mark);
}

// Stash layout (layers/layer_stash.h): buffers = the Activations fields in this order.
enum StashSlot { kQLin, kKLin, kQ, kK, kV, kO, kGate, kOg, kStashSlots };

std::vector<float*> to_stash(const Activations<float>& a) {
  return {a.q_lin, a.k_lin, a.q, a.k, a.v, a.o, a.gate, a.og};
}
Activations<float> from_stash(const LayerStash& s) {
  HLM_CHECK(s.buffers.size() == kStashSlots, "attention backward: the stash was not filled by an attention forward");
  return {s.buffers[kQLin], s.buffers[kKLin], s.buffers[kQ],    s.buffers[kK],
          s.buffers[kV],    s.buffers[kO],    s.buffers[kGate], s.buffers[kOg]};
}

}  // namespace

template <typename T>
void attention_layer_backward_ref(T* dx, const AttentionParamPtrs<T*>& g, const T* d_out, const T* x,
                                  const AttentionParamPtrs<const T*>& w, const AttentionDims& d,
                                  const RopeTable* rope, const AttentionBatchView& b, Arena& arena) {
  HLM_CHECK(dx != x && dx != d_out, "attention backward: dx may not alias x or d_out");
  HLM_CHECK((w.q_norm == nullptr || g.q_norm != nullptr) && (w.k_norm == nullptr || g.k_norm != nullptr),
            "attention backward: missing q/k norm gradient");
  const Arena::Mark mark = arena.mark();
  const Activations<T> a = forward_activations(x, w, d, rope, b, /*keep_pre_norm=*/true, arena);
  backward_from<T>(dx, g, d_out, x, w, d, rope, b, a, arena);
  arena.release(mark);
}

void attention_layer_forward(float* out, const float* x, const AttentionWeights& w, const AttentionDims& dims,
                             const RopeTable* rope, const TokenBatch& batch, const int32_t* positions, Arena& arena,
                             LayerStash* stash) {
  attention_check_weights(w, dims);
  const AttentionBatchView b = batch_view(batch, w.q_proj.in_features(), positions);
  if (stash == nullptr) {
    attention_layer_forward_ref<float>(out, x, attention_param_ptrs(w), dims, rope, b, arena);
    return;
  }
  HLM_CHECK(stash->arena != nullptr, "attention forward: stash without an arena");
  HLM_CHECK(out != x, "attention forward: out may not alias x");
  const AttentionParamPtrs<const float*> p = attention_param_ptrs(w);
  const Activations<float> a = forward_activations(x, p, dims, rope, b, /*keep_pre_norm=*/true, *stash->arena);
  matmul_forward<float>(out, a.og, p.o_proj, p.o_bias, b.tokens, b.hidden, dims.q_heads * dims.head_dim);
  stash->buffers = to_stash(a);
  stash->output = scratch<float>(*stash->arena, b.tokens * b.hidden);
  std::copy_n(out, b.tokens * b.hidden, stash->output);
}

void attention_layer_backward(float* dx, AttentionGrads& grads, const float* d_out, const float* x,
                              const AttentionWeights& w, const AttentionDims& dims, const RopeTable* rope,
                              const TokenBatch& batch, const int32_t* positions, Arena& arena,
                              const LayerStash* stash) {
  attention_check_weights(w, dims);
  const auto want = attention_param_tensors(w);
  const auto have = attention_param_tensors(grads);
  for (size_t i = 0; i < kAttentionParamCount; ++i) {
    HLM_CHECK_INPUT(want[i].second->defined() == have[i].second->defined(), "attention gradient ", have[i].first,
                    want[i].second->defined() ? " is missing" : " is defined but the weight is not");
    if (want[i].second->defined()) check_tensor(*have[i].second, want[i].second->shape(), have[i].first);
  }
  const AttentionBatchView b = batch_view(batch, w.q_proj.in_features(), positions);
  if (stash == nullptr) {
    attention_layer_backward_ref<float>(dx, attention_param_ptrs(grads), d_out, x, attention_param_ptrs(w), dims,
                                        rope, b, arena);
    return;
  }
  HLM_CHECK(dx != x && dx != d_out, "attention backward: dx may not alias x or d_out");
  backward_from<float>(dx, attention_param_ptrs(grads), d_out, x, attention_param_ptrs(w), dims, rope, b,
                       from_stash(*stash), arena);
}

template void attention_layer_forward_ref<float>(float*, const float*, const AttentionParamPtrs<const float*>&,
                                                 const AttentionDims&, const RopeTable*, const AttentionBatchView&,
                                                 Arena&);
template void attention_layer_forward_ref<double>(double*, const double*, const AttentionParamPtrs<const double*>&,
                                                  const AttentionDims&, const RopeTable*, const AttentionBatchView&,
                                                  Arena&);
template void attention_layer_backward_ref<float>(float*, const AttentionParamPtrs<float*>&, const float*,
                                                  const float*, const AttentionParamPtrs<const float*>&,
                                                  const AttentionDims&, const RopeTable*, const AttentionBatchView&,
                                                  Arena&);
template void attention_layer_backward_ref<double>(double*, const AttentionParamPtrs<double*>&, const double*,
                                                   const double*, const AttentionParamPtrs<const double*>&,
                                                   const AttentionDims&, const RopeTable*,
                                                   const AttentionBatchView&, Arena&);

void attention_layer_output(float* out, float* o, const float* x, const AttentionWeights& w, const AttentionDims& d,
                            int64_t tokens, int64_t hidden, Arena& arena) {
  const int64_t Cq = d.q_heads * d.head_dim;
  if (w.gate_proj.weight.defined()) {
    const Arena::Mark mark = arena.mark();
    float* gate = scratch<float>(arena, tokens * Cq);
    linear_forward(gate, x, w.gate_proj, tokens);
    sigmoid_gate_forward<float>(o, o, gate, tokens * Cq);
    arena.release(mark);
  }
  linear_forward(out, o, w.o_proj, tokens);
}

AttentionQk attention_stash_qk(const LayerStash& stash) {
  const Activations<float> a = from_stash(stash);
  return {a.q, a.k};
}

}  // namespace hlm
