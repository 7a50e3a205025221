// The five placements of the seed's Figure 5 as integer formulas (docs/placements.md gives the evidence and the
// remainder rules). All arithmetic is integer: no floating-point rounding decides a layer.
#include "models/placements.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace hlm {
namespace {

// floor(num / den + 1/2) for num >= 0, den > 0: round to nearest, halves up.
int64_t round_div(int64_t num, int64_t den) { return (2 * num + den) / (2 * den); }

// Block k of F blocks tiling [0, L): [k·L/F, (k+1)·L/F) with floor division, so sizes are floor(L/F) or ceil(L/F)
// and the longer blocks are spread Bresenham-style (L=10, F=3: [0,3) [3,6) [6,10); L=10, F=4: sizes 2,3,2,3).
int block_start(int k, int L, int F) { return static_cast<int>(int64_t{k} * L / F); }

std::vector<int> standard_periodic(int L, int F) {
  std::vector<int> out;
  for (int k = 0; k < F; ++k) out.push_back(block_start(k + 1, L, F) - 1);  // closes block k
  return out;
}

std::vector<int> reverse_periodic(int L, int F) {
  std::vector<int> out;
  for (int k = 0; k < F; ++k) out.push_back(block_start(k, L, F));  // opens block k
  return out;
}

// `count` layers at the two ends: ceil(count/2) first (the odd one goes to the front), floor(count/2) last.
void ends(std::vector<int>& out, int L, int count) {
  const int front = (count + 1) / 2, back = count / 2;
  for (int i = 0; i < front; ++i) out.push_back(i);
  for (int i = L - back; i < L; ++i) out.push_back(i);
}

std::vector<int> sandwich(int L, int F) {
  std::vector<int> out;
  ends(out, L, F);
  return out;
}

// E = round(2F/3) at the ends (split as in sandwich); the other M = F - E evenly spaced strictly between the last
// front layer (front-1) and the first back layer (L-back, or the virtual layer L when back = 0):
// front-1 + round(j·(R+1)/(M+1)), j = 1..M, where R = L - E is the length of the middle.
std::vector<int> interleaved_sandwich(int L, int F) {
  const int E = static_cast<int>(round_div(int64_t{2} * F, 3));
  const int front = (E + 1) / 2, M = F - E, R = L - E;
  std::vector<int> out;
  ends(out, L, E);
  for (int j = 1; j <= M; ++j) out.push_back(front - 1 + static_cast<int>(round_div(int64_t{j} * (R + 1), M + 1)));
  std::sort(out.begin(), out.end());
  return out;
}

// round(j·(L-1)/(F-1)), j = 0..F-1 (numpy's linspace(0, L-1, F) rounded, halves up); F = 1: layer 0.
std::vector<int> endpoint_spread(int L, int F) {
  if (F == 1) return {0};
  std::vector<int> out;
  for (int j = 0; j < F; ++j) out.push_back(static_cast<int>(round_div(int64_t{j} * (L - 1), F - 1)));
  return out;
}

const std::array<PlacementInfo, 5> kPlacements{{
    {Placement::StandardPeriodic, "standard_periodic",
     "F blocks [k*L/F, (k+1)*L/F) (floor division); full attention closes each block",
     standard_periodic},
    {Placement::ReversePeriodic, "reverse_periodic",
     "the same blocks as standard_periodic; full attention opens each block", reverse_periodic},
    {Placement::Sandwich, "sandwich", "the first ceil(F/2) and the last floor(F/2) layers", sandwich},
    {Placement::InterleavedSandwich, "interleaved_sandwich",
     "E = round(2F/3) at the ends as in sandwich; the other F-E evenly spaced between the two end groups",
     interleaved_sandwich},
    {Placement::EndpointSpread, "endpoint_spread",
     "round(j*(L-1)/(F-1)) for j = 0..F-1: first and last layer, the rest evenly spaced (F = 1: layer 0)",
     endpoint_spread},
}};
static_assert(kPlacements.size() == static_cast<size_t>(Placement::EndpointSpread) + 1, "one row per Placement");

void check_counts(int layers, int full) {
  HLM_CHECK_INPUT(layers >= 1, "number of layers must be >= 1, got ", layers);
  HLM_CHECK_INPUT(full >= 1 && full <= layers, "number of full-attention layers must be in [1, ", layers,
                  "], got ", full);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool looks_like_list(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return (ch >= '0' && ch <= '9') || ch == ',' || ch == ' ' || ch == '\t' || ch == '-' || ch == '+';
  });
}

}  // namespace

