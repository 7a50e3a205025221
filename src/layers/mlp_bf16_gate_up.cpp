// The HLM_MLP_BF16_GATE_UP switch (mlp_bf16_gate_up.h).
#include "layers/mlp_bf16_gate_up.h"

#include "core/env_switch.h"

namespace hlm {

namespace {
OverridableSwitch g_mlp_bf16_gate_up{"HLM_MLP_BF16_GATE_UP", true};  // on since session 38 (mlp_bf16_gate_up.h)
}  // namespace

bool mlp_bf16_gate_up() { return g_mlp_bf16_gate_up.on(); }
void mlp_set_bf16_gate_up(int on) { g_mlp_bf16_gate_up.set(on); }

}  // namespace hlm
