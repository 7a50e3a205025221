// On/off switches read from the environment (A/B runs of kernel and engine choices, e.g. HLM_PDL=off): one parser so
// that every switch takes the same words and refuses the same typos.
//   unset or empty → `fallback`;  on | 1 → true;  off | 0 → false;  anything else → input error naming the variable.
// Callers that read a switch on a hot path cache the answer (a function-local static), as the environment does not
// change while a process runs.
#pragma once
#include <atomic>

namespace hlm {

bool env_switch(const char* name, bool fallback);

// A switch that code may also set for the whole process (tests, A/B benches of a kernel choice): on() is the value
// set, when one is, else the environment's (env_switch(name, fallback), read on first use and kept). set(1 | 0) sets
// it; set(-1) goes back to the environment. Thread-safe; a malformed variable throws from on() until it is set.
// Meant for namespace-scope objects (constant-initialized).
class OverridableSwitch {
 public:
  constexpr OverridableSwitch(const char* name, bool fallback) : name_(name), fallback_(fallback) {}
  bool on() const;
  void set(int on);

 private:
  const char* name_;
  bool fallback_;
  mutable std::atomic<int> env_{-1};  // -1: not read yet
  std::atomic<int> set_{-1};          // -1: none set
};

}  // namespace hlm
