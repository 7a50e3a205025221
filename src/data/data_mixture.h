// Mixture shares and token quotas (seed App. C.1, Table C.1): the "anchor" languages share anchor_share of the budget
// equally; every other language gets a per-language share proportional to its tier's entry of tier_ratio
// (high : mid : low, seed 3.5 : 2 : 1) out of the rest; shares are normalised to sum to 1 (so a corpus without anchor
// languages gives the whole budget to the tiers, and one with only anchors to them). With the seed's 1 anchor + 8 high
// + 14 mid + 4 low languages: 30%, 4.08%, 2.33%, 1.17%.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/data_stream.h"

namespace hlm {

// Share of the budget per language code (sums to 1). Input error for a bad anchor_share or tier_ratio.
std::map<std::string, double> mixture_shares(const std::vector<CorpusLanguage>& languages, double anchor_share,
                                             const double (&tier_ratio)[3]);

// Quotas in tokens: floor(share × budget) plus one token for the largest remainders, so they sum to the budget
// exactly. Empty when config.token_budget is 0.
std::map<std::string, int64_t> mixture_quotas(const std::vector<CorpusLanguage>& languages, const DataConfig& config);

}  // namespace hlm
