// The environment switch of the captured training steps (contract in step_graph_cache.h).
#include "train/step_graph_cache.h"

#include "core/env_switch.h"

namespace hlm {

bool step_graphs_enabled(bool requested) {
  return env_switch("HLM_CUDA_GRAPHS", true) && requested;  // the environment only turns graphs off
}

}  // namespace hlm