std::span<const PlacementInfo> placement_table() { return kPlacements; }

const PlacementInfo& placement_info(Placement placement) {
  for (const PlacementInfo& info : kPlacements)
    if (info.placement == placement) return info;
  throw_internal_error("placements: no row for placement ", static_cast<int>(placement));
}

std::optional<Placement> placement_from_name(std::string_view name) {
  for (const PlacementInfo& info : kPlacements)
    if (info.name == name) return info.placement;
  return std::nullopt;
}

std::string placement_names() {
  std::string out;
  for (const PlacementInfo& info : kPlacements) out += (out.empty() ? "" : ", ") + std::string(info.name);
  return out;
}

std::string placement_rules_text() {
  std::string out = "Placements (L layers, F full-attention layers, 0-based; docs/placements.md):\n";
  for (const PlacementInfo& info : kPlacements)
    out += "  " + std::string(info.name) + ": " + std::string(info.rule) + "\n";
  out += "  round() is to nearest with halves up; --full-fraction X gives F = round(X * L).\n";
  return out;
}

std::vector<int> placement_layers(Placement placement, int layers, int full) {
  check_counts(layers, full);
  std::vector<int> out = placement_info(placement).layers(layers, full);
  HLM_CHECK(static_cast<int>(out.size()) == full && std::is_sorted(out.begin(), out.end()) &&
                std::adjacent_find(out.begin(), out.end()) == out.end() && out.front() >= 0 && out.back() < layers,
            "placement ", placement_info(placement).name, " broke its invariants for L=", layers, ", F=", full);
  return out;
}

int placement_full_from_fraction(double fraction, int layers) {
  HLM_CHECK_INPUT(layers >= 1, "number of layers must be >= 1, got ", layers);
  HLM_CHECK_INPUT(std::isfinite(fraction) && fraction > 0.0 && fraction <= 1.0,
                  "full-attention fraction must be in (0, 1], got ", fraction);
  const int full = static_cast<int>(std::floor(fraction * layers + 0.5));
  HLM_CHECK_INPUT(full >= 1, "full-attention fraction ", fraction, " of ", layers,
                  " layers rounds to 0 full-attention layers");
  return full;
}

std::vector<int> placement_parse_list(std::string_view text, int layers, std::optional<int> full) {
  HLM_CHECK_INPUT(layers >= 1, "number of layers must be >= 1, got ", layers);
  std::vector<int> out;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    int value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    HLM_CHECK_INPUT(!item.empty() && ec == std::errc() && end == item.data() + item.size(), "layer list '", text,
                    "': '", item, "' is not a layer index (expected comma-separated 0-based integers)");
    HLM_CHECK_INPUT(value >= 0 && value < layers, "layer list '", text, "': layer ", value, " is out of range [0, ",
                    layers, ")");
    HLM_CHECK_INPUT(std::find(out.begin(), out.end(), value) == out.end(), "layer list '", text, "': layer ", value,
                    " is listed twice");
    out.push_back(value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (full)
    HLM_CHECK_INPUT(static_cast<int>(out.size()) == *full, "layer list '", text, "' has ", out.size(),
                    " layers but ", *full, " full-attention layers were asked for");
  std::sort(out.begin(), out.end());
  return out;
}

ResolvedPlacement placement_resolve(std::string_view spec, int layers, std::optional<int> full) {
  if (const std::optional<Placement> p = placement_from_name(spec)) {
    HLM_CHECK_INPUT(full.has_value(), "placement '", spec, "' needs the number of full-attention layers");
    return {std::string(spec), placement_layers(*p, layers, *full)};
  }
  HLM_CHECK_INPUT(looks_like_list(spec), "unknown placement '", spec, "': expected one of ", placement_names(),
                  ", or a comma-separated list of 0-based layer indices");
  return {"custom", placement_parse_list(spec, layers, full)};
}

std::string placement_layout(const std::vector<int>& full_layers, int layers) {
  std::string out(static_cast<size_t>(std::max(layers, 0)), 'R');
  for (int i : full_layers) {
    HLM_CHECK(i >= 0 && i < layers, "layer ", i, " out of range [0, ", layers, ")");
    out[static_cast<size_t>(i)] = 'A';
  }
  return out;
}

}  // namespace hlm
