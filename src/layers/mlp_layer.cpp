// SwiGLU MLP: the f32 entry points (shape checks, pointer views, gradient helpers) and the layer math templated on
// the scalar type (float for the engine, double for gradient checks). Dataflow and backward in mlp_layer.h.
#include "layers/mlp_layer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/matmul/matmul.h"
#include "ops/swiglu/swiglu.h"

namespace hlm {

namespace {

template <typename T>
T* scratch(Arena& arena, int64_t n) {
  return static_cast<T*>(arena.allocate(sizeof(T) * static_cast<size_t>(std::max<int64_t>(n, 1))));
}

void check_tensor(const Tensor& t, Shape expect, const char* name) {
  HLM_CHECK_INPUT(t.dtype() == DType::F32 && t.is_contiguous(), "mlp tensor ", name, " must be contiguous f32");
  HLM_CHECK_INPUT(t.shape() == expect, "mlp tensor ", name, " has shape ", t.shape().str(), ", expected ",
                  expect.str());
}

// Checks w's shapes; returns {hidden, F}.
std::pair<int64_t, int64_t> check_weights(const MlpWeights& w) {
  HLM_CHECK_INPUT(w.gate_proj.weight.defined() && w.gate_proj.weight.rank() == 2, "mlp gate_proj.weight is missing");
  const int64_t F = w.gate_proj.out_features(), hidden = w.gate_proj.in_features();
  const int64_t expect[kMlpParamCount][2] = {{F, hidden}, {F, 0}, {F, hidden}, {F, 0}, {hidden, F}, {hidden, 0}};
  const auto tensors = mlp_param_tensors(w);
  for (size_t i = 0; i < kMlpParamCount; ++i) {
    const bool is_bias = expect[i][1] == 0;
    HLM_CHECK_INPUT(is_bias || tensors[i].second->defined(), "mlp tensor ", tensors[i].first, " is missing");
    if (tensors[i].second->defined())
      check_tensor(*tensors[i].second, is_bias ? Shape{expect[i][0]} : Shape{expect[i][0], expect[i][1]},
                   tensors[i].first);
  }
  return {hidden, F};
}

template <class P, class S>
MlpParamPtrs<P> ptrs_from(S& set) {
  MlpParamPtrs<P> p{};
  const auto tensors = mlp_param_tensors(set);
  const auto fields = mlp_param_ptr_fields(p);
  for (size_t i = 0; i < kMlpParamCount; ++i) {
    HLM_CHECK(std::strcmp(tensors[i].first, fields[i].first) == 0, "mlp parameter tables disagree at ", i);
    const Tensor& t = *tensors[i].second;
    HLM_CHECK_INPUT(!t.defined() || (t.dtype() == DType::F32 && t.is_contiguous()), "mlp tensor ", tensors[i].first,
                    " must be contiguous f32");
    *fields[i].second = t.defined() ? static_cast<P>(t.raw()) : nullptr;
  }
  return p;
}

}  // namespace

MlpGrads mlp_grads_like(const MlpWeights& w) {
  MlpGrads g;
  const auto src = mlp_param_tensors(w);
  const auto dst = mlp_param_tensors(g);
  for (size_t i = 0; i < kMlpParamCount; ++i)
    if (src[i].second->defined()) *dst[i].second = Tensor::zeros(src[i].second->shape());
  return g;
}

MlpParamPtrs<const float*> mlp_param_ptrs(const MlpWeights& w) { return ptrs_from<const float*>(w); }
MlpParamPtrs<float*> mlp_param_ptrs(MlpGrads& g) { return ptrs_from<float*>(g); }

template <typename T>
void mlp_layer_forward_ref(T* out, const T* x, const MlpParamPtrs<const T*>& w, int64_t n, int64_t hidden, int64_t F,
                           Arena& arena) {
  const Arena::Mark mark = arena.mark();
  T* gate = scratch<T>(arena, n * F);  // [n, F]
  T* up = scratch<T>(arena, n * F);    // [n, F]
  matmul_forward<T>(gate, x, w.gate_proj, w.gate_bias, n, F, hidden);
  matmul_forward<T>(up, x, w.up_proj, w.up_bias, n, F, hidden);
  swiglu_forward<T>(gate, gate, up, n * F);
  matmul_forward<T>(out, gate, w.down_proj, w.down_bias, n, hidden, F);
  arena.release(mark);
}

namespace {

// The backward after the forward's intermediates: gate, up [n, F] and h = silu(gate) ⊙ up.
template <typename T>
void backward_from(T* dx, const MlpParamPtrs<T*>& g, const T* d_out, const T* x, const MlpParamPtrs<const T*>& w,
                   const T* gate, const T* up, const T* h, int64_t n, int64_t hidden, int64_t F, Arena& arena) {
  const Arena::Mark mark = arena.mark();
  T* dh = scratch<T>(arena, n * F);  // dh, then dgate in place
  T* dup = scratch<T>(arena, n * F);
  matmul_backward<T>(dh, g.down_proj, g.down_bias, d_out, h, w.down_proj, n, hidden, F);
  swiglu_backward<T>(dh, dup, dh, gate, up, n * F);
  matmul_backward<T>(dx, g.gate_proj, g.gate_bias, dh, x, w.gate_proj, n, F, hidden, /*accumulate_dx=*/false);
  matmul_backward<T>(dx, g.up_proj, g.up_bias, dup, x, w.up_proj, n, F, hidden, /*accumulate_dx=*/true);
  arena.release(mark);
}

// Stash layout (layers/layer_stash.h): buffers = {gate, up, h}.
enum StashSlot { kGate, kUp, kH, kStashSlots };

}  // namespace

template <typename T>
void mlp_layer_backward_ref(T* dx, const MlpParamPtrs<T*>& g, const T* d_out, const T* x,
                            const MlpParamPtrs<const T*>& w, int64_t n, int64_t hidden, int64_t F, Arena& arena) {
  HLM_CHECK(dx != x && dx != d_out, "mlp backward: dx may not alias x or d_out");
  const Arena::Mark mark = arena.mark();
  T* gate = scratch<T>(arena, n * F);  // [n, F]
  T* up = scratch<T>(arena, n * F);    // [n, F]
  T* h = scratch<T>(arena, n * F);     // silu(gate) ⊙ up
  matmul_forward<T>(gate, x, w.gate_proj, w.gate_bias, n, F, hidden);
  matmul_forward<T>(up, x, w.up_proj, w.up_bias, n, F, hidden);
  swiglu_forward<T>(h, gate, up, n * F);
  backward_from<T>(dx, g, d_out, x, w, gate, up, h, n, hidden, F, arena);
  arena.release(mark);
}

void mlp_layer_forward(float* out, const float* x, const MlpWeights& w, int64_t T, Arena& arena,
                       LayerStash* stash) {
  const auto [hidden, F] = check_weights(w);
  if (stash == nullptr) {
    mlp_layer_forward_ref<float>(out, x, mlp_param_ptrs(w), T, hidden, F, arena);
    return;
  }
  // The reference's operations in its order, with h kept apart from gate.
  HLM_CHECK(stash->arena != nullptr, "mlp forward: stash without an arena");
  const MlpParamPtrs<const float*> p = mlp_param_ptrs(w);
  stash->buffers.assign(kStashSlots, nullptr);
  for (float*& b : stash->buffers) b = scratch<float>(*stash->arena, T * F);
  float *gate = stash->buffers[kGate], *up = stash->buffers[kUp], *h = stash->buffers[kH];
  matmul_forward<float>(gate, x, p.gate_proj, p.gate_bias, T, F, hidden);
  matmul_forward<float>(up, x, p.up_proj, p.up_bias, T, F, hidden);
  swiglu_forward<float>(h, gate, up, T * F);
  matmul_forward<float>(out, h, p.down_proj, p.down_bias, T, hidden, F);
  stash->output = scratch<float>(*stash->arena, T * hidden);
  std::copy_n(out, T * hidden, stash->output);
}

void mlp_layer_backward(float* dx, MlpGrads& grads, const float* d_out, const float* x, const MlpWeights& w,
                        int64_t T, Arena& arena, const LayerStash* stash) {
  const auto [hidden, F] = check_weights(w);
  const auto want = mlp_param_tensors(w);
  const auto have = mlp_param_tensors(grads);
  for (size_t i = 0; i < kMlpParamCount; ++i) {
    HLM_CHECK_INPUT(want[i].second->defined() == have[i].second->defined(), "mlp gradient ", have[i].first,
                    want[i].second->defined() ? " is missing" : " is defined but the weight is not");
    if (want[i].second->defined()) check_tensor(*have[i].second, want[i].second->shape(), have[i].first);
  }
  if (stash == nullptr) {
    mlp_layer_backward_ref<float>(dx, mlp_param_ptrs(grads), d_out, x, mlp_param_ptrs(w), T, hidden, F, arena);
    return;
  }
  HLM_CHECK(stash->buffers.size() == kStashSlots, "mlp backward: the stash was not filled by an mlp forward");
  HLM_CHECK(dx != x && dx != d_out, "mlp backward: dx may not alias x or d_out");
  backward_from<float>(dx, mlp_param_ptrs(grads), d_out, x, mlp_param_ptrs(w), stash->buffers[kGate],
                       stash->buffers[kUp], stash->buffers[kH], T, hidden, F, arena);
}

template void mlp_layer_forward_ref<float>(float*, const float*, const MlpParamPtrs<const float*>&, int64_t, int64_t,
                                           int64_t, Arena&);
template void mlp_layer_forward_ref<double>(double*, const double*, const MlpParamPtrs<const double*>&, int64_t,
                                            int64_t, int64_t, Arena&);
template void mlp_layer_backward_ref<float>(float*, const MlpParamPtrs<float*>&, const float*, const float*,
                                            const MlpParamPtrs<const float*>&, int64_t, int64_t, int64_t, Arena&);
template void mlp_layer_backward_ref<double>(double*, const MlpParamPtrs<double*>&, const double*, const double*,
                                             const MlpParamPtrs<const double*>&, int64_t, int64_t, int64_t, Arena&);

}  // namespace hlm
