#include "layers/mlp_layer.h"

#include "ops/swiglu/swiglu.h"

namespace hlm {

void mlp_layer_forward(float* out, const float* x, const MlpWeights& w, int64_t T, Arena& arena) {
  const int64_t F = w.gate_proj.out_features();
  const Arena::Mark mark = arena.mark();
  float* gate = static_cast<float*>(arena.allocate(sizeof(float) * T * F));  // [T, F]
  float* up = static_cast<float*>(arena.allocate(sizeof(float) * T * F));    // [T, F]
  linear_forward(gate, x, w.gate_proj, T);
  linear_forward(up, x, w.up_proj, T);
  swiglu_forward(gate, gate, up, T * F);
  linear_forward(out, gate, w.down_proj, T);
  arena.release(mark);
}

}  // namespace hlm
