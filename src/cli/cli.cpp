// cli_main: builds the CLI11 app from the subcommand table and maps errors to exit codes
// (2 = bad input, 1 = internal error), printing one clear message.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "models/finite_weights.h"

namespace hlm {

int cli_main(int argc, char** argv) {
  CLI::App app{"hybridlm: load, run, convert, distill and analyze hybrid-attention language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hybridlm 0.1.0");
  // Global options: accepted before or after the subcommand (subcommands inherit fallthrough to this level).
  bool allow_nonfinite = false;
  app.add_flag("--allow-nonfinite-weights", allow_nonfinite,
               "Load weights that hold NaN or infinity (warns instead of refusing; models/finite_weights.h)");
  app.fallthrough();
  std::function<int()> action;
  for (const SubcommandEntry& entry : subcommand_table()) entry.add(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  set_allow_nonfinite_weights(allow_nonfinite);
  try {
    return action();
  } catch (const Error& e) {
    std::fprintf(stderr, "hybridlm: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybridlm: internal error: %s\n", e.what());
    return 1;
  }
}

}  // namespace hlm
