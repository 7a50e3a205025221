// The SwiGLU MLP of Llama-family decoders (HF `mlp`): down_proj(silu(gate_proj(x)) ⊙ up_proj(x)).
// x [T, hidden] (already normalised) -> out [T, hidden].
#pragma once
#include "core/arena.h"
#include "layers/linear.h"

namespace hlm {

struct MlpWeights {
  Linear gate_proj;  // [F, hidden]
  Linear up_proj;    // [F, hidden]
  Linear down_proj;  // [hidden, F]
};

void mlp_layer_forward(float* out, const float* x, const MlpWeights& w, int64_t T, Arena& arena);

}  // namespace hlm
