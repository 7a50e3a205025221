// The five full-attention placements (models/placements.h): hand-checked lists for the seed's budgets (L=36, F=9
// Qwen3-4B; L=40, F=10 Granite-4.1-3B; L=28, F=7), small cases with remainders, invariants over every L in 2..64 and
// F in 1..L, fraction rounding and custom-list validation. The lists below were worked out by hand from the rules in
// docs/placements.md, not printed by the code.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "models/placements.h"

using namespace hlm;

namespace {

using Lists = std::map<std::string, std::vector<int>>;

Lists all_placements(int L, int F) {
  Lists out;
  for (const PlacementInfo& info : placement_table())
    out[std::string(info.name)] = placement_layers(info.placement, L, F);
  return out;
}

void expect_lists(int L, int F, const Lists& want) {
  const Lists got = all_placements(L, F);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, layers] : want) EXPECT_EQ(got.at(name), layers) << name << " L=" << L << " F=" << F;
}

}  // namespace

TEST(Placements, TableNamesInSeedOrder) {
  std::vector<std::string> names;
  for (const PlacementInfo& info : placement_table()) names.emplace_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"standard_periodic", "reverse_periodic", "sandwich",
                                             "interleaved_sandwich", "endpoint_spread"}));
  for (const PlacementInfo& info : placement_table()) {
    EXPECT_EQ(placement_from_name(info.name), info.placement);
    EXPECT_FALSE(info.rule.empty());
  }
  EXPECT_FALSE(placement_from_name("periodic").has_value());
}

// Seed §6.2: Qwen3-4B, 9 of 36 layers. Standard periodic closes each block of four (3, 7, ..., 35); reverse periodic
// opens it, "three positions earlier" (0, 4, ..., 32).
TEST(Placements, Qwen3_4B_L36_F9) {
  expect_lists(36, 9, {{"standard_periodic", {3, 7, 11, 15, 19, 23, 27, 31, 35}},
                       {"reverse_periodic", {0, 4, 8, 12, 16, 20, 24, 28, 32}},
                       {"sandwich", {0, 1, 2, 3, 4, 32, 33, 34, 35}},             // 5 first, 4 last
                       {"interleaved_sandwich", {0, 1, 2, 10, 18, 25, 33, 34, 35}},  // 6 at the ends, 2 + 31j/4
                       {"endpoint_spread", {0, 4, 9, 13, 18, 22, 26, 31, 35}}});   // round(35j/8)
  const auto sp = placement_layers(Placement::StandardPeriodic, 36, 9);
  const auto rp = placement_layers(Placement::ReversePeriodic, 36, 9);
  for (size_t k = 0; k < sp.size(); ++k) EXPECT_EQ(sp[k] - rp[k], 3);  // "three positions earlier"
}

// Seed §6.2: Granite-4.1-3B, 10 of 40 layers.
TEST(Placements, Granite_L40_F10) {
  expect_lists(40, 10, {{"standard_periodic", {3, 7, 11, 15, 19, 23, 27, 31, 35, 39}},
                        {"reverse_periodic", {0, 4, 8, 12, 16, 20, 24, 28, 32, 36}},
                        {"sandwich", {0, 1, 2, 3, 4, 35, 36, 37, 38, 39}},
                        // E = round(20/3) = 7: 4 first, 3 last; 3 + round(34j/4) = 12 (8.5 up), 20, 29 (25.5 up)
                        {"interleaved_sandwich", {0, 1, 2, 3, 12, 20, 29, 37, 38, 39}},
                        {"endpoint_spread", {0, 4, 9, 13, 17, 22, 26, 30, 35, 39}}});  // round(39j/9)
}

TEST(Placements, L28_F7) {
  expect_lists(28, 7, {{"standard_periodic", {3, 7, 11, 15, 19, 23, 27}},
                       {"reverse_periodic", {0, 4, 8, 12, 16, 20, 24}},
                       {"sandwich", {0, 1, 2, 3, 25, 26, 27}},
                       {"interleaved_sandwich", {0, 1, 2, 10, 18, 26, 27}},  // E = 5 (3 + 2), 2 + 8j
                       {"endpoint_spread", {0, 5, 9, 14, 18, 23, 27}}});     // 4.5 -> 5, 13.5 -> 14, 22.5 -> 23
}

TEST(Placements, L12_F3) {
  expect_lists(12, 3, {{"standard_periodic", {3, 7, 11}},
                       {"reverse_periodic", {0, 4, 8}},
                       {"sandwich", {0, 1, 11}},
                       {"interleaved_sandwich", {0, 6, 11}},  // E = 2, middle 0 + round(11/2 = 5.5) = 6
                       {"endpoint_spread", {0, 6, 11}}});     // round(5.5) = 6
}

// F does not divide L: blocks [0,3) [3,6) [6,10) (floor bounds); halves round up.
TEST(Placements, L10_F3_Remainders) {
  expect_lists(10, 3, {{"standard_periodic", {2, 5, 9}},
                       {"reverse_periodic", {0, 3, 6}},
                       {"sandwich", {0, 1, 9}},
                       {"interleaved_sandwich", {0, 5, 9}},  // round(9/2 = 4.5) = 5
                       {"endpoint_spread", {0, 5, 9}}});
}

// Blocks [0,2) [2,5) [5,7) [7,10): the longer blocks are spread, not bunched at one end.
TEST(Placements, L10_F4_Remainders) {
  expect_lists(10, 4, {{"standard_periodic", {1, 4, 6, 9}},
                       {"reverse_periodic", {0, 2, 5, 7}},
                       {"sandwich", {0, 1, 8, 9}},
                       {"interleaved_sandwich", {0, 1, 5, 9}},  // E = 3 (0,1 | 9), middle 1 + round(8/2) = 5
                       {"endpoint_spread", {0, 3, 6, 9}}});
}

