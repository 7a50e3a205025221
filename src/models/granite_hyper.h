// Granite's four config scalars as the decoder applies them (embedding and residual multipliers, softmax scale =
// attention_multiplier, logits ÷ logits_scaling): shared by the dense Granite (granite.cpp) and Granite-4.0-H
// (granitemoehybrid.cpp).
#pragma once
#include "models/architecture.h"

namespace hlm {

DecoderHyper granite_hyper(const ModelConfig& c);

}  // namespace hlm
