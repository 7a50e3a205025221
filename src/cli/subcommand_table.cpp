#include <array>

#include "cli/subcommands.h"

namespace hlm {

void add_study_command(CLI::App& app, std::function<int()>& action);  // cmd_study.cpp
void add_scaling_command(CLI::App& app, std::function<int()>& action);  // cmd_scaling.cpp
void add_niah_command(CLI::App& app, std::function<int()>& action);   // cmd_niah.cpp
void add_synth_command(CLI::App& app, std::function<int()>& action);  // cmd_synth.cpp
void add_routing_command(CLI::App& app, std::function<int()>& action);  // cmd_routing.cpp

static const std::array<SubcommandEntry, 19> kSubcommands{{
    {"inspect", add_inspect_command},
    {"run", add_run_command},
    {"convert", add_convert_command},
    {"placements", add_placements_command},
    {"corpus", add_corpus_command},
    {"tokenize", add_tokenize_command},
    {"pretrain", add_pretrain_command},
    {"distill", add_distill_command},
    {"eval", add_eval_command},
    {"compare", add_compare_command},
    {"tokstats", add_tokstats_command},
    {"align", add_align_command},
    {"locality", add_locality_command},
    {"routing", add_routing_command},
    {"study", add_study_command},
    {"scaling", add_scaling_command},
    {"generate", add_generate_command},
    {"synth", add_synth_command},
    {"niah", add_niah_command},
}};

std::span<const SubcommandEntry> subcommand_table() { return kSubcommands; }

}  // namespace hlm
