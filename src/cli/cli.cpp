#include <cstdio>

#include "cli/commands.h"

namespace hlm {
int cli_main(int argc, char** argv) {
  std::puts("hybridlm: stub");
  return 0;
}
}  // namespace hlm
