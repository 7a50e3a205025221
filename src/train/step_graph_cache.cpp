// The environment switch of the captured training steps (contract in step_graph_cache.h).
#include "train/step_graph_cache.h"

#include <cstdlib>
#include <cstring>

namespace hlm {

bool step_graphs_enabled(bool requested) {
  const char* env = std::getenv("HLM_CUDA_GRAPHS");
  if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0)) return false;
  return requested;
}

}  // namespace hlm
