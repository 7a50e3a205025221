// NIAH generator (evals/niah/): the sentence rule, held-out text only, haystack sizing within ±2 % of the target
// under the bytes tokenizer and two real HF tokenizers (data/tokenizers/{qwen3,gemma3}, installed by
// scripts/fetch-tokenizers.sh: missing is a failure), determinism, needles / query / expected consistency for every
// task, the none task's absent key, and the language templates. Uses a small fixture corpus the test writes itself
// (niah_fixture.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/text_normalizer.h"
#include "data/unicode_text.h"
#include "evals/niah/niah_generate.h"
#include "evals/niah/niah_score.h"
#include "niah_fixture.h"
#include "support/run_binary.h"

using namespace hlm;
using hlm::test::kNiahFixtureHeldOut;
using hlm::test::kTrainMarker;

namespace {

std::filesystem::path tokenizer_data_dir() {
  if (const char* dir = std::getenv("HLM_TOKENIZER_DIR")) return dir;
  return std::filesystem::path(HLM_GOLDEN_DIR) / ".." / ".." / "data" / "tokenizers";
}

// The fixture corpus, written once for the whole test program.
const Corpus& fixture_corpus() {
  static hlm::test::ScratchDir dir("niah-corpus");
  static const Corpus corpus = [] {
    hlm::test::write_niah_fixture_corpus(dir.path());
    return Corpus::open(dir.path());
  }();
  return corpus;
}

const std::vector<std::string>& held_out(const std::string& code) {
  static std::map<std::string, std::vector<std::string>> cache;
  auto it = cache.find(code);
  if (it == cache.end())
    it = cache.emplace(code, niah_held_out_sentences(fixture_corpus(), code, kNiahFixtureHeldOut, NiahSplit::Both))
             .first;
  return it->second;
}

const Tokenizer& bytes_tokenizer() {
  static const std::unique_ptr<Tokenizer> t = tokenizer_load("bytes");
  return *t;
}

// data/tokenizers/<name>/tokenizer.json, or nullptr and a test failure when the file is missing.
std::unique_ptr<Tokenizer> real_tokenizer(const std::string& name) {
  const auto file = tokenizer_data_dir() / name / "tokenizer.json";
  if (std::filesystem::exists(file)) return tokenizer_load(file.string());
  ADD_FAILURE() << file << " is missing: run `bash scripts/fetch-tokenizers.sh` (or `make tokenizers`) to install it";
  return nullptr;
}

const std::vector<std::string> kFixtureLangs = {"eng_Latn", "cmn_Hani", "rus_Cyrl", "hin_Deva"};

// The context between <text>\n and \n</text> of a prompt.
std::string context_of(const std::string& prompt) {
  const size_t a = prompt.find("<text>\n"), b = prompt.rfind("\n</text>");
  EXPECT_NE(a, std::string::npos);
  EXPECT_NE(b, std::string::npos);
  return prompt.substr(a + 7, b - a - 7);
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace

TEST(NiahSentences, SplitRule) {
  using V = std::vector<std::string>;
  EXPECT_EQ(niah_split_sentences("First one here. Second one here! Third?"),
            (V{"First one here.", "Second one here!"}));  // "Third?" is under 8 code points
  EXPECT_EQ(niah_split_sentences("He said \"yes it is.\" Then we left the room."),
            (V{"He said \"yes it is.\"", "Then we left the room."}));
  EXPECT_EQ(niah_split_sentences("Version 3.5 is out now."), (V{"Version 3.5 is out now."}));
  EXPECT_EQ(niah_split_sentences("Open File\nSave the document before closing it."),
            (V{"Save the document before closing it."}));  // a line without a full stop is not a sentence
  EXPECT_EQ(niah_split_sentences("Many   spaces\there  now."), (V{"Many spaces here now."}));
  EXPECT_EQ(niah_split_sentences("今天的天气非常好。我们一起去公园散步吧！好。"),
            (V{"今天的天气非常好。", "我们一起去公园散步吧！"}));
  EXPECT_EQ(niah_split_sentences("यह एक छोटा वाक्य है। यह दूसरा वाक्य है।"),
            (V{"यह एक छोटा वाक्य है।", "यह दूसरा वाक्य है।"}));
  EXPECT_EQ(niah_split_sentences("Это первое предложение. А это второе?"),
            (V{"Это первое предложение.", "А это второе?"}));
}

TEST(NiahHaystack, HeldOutTextOnly) {
  for (const std::string& code : kFixtureLangs) {
    const std::vector<std::string>& s = held_out(code);
    // 12 held-out documents (6 validation + 6 test) of 3 lines x 4 kept sentences.
    EXPECT_EQ(s.size(), 2u * kNiahFixtureHeldOut * 12) << code;
    for (const std::string& sentence : s) EXPECT_EQ(sentence.find(kTrainMarker), std::string::npos) << sentence;
    EXPECT_EQ(niah_held_out_sentences(fixture_corpus(), code, kNiahFixtureHeldOut, NiahSplit::Valid).size(),
              s.size() / 2);
  }
  // A split with no document is a clear input error.
  EXPECT_THROW(niah_held_out_sentences(fixture_corpus(), "eng_Latn", 100, NiahSplit::Test), Error);
  EXPECT_THROW(niah_held_out_sentences(fixture_corpus(), "fra_Latn", kNiahFixtureHeldOut, NiahSplit::Both), Error);
}

// ±2 %: the test's tolerance from the issue; the sizer itself stops within 0.5 % below the target.
void expect_sized(const Tokenizer& tok, const std::string& tok_name) {
  for (const std::string& code : kFixtureLangs) {
    NiahGenerator gen(niah_language(code), held_out(code), tok);
    for (const int64_t target : {300, 1000, 4000, 20000}) {  // 20000 cycles through the fixture's held-out text
      const NiahSample s = gen.generate(niah_task_from_name("multikey"), target, 7, 0);
      const auto measured = static_cast<int64_t>(tok.encode(s.haystack).size());
      EXPECT_EQ(measured, s.haystack_tokens) << tok_name << " " << code << " " << target;
      EXPECT_LE(measured, target) << tok_name << " " << code;
      EXPECT_GE(measured, target * 98 / 100) << tok_name << " " << code << " " << target;
      EXPECT_GT(s.prompt_tokens, measured) << "the prompt adds template, needles and question";
    }
  }
}

TEST(NiahHaystack, WithinTwoPercentBytes) { expect_sized(bytes_tokenizer(), "bytes"); }

// Qwen3: byte-level BPE behind a regex pre-tokenizer; Gemma 3: SentencePiece-style BPE on the whole text, where merges
// can cross sentence boundaries (so per-sentence counts are only an estimate and the exact search matters).
TEST(NiahHaystack, WithinTwoPercentQwen3) {
  const std::unique_ptr<Tokenizer> tok = real_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  expect_sized(*tok, "qwen3");
}

TEST(NiahHaystack, WithinTwoPercentGemma3) {
  const std::unique_ptr<Tokenizer> tok = real_tokenizer("gemma3");
  ASSERT_NE(tok, nullptr);
  expect_sized(*tok, "gemma3");
}

TEST(NiahHaystack, WholeSentencesThenOnePrefix) {
  const std::vector<std::string>& s = held_out("eng_Latn");
  NiahHaystackSizer sizer(s, bytes_tokenizer(), " ");
  for (size_t start : {0u, 5u, 100u}) {
    const NiahHaystack h = sizer.build(start, 777);
    ASSERT_FALSE(h.pieces.empty());
    for (size_t i = 0; i + 1 < h.pieces.size(); ++i) EXPECT_EQ(h.pieces[i], s[(start + i) % s.size()]);
    const std::string& last = h.pieces.back();
    const std::string& whole = s[(start + h.pieces.size() - 1) % s.size()];
    EXPECT_EQ(whole.compare(0, last.size(), last), 0);
    EXPECT_EQ(h.last_cut, last.size() < whole.size());
    EXPECT_EQ(utf8_lossy(last), last) << "cut at a code point boundary (valid UTF-8)";
  }
}

TEST(NiahGenerate, Deterministic) {
  const Tokenizer& tok = bytes_tokenizer();
  for (const NiahTaskSpec& task : kNiahTasks) {
    NiahGenerator a(niah_language("rus_Cyrl"), held_out("rus_Cyrl"), tok);
    NiahGenerator b(niah_language("rus_Cyrl"), held_out("rus_Cyrl"), tok);
    const NiahSample x = a.generate(task, 1500, 42, 3);
    EXPECT_EQ(niah_sample_json(x), niah_sample_json(b.generate(task, 1500, 42, 3))) << task.name;
    EXPECT_EQ(x.prompt, b.generate(task, 1500, 42, 3).prompt);
    EXPECT_NE(x.prompt, a.generate(task, 1500, 43, 3).prompt) << "another seed";
    EXPECT_NE(x.prompt, a.generate(task, 1500, 42, 4).prompt) << "another sample";
    // Paired across lengths: the same keys, values and depths at another length.
    const NiahSample longer = a.generate(task, 3000, 42, 3);
    EXPECT_EQ(longer.keys, x.keys);
    EXPECT_EQ(longer.values, x.values);
    EXPECT_EQ(longer.query, x.query);
    ASSERT_EQ(longer.needles.size(), x.needles.size());
    for (size_t i = 0; i < x.needles.size(); ++i) EXPECT_EQ(longer.needles[i].depth, x.needles[i].depth);
  }
}

// Session 17: shorter training values bootstrap the copy (docs/niah.md). The default and 7 draw exactly as before;
// n < 7 gives every digit count of [n, 7], no leading zero, values distinct within a sample and in the needles.
TEST(NiahGenerate, ShorterTrainingValues) {
  const Tokenizer& tok = bytes_tokenizer();
  NiahGenerator plain(niah_language("eng_Latn"), held_out("eng_Latn"), tok);
  NiahGenerator seven(niah_language("eng_Latn"), held_out("eng_Latn"), tok);
  seven.set_value_digits_min(7);
  NiahGenerator mixed(niah_language("eng_Latn"), held_out("eng_Latn"), tok);
  mixed.set_value_digits_min(2);
  const NiahTaskSpec& multivalue = niah_task_from_name("multivalue");
  std::set<size_t> lengths;
  for (int64_t i = 0; i < 40; ++i) {
    EXPECT_EQ(niah_sample_json(plain.generate(multivalue, 200, 1, i)),
              niah_sample_json(seven.generate(multivalue, 200, 1, i)));
    const NiahSample s = mixed.generate(multivalue, 200, 1, i);
    std::set<std::string> values;
    for (const std::string& v : s.values.at(0)) {
      ASSERT_FALSE(v.empty());
      EXPECT_NE(v[0], '0') << v;
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) << v;
      lengths.insert(v.size());
      values.insert(v);
    }
    EXPECT_EQ(values.size(), 4u) << "distinct within the sample";
    for (const NiahNeedle& n : s.needles) EXPECT_EQ(values.count(n.value), 1u) << n.value;
    EXPECT_EQ(std::set<std::string>(s.expected.begin(), s.expected.end()), values);
  }
  EXPECT_EQ(lengths, (std::set<size_t>{2, 3, 4, 5, 6, 7})) << "160 values cover every digit count";
  for (int bad : {1, 8}) {
    try {
      mixed.set_value_digits_min(bad);
      ADD_FAILURE() << "expected an input error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
    }
  }
}

TEST(NiahGenerate, NeedlesQueryAndExpectedAgree) {
  const std::array<int, 40> depths = niah_depths();
  EXPECT_EQ(depths.front(), 0);
  EXPECT_EQ(depths[1], 3);
  EXPECT_EQ(depths[20], 51);
  EXPECT_EQ(depths.back(), 100);
  EXPECT_EQ(std::set<int>(depths.begin(), depths.end()).size(), 40u);
  for (const std::string& code : kFixtureLangs) {
    const NiahLanguage& lang = niah_language(code);
    const std::vector<std::string> nouns = niah_nouns(lang);
    NiahGenerator gen(lang, held_out(code), bytes_tokenizer());
    for (const NiahTaskSpec& task : kNiahTasks) {
      for (int64_t i = 0; i < 8; ++i) {
        const NiahSample s = gen.generate(task, 600, 1, i);
        const std::string where = code + " " + std::string(task.name) + " #" + std::to_string(i);
        ASSERT_EQ(s.keys.size(), static_cast<size_t>(task.keys)) << where;
        EXPECT_EQ(std::set<std::string>(s.keys.begin(), s.keys.end()).size(), s.keys.size()) << where;
        std::set<std::string> values;
        for (size_t k = 0; k < s.keys.size(); ++k) {
          EXPECT_NE(std::find(nouns.begin(), nouns.end(), s.keys[k]), nouns.end()) << where;
          ASSERT_EQ(s.values[k].size(), static_cast<size_t>(task.values_per_key)) << where;
          for (const std::string& v : s.values[k]) {
            EXPECT_EQ(v.size(), 7u) << where;
            EXPECT_TRUE(v[0] >= '1' && v[0] <= '9') << where;
            values.insert(v);
          }
        }
        EXPECT_EQ(values.size(), static_cast<size_t>(task.keys * task.values_per_key)) << "distinct values " << where;

        // Every needle is in the context once; depths distinct; positions follow floor(n * depth / 100) in order.
        const std::string context = context_of(s.prompt);
        ASSERT_EQ(s.needles.size(), values.size()) << where;
        std::set<int> used_depths;
        for (size_t n = 0; n < s.needles.size(); ++n) {
          const NiahNeedle& nd = s.needles[n];
          EXPECT_EQ(count_of(context, niah_needle(lang, nd.key, nd.value)), 1u) << where;
          EXPECT_NE(std::find(depths.begin(), depths.end(), nd.depth), depths.end()) << where;
          used_depths.insert(nd.depth);
          if (n > 0) {
            EXPECT_LE(s.needles[n - 1].position, nd.position) << where;
            EXPECT_LT(context.find(niah_needle(lang, s.needles[n - 1].key, s.needles[n - 1].value)),
                      context.find(niah_needle(lang, nd.key, nd.value)))
                << where;
          }
        }
        EXPECT_EQ(used_depths.size(), s.needles.size()) << where;

        // Removing the needles from the context leaves the haystack.
        std::string rest = context;
        for (const NiahNeedle& nd : s.needles) {
          const std::string needle = niah_needle(lang, nd.key, nd.value), j(lang.joiner);
          size_t at = rest.find(j + needle);
          if (at != std::string::npos && !j.empty()) {
            rest.erase(at, j.size() + needle.size());
          } else {
            at = rest.find(needle);
            ASSERT_NE(at, std::string::npos) << where;
            rest.erase(at, needle.size() + (at == 0 ? j.size() : 0));
          }
        }
        EXPECT_EQ(rest, s.haystack) << where;

        // Query and expected.
        ASSERT_EQ(s.query.size(), static_cast<size_t>(task.queries)) << where;
        if (task.query_present) {
          std::vector<std::string> gold;
          for (const std::string& q : s.query) {
            const auto k = std::find(s.keys.begin(), s.keys.end(), q);
            ASSERT_NE(k, s.keys.end()) << where;
            const auto& vs = s.values[static_cast<size_t>(k - s.keys.begin())];
            gold.insert(gold.end(), vs.begin(), vs.end());
          }
          EXPECT_EQ(s.expected, gold) << where;
          if (task.queries == 2) {
            EXPECT_NE(s.query[0], s.query[1]) << where;
          }
          std::string answer;
          for (const std::string& v : s.expected) answer += v + ", ";
          EXPECT_TRUE(niah_score(task.task, s.expected, answer, niah_none_words(lang))) << where;
        } else {
          // The none task: the queried noun is no key, no needle names it, and "KEY" occurs only in the question.
          EXPECT_EQ(std::find(s.keys.begin(), s.keys.end(), s.query[0]), s.keys.end()) << where;
          EXPECT_NE(std::find(nouns.begin(), nouns.end(), s.query[0]), nouns.end()) << where;
          for (const NiahNeedle& nd : s.needles) EXPECT_NE(nd.key, s.query[0]) << where;
          EXPECT_EQ(count_of(context, "\"" + s.query[0] + "\""), 0u) << where;
          EXPECT_EQ(count_of(s.prompt, "\"" + s.query[0] + "\""), 1u) << where;
          EXPECT_EQ(s.expected, (std::vector<std::string>{std::string(lang.none_word)})) << where;
          EXPECT_TRUE(niah_score(task.task, s.expected, s.expected[0], niah_none_words(lang))) << where;
        }
        // The question names each query in quotes.
        const std::string tail = s.prompt.substr(s.prompt.rfind("</text>"));
        for (const std::string& q : s.query) EXPECT_EQ(count_of(tail, "\"" + q + "\""), 1u) << where;
      }
    }
  }
}

TEST(NiahGenerate, JsonFields) {
  NiahGenerator gen(niah_language("hin_Deva"), held_out("hin_Deva"), bytes_tokenizer());
  const nlohmann::json j = niah_sample_json(gen.generate(niah_task_from_name("multivalue"), 500, 0, 0));
  for (const char* field : {"prompt", "keys", "values", "query", "expected", "prompt_tokens", "haystack_tokens",
                            "needles", "lang", "task", "length", "index"})
    EXPECT_TRUE(j.contains(field)) << field;
  EXPECT_EQ(j["values"].size(), 1u);
  EXPECT_EQ(j["values"][0].size(), 4u);
  EXPECT_EQ(j["expected"].size(), 4u);
}

TEST(NiahGenerate, ParseLength) {
  EXPECT_EQ(niah_parse_length("8000", "--length"), 8000);
  EXPECT_EQ(niah_parse_length("8k", "--length"), 8000);
  EXPECT_EQ(niah_parse_length("128K", "--length"), 128000);
  for (const char* bad : {"", "k", "0", "-5", "1.5k", "12m", "abc"})
    EXPECT_THROW(niah_parse_length(bad, "--length"), Error) << bad;
}

TEST(NiahLanguages, TemplatesAreCompleteAndConsistent) {
  ASSERT_GE(niah_languages().size(), 8u);
  std::set<std::string> codes;
  for (const NiahLanguage& l : niah_languages()) {
    const std::string c(l.code);
    EXPECT_TRUE(codes.insert(c).second) << c << " twice";
    for (std::string_view text : {l.needle, l.task, l.question_one, l.question_two, l.list_all, l.if_none,
                                  l.answer_format, l.none_word, l.nouns})
      EXPECT_EQ(unicode_nfc(std::string(text)), std::string(text)) << c << ": not NFC: " << text;
    EXPECT_TRUE(l.joiner == " " || l.joiner.empty()) << c;
    EXPECT_NE(l.needle.find("\"{key}\""), std::string_view::npos) << c;
    EXPECT_NE(l.needle.find("{value}"), std::string_view::npos) << c;
    EXPECT_EQ(count_of(std::string(l.task), "{context}"), 1u) << c;
    EXPECT_NE(l.task.find("<text>\n{context}\n</text>"), std::string_view::npos) << c;
    EXPECT_NE(l.question_one.find("\"{key1}\""), std::string_view::npos) << c;
    EXPECT_NE(l.question_two.find("\"{key1}\""), std::string_view::npos) << c;
    EXPECT_NE(l.question_two.find("\"{key2}\""), std::string_view::npos) << c;
    EXPECT_TRUE(l.question_one.starts_with("<Question>") && l.question_two.starts_with("<Question>")) << c;
    EXPECT_NE(l.if_none.find("\"" + std::string(l.none_word) + "\""), std::string_view::npos) << c;
    EXPECT_NE(l.if_none.find("</Question>"), std::string_view::npos) << c;
    EXPECT_NE(l.answer_format.find("<Answer>"), std::string_view::npos) << c;
    // A model that echoes a needle must not be marked wrong for the none word: the needle text does not hold it.
    const std::string none_clean = niah_clean(l.none_word);
    EXPECT_EQ(niah_clean(niah_needle(l, "", "")).find(none_clean), std::string::npos) << c;
    EXPECT_EQ(std::string(l.needle).find(l.none_word), std::string::npos) << c;

    const std::vector<std::string> nouns = niah_nouns(l);
    EXPECT_GE(nouns.size(), 30u) << c;
    for (const std::string& a : nouns) {
      EXPECT_FALSE(a.empty()) << c;
      EXPECT_EQ(a.find('"'), std::string::npos) << c;
      EXPECT_EQ(niah_response_numbers(a).size(), 0u) << c << " " << a;
      // A key echoed in an answer must not hold the none word (it would make a number answer wrong).
      EXPECT_EQ(a.find(l.none_word), std::string::npos) << c << " " << a;
      EXPECT_EQ(niah_clean(a).find(none_clean), std::string::npos) << c << " " << a;
      for (const std::string& b : nouns)
        if (&a != &b) {
          EXPECT_EQ(b.find(a), std::string::npos) << c << ": '" << a << "' is inside '" << b << "'";
        }
    }
  }
  for (const char* code : {"eng_Latn", "rus_Cyrl", "cmn_Hani", "hin_Deva", "arb_Arab", "ell_Grek", "heb_Hebr"})
    EXPECT_TRUE(codes.count(code)) << code;
  try {
    niah_language("tam_Taml");
    FAIL() << "a language without templates was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("no NIAH templates for language 'tam_Taml'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("eng_Latn"), std::string::npos);
  }
}

TEST(NiahLanguages, PromptLayout) {
  const NiahLanguage& en = niah_language("eng_Latn");
  const std::string p = niah_prompt(en, "HAY {key1} STACK", {"apple", "river"});
  EXPECT_NE(p.find("<text>\nHAY {key1} STACK\n</text>"), std::string::npos) << "the context is not a template";
  EXPECT_NE(p.find("\"apple\" and \"river\""), std::string::npos);
  EXPECT_NE(p.find("appear in the text above? List every one of them. If the text holds"), std::string::npos);
  const NiahLanguage& zh = niah_language("cmn_Hani");
  const std::string q = niah_prompt(zh, "草堆", {"苹果"});
  EXPECT_NE(q.find("特殊魔法数字？请把它们全部列出。如果"), std::string::npos) << "Chinese parts join without spaces";
  EXPECT_EQ(niah_needle(en, "apple", "1234567"), "The special magic number for \"apple\" is: 1234567.");
}
