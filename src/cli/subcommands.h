// The subcommand table: each entry registers one CLI11 subcommand (options, help with examples) and, when it is the
// one parsed, sets `action` to the function that runs it. One file per subcommand (cmd_<name>.cpp).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <span>
#include <string_view>

namespace hlm {

struct SubcommandEntry {
  std::string_view name;
  void (*add)(CLI::App& app, std::function<int()>& action);
};

std::span<const SubcommandEntry> subcommand_table();

void add_inspect_command(CLI::App& app, std::function<int()>& action);
void add_run_command(CLI::App& app, std::function<int()>& action);
void add_convert_command(CLI::App& app, std::function<int()>& action);
void add_placements_command(CLI::App& app, std::function<int()>& action);
void add_corpus_command(CLI::App& app, std::function<int()>& action);
void add_tokenize_command(CLI::App& app, std::function<int()>& action);
void add_pretrain_command(CLI::App& app, std::function<int()>& action);
void add_distill_command(CLI::App& app, std::function<int()>& action);
void add_eval_command(CLI::App& app, std::function<int()>& action);
void add_compare_command(CLI::App& app, std::function<int()>& action);
void add_tokstats_command(CLI::App& app, std::function<int()>& action);
void add_align_command(CLI::App& app, std::function<int()>& action);
void add_locality_command(CLI::App& app, std::function<int()>& action);
void add_generate_command(CLI::App& app, std::function<int()>& action);

}  // namespace hlm
