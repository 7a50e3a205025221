// NIAH scoring, exactly as OneRULER's eval/evaluate.py (../shared/docs/evals.md §2). The raw response is scored (no
// <Answer> extraction); accuracy is the mean of the per-item booleans.
//
// Number tasks (single, multikey, multivalue, multiquery), niah_score_numbers:
//   1. an empty response is wrong;
//   2. the response is NFKC-normalised (ICU);
//   3. if any "none" word of the language is a substring of it (case-sensitive), or the word's cleaned form is
//      (lower-cased, U+200C and spaces removed: niah_clean), the response is wrong;
//   4. digit runs are extracted (maximal runs of Unicode decimal digits, general category Nd, as Python's \d);
//   5. runs of one digit are dropped;
//   6. duplicates are removed (as strings), first occurrence kept;
//   7. correct iff the number of runs left equals the number of gold values AND the two sets of integers are equal
//      (so any extra number makes it wrong; "0012" equals 12 as an integer). Runs in other scripts count with their
//      digit values (Devanagari "१२" is 12), as Python's int() does.
// The none task, niah_score_none:
//   the NFKC response is cleaned (strip, lower-case, U+200C and ASCII spaces deleted), isolated single digits are
//   deleted (Python's \b\d\b: a digit with no letter, number or '_' on either side), and the response is correct iff
//   any cleaned "none" word is a substring. Numbers in the answer do not make it wrong.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "evals/niah/niah_task.h"

namespace hlm {

// Scores one response. `expected`: the gold values (decimal digit strings) for a number task; ignored for "none".
// `none_words`: the language's accepted "none" words (NiahLanguage::none_words). Input error for a number task whose
// `expected` is empty or holds something that is not a decimal number.
bool niah_score(NiahTask task, const std::vector<std::string>& expected, std::string_view response,
                const std::vector<std::string>& none_words);

bool niah_score_numbers(const std::vector<std::string>& expected, std::string_view response,
                        const std::vector<std::string>& none_words);
bool niah_score_none(std::string_view response, const std::vector<std::string>& none_words);

// Steps 2, 4, 5 and 6 of the number rule: the numbers a response gives, as ASCII integers without leading zeros
// (duplicates are removed on the original digit strings, so "0012" and "12" are two entries).
std::vector<std::string> niah_response_numbers(std::string_view response);

// Python's text.strip().lower().replace('\u200c', '').replace(' ', '') (lower-casing by ICU's root locale).
std::string niah_clean(std::string_view text);

std::string unicode_nfkc(std::string_view text);

}  // namespace hlm