TEST(Placements, SingleFullLayer) {
  // F = 1: standard periodic keeps the last layer; every alternative keeps the first (seed §6.2: all four
  // alternatives use full attention in the first layer).
  expect_lists(8, 1, {{"standard_periodic", {7}},
                      {"reverse_periodic", {0}},
                      {"sandwich", {0}},
                      {"interleaved_sandwich", {0}},
                      {"endpoint_spread", {0}}});
}

TEST(Placements, InvariantsForAllSmallShapes) {
  for (int L = 2; L <= 64; ++L) {
    for (int F = 1; F <= L; ++F) {
      const Lists lists = all_placements(L, F);
      for (const auto& [name, layers] : lists) {
        SCOPED_TRACE(name + " L=" + std::to_string(L) + " F=" + std::to_string(F));
        ASSERT_EQ(static_cast<int>(layers.size()), F);
        ASSERT_TRUE(std::is_sorted(layers.begin(), layers.end()));
        ASSERT_EQ(std::set<int>(layers.begin(), layers.end()).size(), layers.size());
        ASSERT_GE(layers.front(), 0);
        ASSERT_LT(layers.back(), L);
        if (name != "standard_periodic") {
          ASSERT_EQ(layers.front(), 0);  // the alternatives start with attention
        }
      }
      const auto& sp = lists.at("standard_periodic");
      const auto& rp = lists.at("reverse_periodic");
      EXPECT_EQ(sp.back(), L - 1);
      if (F < L) {
        EXPECT_NE(sp, rp) << "L=" << L << " F=" << F;
      } else {
        EXPECT_EQ(sp, rp);
      }
      // Same blocks: each reverse layer opens the block that the standard layer closes.
      for (int k = 0; k < F; ++k) {
        EXPECT_LE(rp[k], sp[k]);
        if (k > 0) {
          EXPECT_EQ(rp[k], sp[k - 1] + 1);
        }
      }
      const auto& es = lists.at("endpoint_spread");
      if (F >= 2) {
        EXPECT_EQ(es.front(), 0);
        EXPECT_EQ(es.back(), L - 1);
      }
      // Sandwich: a prefix of ceil(F/2) and a suffix of floor(F/2).
      const auto& sw = lists.at("sandwich");
      for (int i = 0; i < F; ++i)
        EXPECT_EQ(sw[i], i < (F + 1) / 2 ? i : L - F + i) << "L=" << L << " F=" << F;
    }
  }
}

TEST(Placements, FullFractionRoundsHalfUp) {
  EXPECT_EQ(placement_full_from_fraction(0.25, 36), 9);
  EXPECT_EQ(placement_full_from_fraction(0.25, 40), 10);
  EXPECT_EQ(placement_full_from_fraction(0.25, 28), 7);
  EXPECT_EQ(placement_full_from_fraction(0.25, 10), 3);  // 2.5 -> 3
  EXPECT_EQ(placement_full_from_fraction(0.25, 2), 1);   // 0.5 -> 1
  EXPECT_EQ(placement_full_from_fraction(0.25, 3), 1);   // 0.75 -> 1
  EXPECT_EQ(placement_full_from_fraction(1.0, 5), 5);
  EXPECT_THROW(placement_full_from_fraction(0.1, 4), Error);  // 0.4 -> 0 layers
  EXPECT_THROW(placement_full_from_fraction(0.0, 4), Error);
  EXPECT_THROW(placement_full_from_fraction(1.5, 4), Error);
}

TEST(Placements, CustomListsAreValidated) {
  EXPECT_EQ(placement_parse_list("8, 0,4", 12, 3), (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(placement_parse_list("5", 12, std::nullopt), (std::vector<int>{5}));
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { placement_parse_list("0,12", 12, std::nullopt); }).find("out of range [0, 12)"),
            std::string::npos);
  EXPECT_NE(message([] { placement_parse_list("0,-1", 12, std::nullopt); }).find("out of range"), std::string::npos);
  EXPECT_NE(message([] { placement_parse_list("3,3", 12, std::nullopt); }).find("listed twice"), std::string::npos);
  EXPECT_NE(message([] { placement_parse_list("0,4", 12, 3); }).find("has 2 layers but 3"), std::string::npos);
  EXPECT_NE(message([] { placement_parse_list("0,,4", 12, std::nullopt); }).find("is not a layer index"),
            std::string::npos);
  EXPECT_NE(message([] { placement_parse_list("0,4x", 12, std::nullopt); }).find("'4x'"), std::string::npos);
}

TEST(Placements, ResolveNamesAndLists) {
  const ResolvedPlacement named = placement_resolve("reverse_periodic", 12, 3);
  EXPECT_EQ(named.name, "reverse_periodic");
  EXPECT_EQ(named.full_layers, (std::vector<int>{0, 4, 8}));
  const ResolvedPlacement custom = placement_resolve("1,5", 12, std::nullopt);
  EXPECT_EQ(custom.name, "custom");
  EXPECT_EQ(custom.full_layers, (std::vector<int>{1, 5}));
  EXPECT_THROW(placement_resolve("reverse_periodic", 12, std::nullopt), Error);  // F needed for a name
  EXPECT_THROW(placement_resolve("reverse_periodic", 12, 13), Error);            // F > L
  try {
    placement_resolve("middle", 12, 3);
    FAIL() << "no error for an unknown name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown placement 'middle'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("endpoint_spread"), std::string::npos);
  }
  EXPECT_EQ(placement_layout({0, 3}, 5), "ARRAR");
}
