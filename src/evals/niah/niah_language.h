// Per-language NIAH templates, written for this project (not translations copied from OneRULER): the needle
// sentence, the prompt parts, the "none" word and the noun list the needle keys come from. One row per language in
// niah_language.cpp; a language without a row is an input error that lists the languages that have one.
//
// Prompt layout (OneRULER's, evals.md §2): task (with the haystack in <text>…</text>) + question + J + list_all + J +
// if_none + answer_format, where J is the language's joiner (" ", or "" for Chinese). The tags <text>, <Question>
// and <Answer> stay in English in every language, as in OneRULER.
// Placeholders: {context} (task), {key} {value} (needle), {key1} {key2} (questions). Every string is NFC.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hlm {

struct NiahLanguage {
  std::string_view code;           // FineWeb-2 code of the corpus language, e.g. "eng_Latn"
  std::string_view name;           // English name
  std::string_view joiner;         // between haystack sentences and between prompt parts: " " or ""
  std::string_view needle;         // one needle sentence, full stop included
  std::string_view task;           // instruction + "<text>\n{context}\n</text>\n\n"
  std::string_view question_one;   // "<Question> ... {key1} ...?"
  std::string_view question_two;   // the same for {key1} and {key2} (multiquery)
  std::string_view list_all;       // "Please list all that apply."
  std::string_view if_none;        // "If there is none, answer "<none word>".</Question>\n\n\n"
  std::string_view answer_format;  // "Answer in this format:\n<Answer> ... </Answer>"
  std::string_view none_word;      // the expected answer of the none task; a number answer containing it is wrong
  std::string_view nouns;          // '|'-separated nouns for the keys (no noun inside another, none holds none_word)
};

std::span<const NiahLanguage> niah_languages();
// Input error naming the code and listing the languages with templates.
const NiahLanguage& niah_language(std::string_view code);
std::string niah_language_codes();  // "eng_Latn, rus_Cyrl, ..."

std::vector<std::string> niah_nouns(const NiahLanguage& lang);
std::vector<std::string> niah_none_words(const NiahLanguage& lang);  // the words the scorer accepts for "none"

std::string niah_needle(const NiahLanguage& lang, std::string_view key, std::string_view value);
// The whole prompt around an assembled haystack (needles already inserted); `queries` holds 1 or 2 keys.
std::string niah_prompt(const NiahLanguage& lang, std::string_view context, const std::vector<std::string>& queries);

// Replaces every "{name}" in `text` by `value`.
std::string niah_fill(std::string_view text, std::string_view name, std::string_view value);

}  // namespace hlm
