#include <array>

#include "cli/subcommands.h"

namespace hlm {

static const std::array<SubcommandEntry, 2> kSubcommands{{
    {"inspect", add_inspect_command},
    {"run", add_run_command},
}};

std::span<const SubcommandEntry> subcommand_table() { return kSubcommands; }

}  // namespace hlm
