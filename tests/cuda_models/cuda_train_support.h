// One forward_train + backward of a CUDA model from a given final-hidden gradient into fresh zero gradients, for the
// tests that compare two training forms bit for bit (test_cuda_residual_snapshots.cpp,
// test_cuda_gdn_l2norm_fusion.cpp): the final hidden states and every parameter gradient on the host; `inspect`
// (optional) sees the trace before it is dropped (to download more of it). And the loop over the training forms.
#pragma once
#include <functional>
#include <string>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_train.h"
#include "models/model_train.h"

namespace hlm::test {

struct CudaTrainResult {
  Tensor final_hidden;   // [T, hidden]
  DecoderWeights grads;  // every parameter's gradient
};

inline CudaTrainResult cuda_forward_backward(CudaModel& model, const TokenBatch& batch, const CudaTensor& d_final,
                                             Recompute recompute,
                                             const std::function<void(const CudaTrainTrace&)>& inspect = {}) {
  CudaContext& ctx = cuda_context();
  CudaModel grads = CudaModel::zeros_like(model.config(), ctx);
  const CudaTrainTrace trace = model.forward_train(batch, recompute);
  model.backward(trace, d_final.data<float>(), grads);
  if (inspect) inspect(trace);
  CudaTrainResult out{cuda_download(ctx, trace.final_hidden), zero_grads_like(model.config())};
  grads.download_into(out.grads);
  return out;
}

// fn(mode, recompute) once per training form the bit-identity tests cover: fp32 and bf16 compute (set on `model`) ×
// kept and recomputed activations; `mode` names the form ("<label> bf16 recompute").
template <class F>
void for_each_train_mode(CudaModel& model, const std::string& label, const F& fn) {
  for (const bool bf16 : {false, true}) {
    model.set_bf16_compute(bf16);
    for (const Recompute recompute : {Recompute::None, Recompute::Layer})
      fn(label + (bf16 ? " bf16" : " fp32") + (recompute == Recompute::None ? " kept activations" : " recompute"),
         recompute);
  }
}

}  // namespace hlm::test
