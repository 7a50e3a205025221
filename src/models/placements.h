// Full-attention layer placements for hybrid students: the five layouts of the seed paper's §6.2 / Figure 5
// (standard periodic, reverse periodic, sandwich, interleaved sandwich, endpoint spread) for any L layers and F
// full-attention layers, plus validated custom lists. Exact rules, with the seed's evidence and the remainder /
// rounding choices the seed leaves open, are in docs/placements.md; each row of placement_table() carries its rule
// as one line of text (shown by `hybridlm placements --help`). Non-goals: data-driven layer selection (HALO-style).
//
// Layers are 0-based (layer 0 is closest to the embeddings); every list returned is sorted, unique, in [0, L) and
// has exactly F entries. Errors are input errors (exit code 2 through the CLI).
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hlm {

enum class Placement { StandardPeriodic, ReversePeriodic, Sandwich, InterleavedSandwich, EndpointSpread };

struct PlacementInfo {
  Placement placement;
  std::string_view name;  // "standard_periodic", ...
  std::string_view rule;  // one-line rule, for help texts
  std::vector<int> (*layers)(int layers, int full);  // the list for L = layers, F = full (1 <= F <= L)
};

// THE table of placements, in the seed's order (Table 3). static_assert'ed to cover the enum.
std::span<const PlacementInfo> placement_table();
const PlacementInfo& placement_info(Placement placement);
// nullopt when `name` is none of the table's names.
std::optional<Placement> placement_from_name(std::string_view name);
// "standard_periodic, reverse_periodic, ..." for error messages and help.
std::string placement_names();

// The layers of `placement` for L layers and F full-attention layers (input error unless 1 <= F <= L).
std::vector<int> placement_layers(Placement placement, int layers, int full);

// F = round(fraction · L), halves rounded up; input error unless 0 < fraction <= 1 and the result is >= 1.
int placement_full_from_fraction(double fraction, int layers);

// Parses "i,j,k" (0-based, any order, spaces allowed): each in [0, L), no duplicates, and exactly `full` entries when
// given. Returns the sorted list; input error naming the offending entry otherwise.
std::vector<int> placement_parse_list(std::string_view text, int layers, std::optional<int> full);

// A placement argument resolved against a model: a name from the table (needs `full`) or a custom list.
struct ResolvedPlacement {
  std::string name;  // the table name, or "custom"
  std::vector<int> full_layers;
};
// `spec` is a table name or a list; for a name, `full` must be set. Unknown names are input errors listing the names.
ResolvedPlacement placement_resolve(std::string_view spec, int layers, std::optional<int> full);

// The rule of every placement, one line each, plus the rounding convention (for the help of `placements`, `convert`).
std::string placement_rules_text();

// "ARRRARRR..." (A = full attention, R = recurrent), the layout string `inspect` prints.
std::string placement_layout(const std::vector<int>& full_layers, int layers);

}  // namespace hlm
