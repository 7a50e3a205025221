// Training support for Model: a forward that keeps what the backward needs, the backward through the whole decoder,
// and the name -> (parameter, gradient) view the optimizer and the gradient goldens use.
//
// What is kept: the residual stream entering each layer and after each mixer add ([T, hidden] each, 2·L tensors);
// the stream before the final norm is rebuilt from the last one. Everything inside a layer (projections, attention probabilities, GDN
// states) is recomputed by the layer backwards, so activation memory is O(L·T·hidden) — per-layer recomputation is
// the only mode today.
//
// The loss is not part of the model: train/losses.h turns the final hidden states into a loss and hands back
// d_final_hidden [T, hidden] (and the LM head's gradient); Model::backward takes it from there.
#pragma once
#include <string>
#include <vector>

#include "models/model.h"

namespace hlm {

struct ForwardTrace {
  std::vector<Tensor> layer_in;   // [L] residual stream entering layer i (attn_in)
  std::vector<Tensor> mixer_out;  // [L] residual stream after layer i's mixer add (attn_out)
  Tensor final_hidden;            // [T, hidden] output of the final norm (input of the LM head)
};

// A gradient holder shaped like a model's weights (zero-filled; tied configs share one tensor for embedding and head).
DecoderWeights zero_grads_like(const ModelConfig& config);

struct NamedParameter {
  std::string name;  // canonical HF name
  std::string group; // tensor table group (embedding, attention, linear_attention, mlp, norm, lm_head)
  Tensor value;      // runtime shape (shares the model's storage)
  Tensor grad;       // same shape (shares the grads' storage)
};

// Every parameter once, in tensor-table order (a tied LM head is not listed apart from the embedding).
std::vector<NamedParameter> named_parameters(const ModelConfig& config, DecoderWeights& weights,
                                             DecoderWeights& grads);

ForwardTrace model_forward_train(Model& model, const TokenBatch& batch);

// grads += d loss / d weights, given d_final_hidden [T, hidden] (the gradient at the final norm's output). The LM
// head's own gradient comes from the loss (train/losses.h), not from here.
void model_backward(Model& model, const TokenBatch& batch, const ForwardTrace& trace, const Tensor& d_final_hidden,
                    DecoderWeights& grads);

}  // namespace hlm
