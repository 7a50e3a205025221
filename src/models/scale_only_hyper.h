// The decoder scalars of the Llama-family architectures without multipliers (Qwen3 and its MoE, hybrid and 3.5 / Next
// variants, OLMo-3, OLMo-Hybrid): every DecoderHyper scalar 1 except the softmax scale (config attention_scale()).
#pragma once
#include "models/architecture.h"

namespace hlm {

DecoderHyper scale_only_hyper(const ModelConfig& c);

}  // namespace hlm
