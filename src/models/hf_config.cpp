// TEMPORARY: parsing is being written; only attention_scale exists so far.
#include "models/hf_config.h"

#include <cmath>

namespace hlm {
float ModelConfig::attention_scale() const {
  return attention_multiplier ? static_cast<float>(*attention_multiplier)
                              : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}
}  // namespace hlm
