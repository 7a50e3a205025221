// HYBRIDLM_FAULT fault points (fault_inject.h).
#include "train/fault_inject.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace hlm {
namespace {

struct FaultSpec {
  bool active = false;
  std::string point, action;
  long long nth = 1;
  long long seen = 0;
};

FaultSpec parse_fault(const char* text) {
  FaultSpec f;
  if (text == nullptr || *text == '\0') return f;
  const std::string s = text;
  const size_t at = s.find('@'), colon = s.rfind(':');
  HLM_CHECK_INPUT(at != std::string::npos && colon != std::string::npos && at < colon, kFaultEnv, "='", s,
                  "': expected <point>@<n>:<kill|fail|hang>");
  f.point = s.substr(0, at);
  f.action = s.substr(colon + 1);
  // Digits only (std::stoll alone would take " 2", "+2" and "2x" as 2); 18 of them cannot overflow.
  const std::string n = s.substr(at + 1, colon - at - 1);
  HLM_CHECK_INPUT(!n.empty() && n.size() <= 18 && n.find_first_not_of("0123456789") == std::string::npos, kFaultEnv,
                  "='", s, "': <n> is not a number");
  f.nth = std::stoll(n);
  HLM_CHECK_INPUT(f.nth >= 1 && (f.action == "kill" || f.action == "fail" || f.action == "hang"), kFaultEnv, "='",
                  s, "': expected <n> >= 1 and an action kill, fail or hang");
  f.active = true;
  return f;
}

}  // namespace

void fault_point(std::string_view point) {
  static std::mutex mutex;
  static FaultSpec spec = parse_fault(std::getenv(kFaultEnv));
  if (!spec.active || point != spec.point) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (++spec.seen != spec.nth) return;
  if (spec.action == "kill") {
    std::fprintf(stderr, "hybridlm: %s: killing the process at %s (pass %lld)\n", kFaultEnv, spec.point.c_str(),
                 spec.nth);
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  }
  if (spec.action == "hang") {
    std::fprintf(stderr, "hybridlm: %s: hanging the process at %s (pass %lld)\n", kFaultEnv, spec.point.c_str(),
                 spec.nth);
    std::fflush(stderr);
    std::fflush(stdout);
    // hybridlm installs no SIGTERM / SIGINT handler, so those end the process as usual (mpirun's SIGTERM after an
    // MPI_Abort included) and SIGKILL always does; pause() returns only after a caught signal, and the loop then
    // waits again. The mutex stays held: another thread reaching a fault point waits here too.
    for (;;) ::pause();
  }
  throw_input_error("injected fault at ", spec.point, " (", kFaultEnv, ")");
}

}  // namespace hlm
