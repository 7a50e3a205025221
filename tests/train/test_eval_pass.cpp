// The evaluation's pass interface (train/eval.h): eval_pass_sums routes each token's values to its language id in
// token order, evaluate() is evaluate_with() over the CPU pass, and a pass that is not the CPU's (as a device's) is
// driven the same way: rows split into passes of rows_per_pass, sums of every language id added per set language.
#include <gtest/gtest.h>

#include <cmath>

#include "data/data_stream.h"
#include "models/model.h"
#include "support/run_binary.h"
#include "train/eval.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;

namespace {

// Two documents per language id (0, 1), interleaved: rows of 16 tokens, 2 rows.
PackedBatch interleaved_batch() {
  PackedBatch b;
  b.rows = 2;
  const std::vector<int64_t> lengths = {5, 11, 7, 9};
  int32_t id = 3;
  int16_t lang = 0;
  for (int64_t length : lengths) {
    std::vector<int32_t> seq;
    for (int64_t t = 0; t < length; ++t) seq.push_back(id = (id * 37 + 11) % 256);
    for (int64_t t = 0; t < length; ++t) {
      b.targets.push_back(t + 1 < length ? seq[static_cast<size_t>(t + 1)] : kIgnoreTarget);
      b.language.push_back(lang);
    }
    b.batch.add_sequence(seq);
    lang = static_cast<int16_t>(1 - lang);
  }
  return b;
}

// The documents of one language id as their own batch (one row each side of the split, so rows = 1).
PackedBatch only_language(const PackedBatch& b, int16_t lang) {
  PackedBatch out;
  out.rows = 1;
  for (size_t s = 0; s + 1 < b.batch.cu_seqlens.size(); ++s) {
    const int64_t begin = b.batch.cu_seqlens[s], end = b.batch.cu_seqlens[s + 1];
    if (b.language[static_cast<size_t>(begin)] != lang) continue;
    out.batch.add_sequence(std::vector<int32_t>(b.batch.ids.begin() + begin, b.batch.ids.begin() + end));
    out.targets.insert(out.targets.end(), b.targets.begin() + begin, b.targets.begin() + end);
    out.language.insert(out.language.end(), b.language.begin() + begin, b.language.begin() + end);
  }
  return out;
}

}  // namespace

TEST(EvalPass, SumsPerLanguageIdInTokenOrder) {
  test::use_one_thread();
  test::ScratchDir scratch("eval-pass");
  test::write_tiny_teacher_and_student(scratch.path());
  Model teacher = Model::load(scratch.path() / "teacher");
  Model student = Model::load(scratch.path() / "student");
  const PackedBatch mixed = interleaved_batch();
  EvalSums sums(3);  // slot 2 is never used
  eval_pass_sums(student, &teacher, mixed, sums);
  EXPECT_EQ(sums.tokens[0], 5 + 7);
  EXPECT_EQ(sums.tokens[1], 11 + 9);
  EXPECT_EQ(sums.ce_tokens[0], 4 + 6);
  EXPECT_EQ(sums.ce_tokens[1], 10 + 8);
  EXPECT_EQ(sums.tokens[2], 0);
  EXPECT_EQ(sums.ce[2], 0.0);
  EXPECT_EQ(sums.kl[2], 0.0);
  // Each language's documents alone give the same sums (a sequence's values do not depend on the other sequences
  // of the batch; 1e-6: BLAS may block a different number of rows differently).
  for (int16_t lang : {0, 1}) {
    EvalSums alone(3);
    eval_pass_sums(student, &teacher, only_language(mixed, lang), alone);
    const auto l = static_cast<size_t>(lang);
    EXPECT_EQ(alone.tokens[l], sums.tokens[l]);
    EXPECT_EQ(alone.ce_tokens[l], sums.ce_tokens[l]);
    EXPECT_NEAR(alone.ce[l], sums.ce[l], 1e-6 * sums.ce[l]);
    EXPECT_NEAR(alone.teacher_ce[l], sums.teacher_ce[l], 1e-6 * sums.teacher_ce[l]);
    EXPECT_NEAR(alone.kl[l], sums.kl[l], 1e-6 * sums.kl[l] + 1e-12);
    EXPECT_GT(sums.kl[l], 0.0);
  }
  // Without a teacher only CE is added.
  EvalSums ce_only(2);
  eval_pass_sums(student, nullptr, mixed, ce_only);
  EXPECT_EQ(ce_only.ce[0], sums.ce[0]);
  EXPECT_EQ(ce_only.kl[0], 0.0);
  EXPECT_EQ(ce_only.teacher_ce[1], 0.0);
  // A language id outside the sums is an internal error, checked before anything runs.
  EvalSums small(1);
  EXPECT_THROW(eval_pass_sums(student, nullptr, mixed, small), Error);
  EXPECT_EQ(small.tokens[0], 0);
}

// evaluate() is evaluate_with() over the CPU pass, bit for bit; another pass is driven in passes of rows_per_pass.
TEST(EvalPass, EvaluateWithDrivesAnyPass) {
  test::use_one_thread();
  test::ScratchDir scratch("eval-pass");
  test::write_tiny_teacher_and_student(scratch.path());
  Model teacher = Model::load(scratch.path() / "teacher");
  Model student = Model::load(scratch.path() / "student");
  HeldOutSet set;
  for (int16_t lang : {0, 1}) {
    PackedBatch b = interleaved_batch();
    b.language.assign(b.language.size(), lang);
    set.languages.push_back(lang == 0 ? "eng_Latn" : "fra_Latn");
    set.per_language.push_back(std::move(b));
  }
  const EvalResult direct = evaluate(student, &teacher, set, 1);
  int passes = 0;
  const EvalResult driven = evaluate_with(
      [&](const PackedBatch& batch, EvalSums& sums) {
        ++passes;
        EXPECT_EQ(batch.rows, 1);
        EXPECT_EQ(sums.num_languages(), 2u);
        eval_pass_sums(student, &teacher, batch, sums);
      },
      true, set, 1);
  EXPECT_EQ(passes, 4);  // 2 languages × 2 rows
  ASSERT_EQ(driven.languages.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(driven.languages[l].ce, direct.languages[l].ce);
    EXPECT_EQ(driven.languages[l].kl, direct.languages[l].kl);
    EXPECT_EQ(driven.languages[l].teacher_ce, direct.languages[l].teacher_ce);
    EXPECT_EQ(driven.languages[l].tokens, 32);
  }
  // A pass without a teacher: no KL reported even though the sums exist.
  const EvalResult ce_only = evaluate_with(
      [&](const PackedBatch& batch, EvalSums& sums) { eval_pass_sums(student, nullptr, batch, sums); }, false, set, 2);
  EXPECT_FALSE(ce_only.mean_kl.has_value());
  EXPECT_NEAR(ce_only.mean_ce, direct.mean_ce, 1e-6 * direct.mean_ce);
}
