// evaluate() against a direct computation: full [T, V] logits from Model::forward, log-softmax in double, then
//   CE_λ = mean over tokens with a target of −log p_S(target),  KL_λ = mean over all tokens of Σ_v p_T (log p_T − log p_S)
// (tolerance 1e-5 relative: the evaluator's chunked LM head sums in a different order and rounds per token to f32).
// Also: the rows per pass do not change the result, and the JSON form round-trips.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "data/data_stream.h"
#include "support/run_binary.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;

namespace {

// Two languages, rows of 16 tokens, document boundaries inside rows, targets as the packer makes them.
HeldOutSet hand_made_set() {
  HeldOutSet set;
  uint64_t state = 99;
  const auto next_id = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>((state >> 33) % 256);
  };
  for (int lang = 0; lang < 2; ++lang) {
    PackedBatch b;
    b.rows = 3;
    const std::vector<std::vector<int64_t>> cuts = {{0, 5, 16}, {16, 32}, {32, 40, 41, 48}};
    b.batch.cu_seqlens = {0};
    for (const auto& row : cuts)
      for (size_t i = 1; i < row.size(); ++i) b.batch.cu_seqlens.push_back(row[i]);
    for (int t = 0; t < 48; ++t) b.batch.ids.push_back(next_id());
    b.targets.assign(48, kIgnoreTarget);
    for (size_t s = 0; s + 1 < b.batch.cu_seqlens.size(); ++s)
      for (int64_t t = b.batch.cu_seqlens[s]; t + 1 < b.batch.cu_seqlens[s + 1]; ++t)
        b.targets[t] = b.batch.ids[t + 1];
    b.language.assign(48, static_cast<int16_t>(lang));
    set.languages.push_back(lang == 0 ? "eng_Latn" : "fra_Latn");
    set.per_language.push_back(std::move(b));
  }
  return set;
}

std::vector<double> log_softmax_rows(const Tensor& logits, int64_t t) {
  const int64_t V = logits.dim(1);
  const float* z = logits.f32() + t * V;
  double max = z[0];
  for (int64_t v = 1; v < V; ++v) max = std::max(max, static_cast<double>(z[v]));
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - max);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) out[v] = z[v] - max - std::log(sum);
  return out;
}

}  // namespace

TEST(TrainerEval, MatchesDirectComputation) {
  test::use_one_thread();
  test::ScratchDir scratch("trainer-eval");
  test::write_tiny_teacher_and_student(scratch.path());
  Model teacher = Model::load(scratch.path() / "teacher");
  Model student = Model::load(scratch.path() / "student");
  const HeldOutSet set = hand_made_set();
  const EvalResult r = evaluate(student, &teacher, set, 2);
  ASSERT_EQ(r.languages.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    const PackedBatch& b = set.per_language[l];
    const Tensor zs = student.forward(b.batch, {.all_logits = true}).clone();
    const Tensor zt = teacher.forward(b.batch, {.all_logits = true}).clone();
    double ce = 0.0, teacher_ce = 0.0, kl = 0.0;
    int64_t counted = 0;
    for (int64_t t = 0; t < b.batch.total_tokens(); ++t) {
      const std::vector<double> ls = log_softmax_rows(zs, t), lt = log_softmax_rows(zt, t);
      for (size_t v = 0; v < ls.size(); ++v) kl += std::exp(lt[v]) * (lt[v] - ls[v]);
      if (b.targets[t] < 0) continue;
      ce -= ls[b.targets[t]];
      teacher_ce -= lt[b.targets[t]];
      ++counted;
    }
    const LanguageEval& e = r.languages[l];
    EXPECT_EQ(e.code, set.languages[l]);
    EXPECT_EQ(e.tokens, 48);
    EXPECT_EQ(e.ce_tokens, counted);
    EXPECT_NEAR(e.ce, ce / counted, 1e-5 * ce / counted);
    EXPECT_NEAR(*e.teacher_ce, teacher_ce / counted, 1e-5 * teacher_ce / counted);
    EXPECT_NEAR(*e.kl, kl / 48, 1e-5 * kl / 48 + 1e-9);
    std::printf("%s: ce %.6f (direct %.6f), kl %.3g (direct %.3g)\n", e.code.c_str(), e.ce, ce / counted, *e.kl,
                kl / 48);
  }
  EXPECT_NEAR(r.mean_ce, (r.languages[0].ce + r.languages[1].ce) / 2, 1e-12);
  EXPECT_NEAR(*r.mean_ce_gap,
              (r.languages[0].ce - *r.languages[0].teacher_ce + r.languages[1].ce - *r.languages[1].teacher_ce) / 2,
              1e-12);

  // Rows per pass: each row's values do not depend on its neighbours (1e-6: BLAS may block differently).
  const EvalResult one = evaluate(student, &teacher, set, 1);
  EXPECT_NEAR(one.mean_ce, r.mean_ce, 1e-6 * r.mean_ce);
  EXPECT_NEAR(*one.mean_kl, *r.mean_kl, 1e-6 * *r.mean_kl + 1e-12);
  // Without a teacher: CE only.
  const EvalResult alone = evaluate(student, nullptr, set);
  EXPECT_FALSE(alone.mean_kl.has_value());
  EXPECT_NEAR(alone.mean_ce, r.mean_ce, 1e-6 * r.mean_ce);

  // JSON round trip.
  const EvalResult back = eval_result_from_json(eval_result_to_json(r, {{"split", "test"}}), "memory");
  ASSERT_EQ(back.languages.size(), 2u);
  EXPECT_EQ(back.languages[1].ce, r.languages[1].ce);
  EXPECT_EQ(back.mean_kl, r.mean_kl);
  EXPECT_THROW(eval_result_from_json(nlohmann::json{{"format", "other"}}, "x.json"), Error);
}
