// compare: Eq. 4 (δ̄) and Eq. 5 (R) on hand-made numbers, the Table C.4 layout, and the consistency checks.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/compare.h"

using namespace hlm;

namespace {

// Languages eng, fra, mnw with (student CE, teacher CE, KL).
EvalResult make_eval(std::vector<double> ce, std::vector<double> teacher_ce, std::vector<double> kl) {
  const std::vector<std::string> codes = {"eng_Latn", "fra_Latn", "mnw_Mymr"};
  const std::vector<std::string> tiers = {"anchor", "high", "low"};
  EvalResult r;
  for (size_t i = 0; i < codes.size(); ++i)
    r.languages.push_back({codes[i], tiers[i], 100, 90, ce[i], kl[i], teacher_ce[i]});
  eval_result_update_means(r);
  return r;
}

CompareRun run(const std::string& label, EvalResult eval) { return {label, "/runs/" + label, std::move(eval)}; }

}  // namespace

TEST(TrainerCompare, DeltaBarAndRelativeKlOnHandMadeNumbers) {
  const EvalResult base = make_eval({2.0, 3.0, 9.0}, {1.9, 2.8, 1.0}, {0.2, 0.1, 5.0});
  const EvalResult better = make_eval({1.95, 2.9, 9.0}, {1.9, 2.8, 1.0}, {0.1, 0.1, 0.001});
  const std::set<std::string> mon = {"mnw_Mymr"};
  // δ̄ = ((2.0 − 1.9) + (3.0 − 2.8)) / 2 = 0.15; with Mon: (0.1 + 0.2 + 8) / 3.
  EXPECT_NEAR(compare_delta_bar(base, mon), 0.15, 1e-12);
  EXPECT_NEAR(compare_delta_bar(base, {}), 8.3 / 3, 1e-12);
  EXPECT_NEAR(compare_delta_bar(better, mon), (0.05 + 0.1) / 2, 1e-12);
  // R = exp(mean(log(0.1 / 0.2), log(0.1 / 0.1))) = sqrt(0.5).
  EXPECT_NEAR(compare_relative_kl(better, base, mon), std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(compare_relative_kl(base, base, mon), 1.0, 1e-15);
  EXPECT_NEAR(compare_relative_kl(better, base, {}), std::cbrt(0.5 * 1.0 * (0.001 / 5.0)), 1e-12);

  const CompareTable t = compare_runs(run("SP", base), {run("SP", base), run("RP", better)}, mon);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"SP", "RP"}));  // baseline once, first
  EXPECT_EQ(t.tiers, (std::vector<std::string>{"E", "H", "L"}));
  EXPECT_EQ(t.excluded, (std::vector<bool>{false, false, true}));
  EXPECT_NEAR(t.relative_kl[1], std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(t.delta_bar[0], 0.15, 1e-12);
  EXPECT_NEAR(t.ce_gap[1][1], 0.1, 1e-12);

  const std::string md = compare_table_markdown(t);
  EXPECT_NE(md.find("| Language | Tier | Metric | SP | RP |"), std::string::npos) << md;
  EXPECT_NE(md.find("| eng_Latn | E | D_KL | 0.200 | 0.100 |"), std::string::npos) << md;
  EXPECT_NE(md.find("|  |  | L_LM gap | 0.100 | 0.050 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| mnw_Mymr† | L | D_KL |"), std::string::npos) << md;
  EXPECT_NE(md.find("| Mean |  | R | 1.000 | 0.707 |"), std::string::npos) << md;
  EXPECT_NE(md.find("|  |  | δ̄ | 0.150 | 0.075 |"), std::string::npos) << md;
  const std::string csv = compare_table_csv(t);
  EXPECT_NE(csv.find("language,tier,metric,SP,RP\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("mean,,R,1,0.707106781\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("mnw_Mymr (excluded),L,D_KL,5,0.001\n"), std::string::npos) << csv;
}

TEST(TrainerCompare, RejectsRunsThatDoNotCompare) {
  const EvalResult base = make_eval({2.0, 3.0, 9.0}, {1.9, 2.8, 1.0}, {0.2, 0.1, 5.0});
  // Another teacher (or another held-out set): the teacher's CE differs.
  const EvalResult other_teacher = make_eval({2.0, 3.0, 9.0}, {1.8, 2.8, 1.0}, {0.2, 0.1, 5.0});
  EXPECT_THROW(compare_runs(run("SP", base), {run("X", other_teacher)}, {}), Error);
  EvalResult fewer = base;
  fewer.languages.pop_back();
  EXPECT_THROW(compare_runs(run("SP", base), {run("X", fewer)}, {}), Error);
  EvalResult no_teacher = base;
  for (LanguageEval& l : no_teacher.languages) l.kl.reset(), l.teacher_ce.reset();
  EXPECT_THROW(compare_runs(run("SP", base), {run("X", no_teacher)}, {}), Error);
  EXPECT_THROW(compare_runs(run("SP", base), {}, {"xxx_Latn"}), Error);  // unknown excluded language
  EvalResult zero = base;
  zero.languages[0].kl = 0.0;
  EXPECT_THROW(compare_relative_kl(base, zero, {}), Error);
}
