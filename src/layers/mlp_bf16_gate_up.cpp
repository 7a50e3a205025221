// The HLM_MLP_BF16_GATE_UP and HLM_MLP_BF16_DH switches (mlp_bf16_gate_up.h).
#include "layers/mlp_bf16_gate_up.h"

#include "core/env_switch.h"

namespace hlm {

namespace {
OverridableSwitch g_mlp_bf16_gate_up{"HLM_MLP_BF16_GATE_UP", true};  // on since session 38 (mlp_bf16_gate_up.h)
OverridableSwitch g_mlp_bf16_dh{"HLM_MLP_BF16_DH", true};  // on since session 40 (mlp_bf16_gate_up.h)
}  // namespace

bool mlp_bf16_gate_up() { return g_mlp_bf16_gate_up.on(); }
void mlp_set_bf16_gate_up(int on) { g_mlp_bf16_gate_up.set(on); }

bool mlp_bf16_dh() { return g_mlp_bf16_dh.on(); }
void mlp_set_bf16_dh(int on) { g_mlp_bf16_dh.set(on); }

}  // namespace hlm
