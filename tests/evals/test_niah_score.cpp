// NIAH scoring (evals/niah/niah_score.h): one or more cases per rule of OneRULER's evaluate.py (evals.md §2), the
// task table, and responses in several languages.
#include <gtest/gtest.h>

#include "core/error.h"
#include "evals/niah/niah_language.h"
#include "evals/niah/niah_score.h"
#include "evals/niah/niah_task.h"

using namespace hlm;

namespace {

const std::vector<std::string> kEnNone = {"none"};

bool numbers(const std::vector<std::string>& gold, const std::string& response,
             const std::vector<std::string>& none = kEnNone) {
  return niah_score(NiahTask::Single, gold, response, none);
}

bool none_task(const std::string& response, const std::vector<std::string>& none = kEnNone) {
  return niah_score(NiahTask::None, {}, response, none);
}

}  // namespace

TEST(NiahTask, TableAndNames) {
  EXPECT_EQ(niah_task_from_name("single").keys, 1);
  EXPECT_EQ(niah_task_from_name("niah_multikey").keys, 4);
  EXPECT_EQ(niah_task_from_name("multivalue").values_per_key, 4);
  EXPECT_EQ(niah_task_from_name("multiquery").queries, 2);
  EXPECT_EQ(niah_task_from_name("multiquery").keys, 2);
  EXPECT_FALSE(niah_task_from_name("none").query_present);
  EXPECT_EQ(niah_task_from_name("none").keys, 4);
  try {
    niah_task_from_name("cwe");
    FAIL() << "unknown task accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("single, multikey, multivalue, multiquery, none"), std::string::npos);
  }
}

TEST(NiahScoreNumbers, ExactAndWrappedAnswers) {
  EXPECT_TRUE(numbers({"1234567"}, "1234567"));
  EXPECT_TRUE(numbers({"1234567"}, "<Answer> 1234567 </Answer>"));
  EXPECT_TRUE(numbers({"1234567"}, "The special magic number for \"apple\" is: 1234567."));
  EXPECT_TRUE(numbers({"1234567"}, "abc1234567def"));  // digit runs are taken wherever they are
  EXPECT_FALSE(numbers({"1234567"}, "7654321"));
}

TEST(NiahScoreNumbers, EmptyOrNumberlessResponseIsWrong) {
  EXPECT_FALSE(numbers({"1234567"}, ""));
  EXPECT_FALSE(numbers({"1234567"}, "I do not know."));
}

TEST(NiahScoreNumbers, NfkcAndOtherScriptDigits) {
  EXPECT_TRUE(numbers({"1234567"}, "\uFF11\uFF12\uFF13\uFF14\uFF15\uFF16\uFF17"));  // fullwidth -> ASCII by NFKC
  // Devanagari digits stay Devanagari under NFKC but are decimal digits (Nd) with values, as Python's \d and int().
  EXPECT_TRUE(numbers({"1234567"}, "\u0967\u0968\u0969\u096A\u096B\u096C\u096D"));
  EXPECT_EQ(niah_response_numbers("\uFF18\uFF17 and 12"), (std::vector<std::string>{"87", "12"}));
}

TEST(NiahScoreNumbers, NoneWordMakesItWrongCaseSensitively) {
  EXPECT_FALSE(numbers({"1234567"}, "1234567, or none"));
  EXPECT_FALSE(numbers({"1234567"}, "1234567 nonetheless"));  // a substring is enough
  EXPECT_TRUE(numbers({"1234567"}, "None but 1234567"));      // case-sensitive: "None" is not "none"
  EXPECT_FALSE(numbers({"1234567"}, "\uFF4E\uFF4F\uFF4E\uFF45 1234567"));  // fullwidth "none" after NFKC
  // The cleaned none word (lower-cased, spaces removed) counts as well: Vietnamese "không có" as "khôngcó".
  const std::vector<std::string> vi = niah_none_words(niah_language("vie_Latn"));
  EXPECT_FALSE(numbers({"1234567"}, "không có 1234567", vi));
  EXPECT_FALSE(numbers({"1234567"}, "khôngcó 1234567", vi));
  EXPECT_TRUE(numbers({"1234567"}, "Không có 1234567", vi));  // capital K: neither form is a substring
}

TEST(NiahScoreNumbers, OneDigitRunsAreDropped) {
  EXPECT_TRUE(numbers({"1234567"}, "Answer 1: 1234567 (3 times)"));
  EXPECT_EQ(niah_response_numbers("1 22 333 4"), (std::vector<std::string>{"22", "333"}));
}

