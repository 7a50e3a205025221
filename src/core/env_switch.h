// On/off switches read from the environment (A/B runs of kernel and engine choices, e.g. HLM_PDL=off): one parser so
// that every switch takes the same words and refuses the same typos.
//   unset or empty → `fallback`;  on | 1 → true;  off | 0 → false;  anything else → input error naming the variable.
// Callers that read a switch on a hot path cache the answer (a function-local static), as the environment does not
// change while a process runs.
#pragma once

namespace hlm {

bool env_switch(const char* name, bool fallback);

}  // namespace hlm
