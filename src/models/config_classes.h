// Facts of the HF config classes hybridlm mirrors (models/hf_config.cpp's table), for callers that write configs of
// their own (the study's teacher) and must agree with what the loader reads back.
#pragma once
#include <optional>
#include <string_view>

#include "models/hf_config.h"

namespace hlm {

struct ConfigClassFacts {
  std::string_view hf_class;  // architectures[0] in the files we write, e.g. "GraniteForCausalLM"
  bool granite_scalars;       // reads Granite's embedding/attention/residual multipliers and logits_scaling
};

// The facts of `architecture`'s config class; nullopt when hybridlm reads no config class for it.
std::optional<ConfigClassFacts> config_class_facts(Architecture architecture);

}  // namespace hlm
