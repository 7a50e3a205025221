// Mixture arithmetic for the seed's Table C.1/C.2: English anchor 30%, then 8 high, 14 mid and 4 low languages with
// per-language shares 3.5 : 2 : 1 -> 0.7 × 3.5/60 = 4.08%, 0.7 × 2/60 = 2.33%, 0.7 × 1/60 = 1.17%.
#include <gtest/gtest.h>

#include "data/data_mixture.h"
#include "data_test_util.h"

using namespace hlm;

namespace {

std::vector<CorpusLanguage> seed_languages() {
  const char* high[] = {"rus_Cyrl", "hin_Deva", "cmn_Hani", "arb_Arab", "ind_Latn", "vie_Latn", "tur_Latn", "tam_Taml"};
  const char* mid[] = {"ell_Grek", "hye_Armn", "yue_Hani", "mya_Mymr", "heb_Hebr", "amh_Ethi", "hau_Latn",
                       "zsm_Latn", "fil_Latn", "tel_Telu", "mal_Mlym", "azj_Latn", "kaz_Cyrl", "khm_Khmr"};
  const char* low[] = {"gle_Latn", "bod_Tibt", "uig_Arab", "mnw_Mymr"};
  std::vector<CorpusLanguage> langs;
  auto add = [&](const char* code, const char* tier) {
    CorpusLanguage l;
    l.code = code;
    l.tier = tier;
    langs.push_back(l);
  };
  add("eng_Latn", "anchor");
  for (const char* c : high) add(c, "high");
  for (const char* c : mid) add(c, "mid");
  for (const char* c : low) add(c, "low");
  return langs;
}

}  // namespace

TEST(Mixture, SeedTableShares) {
  const auto langs = seed_languages();
  ASSERT_EQ(langs.size(), 27u);
  const DataConfig config;  // defaults: anchor 0.30, 3.5 : 2 : 1
  const auto shares = mixture_shares(langs, config.anchor_share, config.tier_ratio);
  double sum = 0.0;
  for (const auto& [code, s] : shares) sum += s;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  // The table prints percentages with two decimals: check that rounding, then the exact fractions.
  EXPECT_NEAR(shares.at("eng_Latn") * 100, 30.00, 0.005);
  EXPECT_NEAR(shares.at("rus_Cyrl") * 100, 4.08, 0.005);
  EXPECT_NEAR(shares.at("ell_Grek") * 100, 2.33, 0.005);
  EXPECT_NEAR(shares.at("gle_Latn") * 100, 1.17, 0.005);
  EXPECT_NEAR(shares.at("tam_Taml"), 0.7 * 3.5 / 60.0, 1e-15);
  EXPECT_NEAR(shares.at("khm_Khmr"), 0.7 * 2.0 / 60.0, 1e-15);
  EXPECT_NEAR(shares.at("mnw_Mymr"), 0.7 * 1.0 / 60.0, 1e-15);
}

TEST(Mixture, SeedTableQuotasSumToBudget) {
  DataConfig config;
  config.token_budget = 1'000'000'000;
  const auto quotas = mixture_quotas(seed_languages(), config);
  int64_t sum = 0;
  for (const auto& [code, q] : quotas) sum += q;
  EXPECT_EQ(sum, config.token_budget);
  EXPECT_EQ(quotas.at("eng_Latn"), 300'000'000);                  // 300M
  EXPECT_NEAR(static_cast<double>(quotas.at("hin_Deva")), 40'833'333.3, 1.0);  // 40.8M
  EXPECT_NEAR(static_cast<double>(quotas.at("heb_Hebr")), 23'333'333.3, 1.0);  // 23.3M
  EXPECT_NEAR(static_cast<double>(quotas.at("uig_Arab")), 11'666'666.7, 1.0);  // 11.7M
  config.token_budget = 0;
  EXPECT_TRUE(mixture_quotas(seed_languages(), config).empty());
}

TEST(Mixture, NormalisedWithoutAnchorsOrTiers) {
  const double ratio[3] = {3.5, 2.0, 1.0};
  std::vector<CorpusLanguage> tiers_only = {{"fra_Latn", "", "high", 0}, {"hin_Deva", "", "low", 0}};
  auto s = mixture_shares(tiers_only, 0.3, ratio);
  EXPECT_NEAR(s.at("fra_Latn"), 3.5 / 4.5, 1e-12);
  EXPECT_NEAR(s.at("hin_Deva"), 1.0 / 4.5, 1e-12);
  std::vector<CorpusLanguage> anchors = {{"eng_Latn", "", "anchor", 0}, {"fra_Latn", "", "anchor", 0}};
  s = mixture_shares(anchors, 0.3, ratio);
  EXPECT_NEAR(s.at("eng_Latn"), 0.5, 1e-12);
  test::expect_input_error([&] { mixture_shares(anchors, 1.5, ratio); }, {"anchor share"});
  const double bad[3] = {3.5, 0.0, 1.0};
  test::expect_input_error([&] { mixture_shares(anchors, 0.3, bad); }, {"tier ratio"});
  test::expect_input_error([&] { mixture_shares(tiers_only, 1.0, ratio); }, {"every share is zero"});
}
