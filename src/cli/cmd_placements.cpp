// `hybridlm placements --layers L (--full F | --full-fraction X) [--json]`: the five full-attention placements of the
// seed's Figure 5 for L layers (models/placements.h; rules in docs/placements.md and in this command's help).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/number_checks.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "models/placements.h"

namespace hlm {
namespace {

struct PlacementsOptions {
  int layers = 0;
  std::optional<int> full;
  std::optional<double> full_fraction;
  bool json = false;
};

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

int run_placements(const PlacementsOptions& o) {
  HLM_CHECK_INPUT(o.full || o.full_fraction, "placements: give --full F or --full-fraction X");
  const int full = o.full ? *o.full : placement_full_from_fraction(*o.full_fraction, o.layers);
  nlohmann::json j = nlohmann::json::object();
  for (const PlacementInfo& info : placement_table())
    j[std::string(info.name)] = placement_layers(info.placement, o.layers, full);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("L = %d layers, F = %d full-attention layers", o.layers, full);
  if (!o.full) std::printf(" (round(%g x %d), halves up)", *o.full_fraction, o.layers);
  std::printf("; layer 0 is closest to the embeddings; A = full attention, R = Gated DeltaNet\n");
  for (const PlacementInfo& info : placement_table()) {
    const std::vector<int> layers = j[std::string(info.name)].get<std::vector<int>>();
    std::printf("  %-21s %s  %s\n", std::string(info.name).c_str(), placement_layout(layers, o.layers).c_str(),
                join(layers).c_str());
  }
  return 0;
}

}  // namespace

void add_placements_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<PlacementsOptions>();
  CLI::App* cmd = app.add_subcommand("placements", "List the five full-attention layer placements for L layers");
  cmd->footer(placement_rules_text() +
              "Examples:\n"
              "  hybridlm placements --layers 36 --full 9          # Qwen3-4B at the seed's 25% budget\n"
              "  hybridlm placements --layers 40 --full-fraction 0.25\n"
              "  hybridlm placements --layers 28 --full 7 --json | jq .endpoint_spread");
  cmd->add_option("--layers", options->layers, "Number of decoder layers L")->required()->check(positive_number());
  CLI::Option* full = cmd->add_option("--full", options->full, "Number of full-attention layers F (1..L)")
                          ->check(positive_number());
  CLI::Option* fraction =
      cmd->add_option("--full-fraction", options->full_fraction, "Fraction of full-attention layers: F = round(X * L)")
          ->check(CLI::Range(0.0, 1.0));
  full->excludes(fraction);
  fraction->excludes(full);
  cmd->add_flag("--json", options->json, "Print one JSON object {placement name: [layers]} instead of text");
  cmd->callback([options, &action] { action = [options] { return run_placements(*options); }; });
}

}  // namespace hlm
