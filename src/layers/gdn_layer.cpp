// Gated DeltaNet layer: the f32 entry points (shape checks, tensor -> pointer views) and the weight/state helpers.
// The math lives in gdn_layer_ref.cpp (templated on the scalar type).
#include "layers/gdn_layer.h"

#include <cstring>

#include "core/error.h"

namespace hlm {

namespace {

void check_tensor(const Tensor& t, Shape expect, const char* name) {
  HLM_CHECK_INPUT(t.defined(), "GDN weight ", name, " is missing");
  HLM_CHECK_INPUT(t.dtype() == DType::F32 && t.is_contiguous(), "GDN weight ", name, " must be contiguous f32");
  HLM_CHECK_INPUT(t.shape() == expect, "GDN weight ", name, " has shape ", t.shape().str(), ", expected ",
                  expect.str());
}

void check_dims(const GdnDims& d) {
  HLM_CHECK_INPUT(d.key_heads > 0 && d.value_heads > 0 && d.key_dim > 0 && d.value_dim > 0 && d.conv_kernel >= 1,
                  "bad GDN dims");
  HLM_CHECK_INPUT(d.value_heads % d.key_heads == 0, "GDN value heads ", d.value_heads,
                  " must be a multiple of key heads ", d.key_heads);
  HLM_CHECK_INPUT(d.norm_eps >= 0.0f, "GDN norm eps must be non-negative");
}

GdnBatchView batch_view(const TokenBatch& batch, int64_t hidden) {
  batch.validate();
  return {batch.total_tokens(), hidden, batch.cu_seqlens.data(), batch.num_sequences()};
}

template <class T>
GdnStatePtrs<T> state_ptrs(const GdnState& s, const GdnDims& d, int64_t n_seqs) {
  const int64_t Km1 = d.conv_kernel - 1;
  check_tensor(s.q_conv, {n_seqs, d.key_channels(), Km1}, "state q_conv");
  check_tensor(s.k_conv, {n_seqs, d.key_channels(), Km1}, "state k_conv");
  check_tensor(s.v_conv, {n_seqs, d.value_channels(), Km1}, "state v_conv");
  check_tensor(s.recurrent, {n_seqs, d.value_heads, d.value_dim, d.key_dim}, "state recurrent");
  return {static_cast<T*>(s.q_conv.raw()), static_cast<T*>(s.k_conv.raw()), static_cast<T*>(s.v_conv.raw()),
          static_cast<T*>(s.recurrent.raw())};
}

// Fills a pointer set from a tensor set through the two tables, checking that their rows agree by name.
template <class P, class S>
GdnParamPtrs<P> ptrs_from(S& set) {
  GdnParamPtrs<P> p{};
  const auto tensors = gdn_param_tensors(set);
  const auto fields = gdn_param_ptr_fields(p);
  for (size_t i = 0; i < kGdnParamCount; ++i) {
    HLM_CHECK(std::strcmp(tensors[i].first, fields[i].first) == 0, "GDN parameter tables disagree at ", i);
    HLM_CHECK_INPUT(tensors[i].second->dtype() == DType::F32 && tensors[i].second->is_contiguous(), "GDN tensor ",
                    tensors[i].first, " must be contiguous f32");
    *fields[i].second = static_cast<P>(tensors[i].second->raw());
  }
  return p;
}

}  // namespace

GdnWeights GdnWeights::zeros(const GdnDims& d, int64_t hidden) {
  check_dims(d);
  const int64_t Ck = d.key_channels(), Cv = d.value_channels(), Hv = d.value_heads, K = d.conv_kernel;
  GdnWeights w;
  w.q_proj.weight = Tensor::zeros({Ck, hidden});
  w.k_proj.weight = Tensor::zeros({Ck, hidden});
  w.v_proj.weight = Tensor::zeros({Cv, hidden});
  w.g_proj.weight = Tensor::zeros({Cv, hidden});
  w.a_proj.weight = Tensor::zeros({Hv, hidden});
  w.b_proj.weight = Tensor::zeros({Hv, hidden});
  w.o_proj.weight = Tensor::zeros({hidden, Cv});
  w.q_conv = Tensor::zeros({Ck, K});
  w.k_conv = Tensor::zeros({Ck, K});
  w.v_conv = Tensor::zeros({Cv, K});
  w.A_log = Tensor::zeros({Hv});
  w.dt_bias = Tensor::zeros({Hv});
  w.o_norm = Tensor::zeros({d.value_dim});
  return w;
}

GdnGrads GdnGrads::zeros_like(const GdnWeights& w) {
  GdnGrads g;
  const auto src = gdn_param_tensors(w);
  const auto dst = gdn_param_tensors(g);
  for (size_t i = 0; i < kGdnParamCount; ++i) *dst[i].second = Tensor::zeros(src[i].second->shape());
  return g;
}

void gdn_check_weights(const GdnWeights& w, const GdnDims& d) {
  check_dims(d);
  const int64_t D = w.q_proj.weight.defined() && w.q_proj.weight.rank() == 2 ? w.q_proj.in_features() : -1;
  HLM_CHECK_INPUT(D > 0, "GDN weight q_proj.weight must be [Hk·dk, hidden]");
  const GdnWeights expect = GdnWeights::zeros(d, D);
  const auto got = gdn_param_tensors(w);
  const auto want = gdn_param_tensors(expect);
  for (size_t i = 0; i < kGdnParamCount; ++i) check_tensor(*got[i].second, want[i].second->shape(), got[i].first);
  const auto linears = {&w.q_proj, &w.k_proj, &w.v_proj, &w.g_proj, &w.a_proj, &w.b_proj, &w.o_proj};
  for (const Linear* l : linears) HLM_CHECK_INPUT(!l->bias.defined(), "GDN projections have no bias");
}

GdnState GdnState::zeros(const GdnDims& d, int64_t n_seqs) {
  check_dims(d);
  const int64_t Km1 = d.conv_kernel - 1;
  return {Tensor::zeros({n_seqs, d.key_channels(), Km1}), Tensor::zeros({n_seqs, d.key_channels(), Km1}),
          Tensor::zeros({n_seqs, d.value_channels(), Km1}),
          Tensor::zeros({n_seqs, d.value_heads, d.value_dim, d.key_dim})};
}

GdnParamPtrs<const float*> gdn_param_ptrs(const GdnWeights& w) { return ptrs_from<const float*>(w); }
GdnParamPtrs<float*> gdn_param_ptrs(GdnGrads& g) { return ptrs_from<float*>(g); }

void gdn_layer_forward(float* out, const float* x, const GdnWeights& w, const GdnDims& dims, const TokenBatch& batch,
                       GdnState* state, Arena& arena, LayerStash* stash) {
  gdn_check_weights(w, dims);
  const GdnBatchView view = batch_view(batch, w.q_proj.in_features());
  GdnStatePtrs<float> sp;
  if (state) sp = state_ptrs<float>(*state, dims, view.n_seqs);
  gdn_layer_forward_ref<float>(out, x, gdn_param_ptrs(w), dims, view, state ? &sp : nullptr, arena, stash);
}

void gdn_layer_backward(float* dx, GdnGrads& grads, const float* d_out, const float* x, const GdnWeights& w,
                        const GdnDims& dims, const TokenBatch& batch, const GdnState* initial_state, Arena& arena,
                        const LayerStash* stash) {
  gdn_check_weights(w, dims);
  gdn_check_weights(grads, dims);
  const GdnBatchView view = batch_view(batch, w.q_proj.in_features());
  GdnStatePtrs<const float> sp;
  if (initial_state) sp = state_ptrs<const float>(*initial_state, dims, view.n_seqs);
  gdn_layer_backward_ref<float>(dx, gdn_param_ptrs(grads), d_out, x, gdn_param_ptrs(w), dims, view,
                                initial_state ? &sp : nullptr, arena, stash);
}

}  // namespace hlm
