// The CPU inference engine (the reference implementation of inference_engine.h): runs Model::forward over the step's
// packed tokens with a mixer hook that replaces each token mixer by its stateful form —
//   full attention: q, k, v of the new tokens at their absolute positions (RoPE continues the sequence), k and v
//     appended to the layer's paged KV pool (ops/attention/attention_cache.h), queries attend over the cache;
//   GDN: gdn_layer_forward from the sequences' carried conv + recurrent state (layers/gdn_layer.h), updated in place;
// so norms, MLPs and the per-architecture multipliers are those of the forward itself. GDN states live in per-slot
// pools and are gathered into batch order for a step (a copy of Hv·dv·dk + conv floats per sequence and layer).
// The model must outlive the engine; one step at a time (the model's arena is scratch).
#pragma once
#include <memory>

#include "infer/inference_engine.h"
#include "models/model.h"

namespace hlm {

std::unique_ptr<InferenceEngine> make_cpu_engine(Model& model, const MemoryPlan& plan);

}  // namespace hlm
