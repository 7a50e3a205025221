#include <array>

#include "cli/subcommands.h"

namespace hlm {

static const std::array<SubcommandEntry, 4> kSubcommands{{
    {"inspect", add_inspect_command},
    {"run", add_run_command},
    {"convert", add_convert_command},
    {"placements", add_placements_command},
}};

std::span<const SubcommandEntry> subcommand_table() { return kSubcommands; }

}  // namespace hlm
