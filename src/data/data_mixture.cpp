// Mixture arithmetic (see data_mixture.h). Pure functions of the language list and the config.
#include "data/data_mixture.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hlm {

std::map<std::string, double> mixture_shares(const std::vector<CorpusLanguage>& languages, double anchor_share,
                                             const double (&tier_ratio)[3]) {
  HLM_CHECK_INPUT(std::isfinite(anchor_share) && anchor_share >= 0.0 && anchor_share <= 1.0,
                  "mixture: anchor share ", anchor_share, " must lie in [0, 1]");
  for (int t = 0; t < 3; ++t)
    HLM_CHECK_INPUT(std::isfinite(tier_ratio[t]) && tier_ratio[t] > 0.0, "mixture: tier ratio ", tier_ratio[t],
                    " must be positive (high : mid : low)");
  int64_t anchors = 0;
  double tier_weight = 0.0;  // sum of per-language weights outside the anchor tier
  for (const CorpusLanguage& lang : languages) {
    const int tier = corpus_tier_index(lang.tier);
    if (tier == 0) ++anchors;
    else tier_weight += tier_ratio[tier - 1];
  }
  std::map<std::string, double> raw;
  double sum = 0.0;
  for (const CorpusLanguage& lang : languages) {
    const int tier = corpus_tier_index(lang.tier);
    const double share = tier == 0 ? anchor_share / static_cast<double>(anchors)
                                   : (1.0 - anchor_share) * tier_ratio[tier - 1] / tier_weight;
    raw[lang.code] = share;
    sum += share;
  }
  HLM_CHECK_INPUT(sum > 0.0, "mixture: every share is zero (anchor share ", anchor_share,
                  " with no anchor languages, or 1 with only tiered ones)");
  for (auto& [code, share] : raw) share /= sum;
  return raw;
}

std::map<std::string, int64_t> mixture_quotas(const std::vector<CorpusLanguage>& languages, const DataConfig& config) {
  HLM_CHECK_INPUT(config.token_budget >= 0, "mixture: token budget ", config.token_budget, " is negative");
  if (config.token_budget == 0) return {};
  const std::map<std::string, double> shares = mixture_shares(languages, config.anchor_share, config.tier_ratio);
  struct Part {
    std::string code;
    int64_t tokens;
    double remainder;
  };
  std::vector<Part> parts;
  int64_t assigned = 0;
  for (const CorpusLanguage& lang : languages) {  // corpus order, the tie-break below
    const double exact = shares.at(lang.code) * static_cast<double>(config.token_budget);
    const auto tokens = static_cast<int64_t>(std::floor(exact));
    parts.push_back({lang.code, tokens, exact - static_cast<double>(tokens)});
    assigned += tokens;
  }
  HLM_CHECK(assigned <= config.token_budget, "quota floors exceed the budget");
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.remainder > b.remainder; });
  for (size_t i = 0; assigned < config.token_budget; i = (i + 1) % parts.size(), ++assigned) ++parts[i].tokens;
  std::map<std::string, int64_t> quotas;
  for (const Part& p : parts) quotas[p.code] = p.tokens;
  return quotas;
}

}  // namespace hlm
