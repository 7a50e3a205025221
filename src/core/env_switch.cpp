// env_switch (env_switch.h).
#include "core/env_switch.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace hlm {

bool env_switch(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  if (std::strcmp(v, "on") == 0 || std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "off") == 0 || std::strcmp(v, "0") == 0) return false;
  throw_input_error(name, "=", v, ": expected on or off (or 1 / 0)");
}

bool OverridableSwitch::on() const {
  if (const int s = set_.load(); s >= 0) return s != 0;
  int e = env_.load();
  if (e < 0) {
    e = env_switch(name_, fallback_) ? 1 : 0;  // the environment does not change while the process runs
    env_.store(e);
  }
  return e != 0;
}

void OverridableSwitch::set(int on) { set_.store(on < 0 ? -1 : (on != 0 ? 1 : 0)); }

}  // namespace hlm
