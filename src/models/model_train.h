// Training support for Model: a forward that keeps what the backward needs, the backward through the whole decoder,
// and the name -> (parameter, gradient) view the optimizer and the gradient goldens use.
//
// What is kept: the residual stream entering each layer, after each mixer add and before the final norm ([T, hidden]
// each, 2·L + 1 tensors). Then one of two modes (Recompute):
//   Layer (default): everything inside a layer (projections, attention inputs, GDN intermediates) is recomputed by
//     the layer backwards: activation memory O(L·T·hidden), about one extra forward of compute;
//   None: every layer's forward keeps its intermediates in the trace (layers/layer_stash.h), and the backward reads
//     them: no recomputation, activation memory O(L·T·(hidden + F + projections)). Gradients are bit-identical
//     between the two modes (same operations in the same order; a test checks it).
//
// The loss is not part of the model: train/losses.h turns the final hidden states into a loss and hands back
// d_final_hidden [T, hidden] (and the LM head's gradient); Model::backward takes it from there.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace hlm {

enum class Recompute { Layer, None };
Recompute recompute_from_name(const std::string& name);  // "layer" | "none" (input error otherwise)
const char* recompute_name(Recompute mode);

struct ForwardTrace {
  std::vector<Tensor> layer_in;   // [L] residual stream entering layer i (attn_in)
  std::vector<Tensor> mixer_out;  // [L] residual stream after layer i's mixer add (attn_out)
  Tensor final_stream;            // [T, hidden] residual stream entering the final norm
  Tensor final_hidden;            // [T, hidden] output of the final norm (input of the LM head)
  // Recompute::None only: the layers' kept intermediates and the arena holding them.
  std::shared_ptr<Arena> stash_arena;
  ModelStash stash;
  size_t kept_bytes() const;  // bytes of the tensors above and the stash arena
};

// A gradient holder shaped like a model's weights (zero-filled; tied configs share one tensor for embedding and head).
DecoderWeights zero_grads_like(const ModelConfig& config);
// The same tensors with unspecified contents (host_alloc_uninitialized: large ones stay untouched virtual memory):
// shapes only, for a device upload that never reads them (CudaModel::zeros_like under CudaZeroUploadScope).
DecoderWeights unfilled_weights_like(const ModelConfig& config);

struct NamedParameter {
  std::string name;  // canonical HF name
  std::string group; // tensor table group (embedding, attention, linear_attention, mlp, norm, lm_head)
  Tensor value;      // runtime shape (shares the model's storage)
  Tensor grad;       // same shape (shares the grads' storage)
};

// Every parameter once, in tensor-table order (a tied LM head is not listed apart from the embedding).
std::vector<NamedParameter> named_parameters(const ModelConfig& config, DecoderWeights& weights,
                                             DecoderWeights& grads);

ForwardTrace model_forward_train(Model& model, const TokenBatch& batch, Recompute recompute = Recompute::Layer);

// grads += d loss / d weights, given d_final_hidden [T, hidden] (the gradient at the final norm's output). The LM
// head's own gradient comes from the loss (train/losses.h), not from here.
void model_backward(Model& model, const TokenBatch& batch, const ForwardTrace& trace, const Tensor& d_final_hidden,
                    DecoderWeights& grads);

}  // namespace hlm