TEST(NiahScoreNumbers, DuplicatesAreRemoved) {
  EXPECT_TRUE(numbers({"1234567"}, "1234567, 1234567 and again 1234567"));
  // De-duplication is on the digit strings: "01234567" and "1234567" stay two entries, so the count is off.
  EXPECT_FALSE(numbers({"1234567"}, "01234567 1234567"));
  EXPECT_FALSE(niah_score(NiahTask::Multiquery, {"1234567", "7654321"}, "1234567 01234567", kEnNone));
  EXPECT_TRUE(numbers({"1234567"}, "01234567"));  // compared as integers
}

TEST(NiahScoreNumbers, ExtraOrMissingNumbersAreWrong) {
  EXPECT_FALSE(numbers({"1234567"}, "1234567 or 7654321"));
  EXPECT_FALSE(numbers({"1234567"}, "1234567 on page 12"));
  EXPECT_FALSE(numbers({"1234567"}, "1,234,567"));  // runs 234 and 567 (the 1 is dropped): two numbers
  const std::vector<std::string> four = {"1111111", "2222222", "3333333", "4444444"};
  EXPECT_TRUE(niah_score(NiahTask::Multivalue, four, "4444444, 2222222, 1111111, 3333333", kEnNone));  // any order
  EXPECT_FALSE(niah_score(NiahTask::Multivalue, four, "1111111, 2222222, 3333333", kEnNone));
  EXPECT_FALSE(niah_score(NiahTask::Multivalue, four, "1111111 2222222 3333333 4444444 5555555", kEnNone));
  EXPECT_FALSE(niah_score(NiahTask::Multivalue, four, "1111111 2222222 3333333 3333333", kEnNone));
}

TEST(NiahScoreNumbers, BadExpectedIsAnInputError) {
  EXPECT_THROW(numbers({}, "1234567"), Error);
  EXPECT_THROW(numbers({"12a4567"}, "1234567"), Error);
  EXPECT_TRUE(numbers({" 1234567 "}, "1234567"));  // surrounding blanks as Python's int() allows
}

TEST(NiahScoreNone, NoneWordAnywhereAfterCleaning) {
  EXPECT_TRUE(none_task("none"));
  EXPECT_TRUE(none_task("<Answer> None </Answer>"));  // lower-cased
  EXPECT_TRUE(none_task("  NONE.\n"));
  EXPECT_TRUE(none_task("n o n e"));                // ASCII spaces deleted
  EXPECT_TRUE(none_task("no\u200Cne"));             // U+200C deleted
  EXPECT_TRUE(none_task("\uFF2E\uFF4F\uFF4E\uFF45"));  // fullwidth, NFKC
  EXPECT_FALSE(none_task("nothing"));
  EXPECT_FALSE(none_task(""));
  EXPECT_FALSE(none_task("1234567"));
}

TEST(NiahScoreNone, NumbersDoNotMakeItWrong) {
  EXPECT_TRUE(none_task("none; the others were 1234567 and 7654321"));
}

TEST(NiahScoreNone, IsolatedSingleDigitsAreDeleted) {
  // A digit with no letter/number/'_' on either side goes (Python's \b\d\b); one inside a word stays.
  EXPECT_TRUE(none_task("x-5-y", {"--"}));
  EXPECT_FALSE(none_task("x-55-y", {"--"}));
  EXPECT_FALSE(none_task("x-a5-y", {"--"}));
  EXPECT_FALSE(none_task("no 5 ne"));  // spaces go first: "no5ne", the 5 sits between letters and stays
}

TEST(NiahScoreNone, OtherLanguages) {
  const auto words = [](const char* code) { return niah_none_words(niah_language(code)); };
  EXPECT_TRUE(none_task("无", words("cmn_Hani")));
  EXPECT_FALSE(none_task("没有", words("cmn_Hani")));
  EXPECT_TRUE(none_task("Нет.", words("rus_Cyrl")));
  EXPECT_TRUE(none_task("ΚΑΝΈΝΑΣ", words("ell_Grek")));  // final sigma lower-cases to ς, as Python's lower()
  EXPECT_TRUE(none_task("कोई नहीं", words("hin_Deva")));
  EXPECT_TRUE(none_task("لا يوجد", words("arb_Arab")));
  EXPECT_TRUE(none_task("Tidak ada", words("ind_Latn")));
  EXPECT_TRUE(none_task("Hiçbiri", words("tur_Latn")));
  // Root-locale lower-casing maps İ to i + U+0307 (as Python does), so a dotted capital does not match.
  EXPECT_FALSE(none_task("HİÇBİRİ", words("tur_Latn")));
}

TEST(NiahScore, CleanMatchesPythonCleanText) {
  EXPECT_EQ(niah_clean("  Không Có \u200C!  "), "khôngcó!");
  EXPECT_EQ(niah_clean("A\tB"), "a\tb");  // only ASCII spaces are deleted inside
}
