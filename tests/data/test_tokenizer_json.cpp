// HF tokenizer.json support (data/tokenizer_json.h): file-independent unit tests on the byte-level alphabet and two
// tiny hand-written tokenizer.json fixtures (tests/golden/tokenizer/fixtures/), then the four real files
// (data/tokenizers/<name>/tokenizer.json, installed by scripts/fetch-tokenizers.sh) against the committed HF goldens
// (tests/golden/tokenizer/<name>.ids.jsonl, made by tools/goldens/make_tokenizer_goldens.py on the GPU machine).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "data/byte_level.h"
#include "data/sha256.h"
#include "data/text_normalizer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_json.h"
#include "data/unicode_text.h"
#include "data_test_util.h"
#include "models/json_file.h"

using namespace hlm;
using Ids = std::vector<int32_t>;

namespace {

const std::filesystem::path kTokenizerGoldens = std::filesystem::path(HLM_GOLDEN_DIR) / "tokenizer";

std::filesystem::path tokenizer_data_dir() {
  if (const char* dir = std::getenv("HLM_TOKENIZER_DIR")) return dir;
  return std::filesystem::path(HLM_GOLDEN_DIR) / ".." / ".." / "data" / "tokenizers";
}

nlohmann::json fixture(const std::string& name) { return json_file_read(kTokenizerGoldens / "fixtures" / name); }

JsonTokenizer tiny_byte_level(const std::function<void(nlohmann::json&)>& edit = {}) {
  nlohmann::json j = fixture("tiny_byte_level.json");
  if (edit) edit(j);
  return JsonTokenizer(j, "tiny_byte_level.json");
}

JsonTokenizer tiny_sentencepiece(const std::function<void(nlohmann::json&)>& edit = {}) {
  nlohmann::json j = fixture("tiny_sentencepiece.json");
  if (edit) edit(j);
  return JsonTokenizer(j, "tiny_sentencepiece.json");
}

struct TextRow {
  std::string id, text;
};

std::vector<TextRow> read_texts() {
  std::vector<TextRow> rows;
  std::ifstream in(kTokenizerGoldens / "texts.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    rows.push_back({j.at("id").get<std::string>(), j.at("text").get<std::string>()});
  }
  return rows;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

}  // namespace

// ---- file-independent ----

TEST(TokenizerByteLevel, AlphabetTable) {
  const ByteLevelAlphabet& t = byte_level_alphabet();
  EXPECT_EQ(t.byte_to_char['A'], U'A');
  EXPECT_EQ(t.byte_to_char['~'], U'~');
  EXPECT_EQ(t.byte_to_char[0x00], U'\u0100');
  EXPECT_EQ(t.byte_to_char[' '], U'\u0120');   // 'Ġ'
  EXPECT_EQ(t.byte_to_char['\n'], U'\u010A');  // 'Ċ'
  EXPECT_EQ(t.byte_to_char[0x7F], U'\u0121');
  EXPECT_EQ(t.byte_to_char[0xA0], U'\u0142');
  EXPECT_EQ(t.byte_to_char[0xAD], U'\u0143');
  EXPECT_EQ(t.byte_to_char[0xE9], U'\u00E9');
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    seen.insert(t.byte_to_char[b]);
    EXPECT_EQ(byte_level_char_to_byte(t.byte_to_char[b]), static_cast<unsigned char>(b));
  }
  EXPECT_EQ(seen.size(), 256u) << "the alphabet must be a bijection";
  EXPECT_EQ(byte_level_encode("a b\n"), "aĠbĊ");
  EXPECT_EQ(byte_level_decode_token("aĠbĊ"), "a b\n");
  EXPECT_EQ(byte_level_decode_token("<｜end▁of▁sentence｜>"), "<｜end▁of▁sentence｜>");  // outside the alphabet
}

TEST(TokenizerByteLevel, LossyUtf8) {
  EXPECT_EQ(utf8_lossy("ok é"), "ok é");
  EXPECT_EQ(utf8_lossy("a\xC3"), "a\xEF\xBF\xBD");                      // truncated 2-byte sequence
  EXPECT_EQ(utf8_lossy("\xE2\x82x"), "\xEF\xBF\xBDx");                    // one maximal subpart -> one U+FFFD
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");           // two invalid bytes
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three subparts
}

TEST(TokenizerJsonBpe, MergesFollowRankThenPosition) {
  const JsonTokenizer tok = tiny_byte_level();
  EXPECT_EQ(tok.encode("abcd"), (Ids{7, 3}));  // b+c (rank 0) before a+b (rank 1), then a+bc
  EXPECT_EQ(tok.encode("aaa"), (Ids{8, 0}));   // equal ranks: the leftmost pair merges first
  EXPECT_EQ(tok.encode("aaaa"), (Ids{12}));    // aa aa -> aaaa
  EXPECT_EQ(tok.encode(" ab"), (Ids{4, 6}));   // "Ġab" is in the vocabulary but a+b outranks Ġ+a
  EXPECT_EQ(tok.encode(""), Ids{});
  EXPECT_EQ(tok.vocab_size(), 24);
  const JsonTokenizer whole = tiny_byte_level([](nlohmann::json& j) { j["model"]["ignore_merges"] = true; });
  EXPECT_EQ(whole.encode(" ab"), (Ids{11}));  // ignore_merges: a word in the vocabulary is taken whole
  EXPECT_EQ(whole.encode("abcd"), (Ids{7, 3}));
  const JsonTokenizer legacy = tiny_byte_level([](nlohmann::json& j) {
    for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  });
  EXPECT_EQ(legacy.encode("abcd aaaa"), tok.encode("abcd aaaa"));  // "a b" strings mean the same as ["a", "b"]
}

TEST(TokenizerJsonBpe, AddedTokenSplitting) {
  const JsonTokenizer tok = tiny_byte_level();
  EXPECT_EQ(tok.encode("ab<|x|>cd"), (Ids{6, 20, 10}));
  EXPECT_EQ(tok.encode("<|x|><|x|>"), (Ids{20, 20}));
  EXPECT_EQ(tok.encode("a dd b"), (Ids{0, 4, 21, 4, 1}));  // single_word: stands alone
  EXPECT_EQ(tok.encode("add"), (Ids{0, 3, 3}));            // single_word: glued to a letter, not matched
  EXPECT_EQ(tok.encode("a <s> b"), (Ids{0, 22, 1}));       // lstrip/rstrip absorb the spaces around it
  EXPECT_EQ(tok.encode("cab"), (Ids{23, 1}));              // normalized token matched after normalization
  EXPECT_TRUE(tok.is_special(20));
  EXPECT_FALSE(tok.is_special(21));
  EXPECT_EQ(tok.id_to_token(20), "<|x|>");
  EXPECT_EQ(tok.token_to_id("Ġab"), 11);
}

TEST(TokenizerJsonBpe, NormalizerAndRoundTrip) {
  const JsonTokenizer tok = tiny_byte_level();
  EXPECT_EQ(tok.encode("e\u0301"), (Ids{13, 14}));  // NFC first: e + combining acute -> é = C3 A9 -> "Ã" "©"
  EXPECT_EQ(tok.encode("é"), (Ids{13, 14}));
  for (const std::string x : {"abcd aaa", "e\u0301 ab", " ab  ba\u00e9", "a<|x|>b"})
    EXPECT_EQ(tok.decode(tok.encode(x)), unicode_nfc(x)) << x;
  EXPECT_EQ(tok.decode({7, 3, 20}), "abcd<|x|>");
  EXPECT_EQ(tok.decode({13}), "\xEF\xBF\xBD");  // half of a UTF-8 sequence decodes to U+FFFD
  test::expect_input_error([&] { tok.decode({7, 99}); }, {"id 99", "position 1"});
  test::expect_input_error([&] { tok.encode("z"); }, {"\"z\"", "no unk_token"});
  test::expect_input_error([&] { tok.encode("a\xC3"); }, {"invalid UTF-8", "byte 1"});
}

TEST(TokenizerJsonBpe, SentencePieceByteFallback) {
  const JsonTokenizer tok = tiny_sentencepiece();
  EXPECT_EQ(tok.encode("ab c"), (Ids{264, 265}));            // "▁ab▁c": Prepend + Replace, then merges
  EXPECT_EQ(tok.encode("é"), (Ids{258, 197, 171}));          // é is not in the vocabulary: <0xC3> <0xA9>
  EXPECT_EQ(tok.encode("a<s>b"), (Ids{262, 1, 258, 260}));   // Prepend applies to each piece around an added token
  EXPECT_EQ(tok.decode({264, 265}), "ab c");                 // Replace, ByteFallback, Fuse, Strip(' ', 1, 0)
  EXPECT_EQ(tok.decode({258, 197, 171}), "é");
  EXPECT_EQ(tok.decode({258, 197}), "\xEF\xBF\xBD");         // an incomplete byte run: one U+FFFD per byte
  for (const std::string x : {"ab c", "é ü 数据 🙂", "a  b", "x\ty\nz"})
    EXPECT_EQ(tok.decode(tok.encode(x)), x) << x;
  const JsonTokenizer fused = tiny_sentencepiece([](nlohmann::json& j) { j["model"]["byte_fallback"] = false; });
  EXPECT_EQ(fused.encode("éé"), (Ids{258, 0}));  // unknowns fused into one <unk>
  const JsonTokenizer unfused = tiny_sentencepiece([](nlohmann::json& j) {
    j["model"]["byte_fallback"] = false;
    j["model"]["fuse_unk"] = false;
  });
  EXPECT_EQ(unfused.encode("éé"), (Ids{258, 0, 0}));
}

TEST(TokenizerJsonBpe, SplitBehaviors) {
  // One Split pre-tokenizer on "-" under each behavior; words are looked up char by char (no merges), so the ids
  // show the pieces only through which pieces exist: compare the pre-tokenized words via a vocabulary of whole pieces.
  const auto make = [](const std::string& behavior, bool invert) {
    nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", nlohmann::json::object()}, {"merges", nlohmann::json::array()},
                                   {"ignore_merges", true}, {"unk_token", "?"}}}};
    int id = 0;
    for (const char* piece : {"?", "a", "b", "-", "a-", "-b", "a-b", "--", "a--", "--b"}) j["model"]["vocab"][piece] = id++;
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
    return JsonTokenizer(j, "split-" + behavior);
  };
  const auto words = [](const JsonTokenizer& t, const std::string& text) {
    std::vector<std::string> out;
    for (int32_t id : t.encode(text)) out.push_back(*t.id_to_token(id));
    return out;
  };
  using W = std::vector<std::string>;
  EXPECT_EQ(words(make("Removed", false), "a-b"), (W{"a", "b"}));
  EXPECT_EQ(words(make("Isolated", false), "a-b"), (W{"a", "-", "b"}));
  EXPECT_EQ(words(make("MergedWithPrevious", false), "a-b"), (W{"a-", "b"}));
  EXPECT_EQ(words(make("MergedWithNext", false), "a-b"), (W{"a", "-b"}));
  EXPECT_EQ(words(make("Contiguous", false), "a--b"), (W{"a", "--", "b"}));
  EXPECT_EQ(words(make("Isolated", false), "a--b"), (W{"a", "-", "-", "b"}));
  EXPECT_EQ(words(make("Removed", true), "a-b"), (W{"-"}));  // invert: the non-matches are removed
}

TEST(TokenizerJsonBpe, BadInput) {
  test::ScratchDir scratch("tokjson");
  test::expect_input_error([] { tokenizer_load("/nonexistent/tokenizer.json"); }, {"no such file"});
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(scratch.path() / name) << text;
    return (scratch.path() / name).string();
  };
  test::expect_input_error([&] { tokenizer_load(write("bad.json", "{\"model\": {")); }, {"bad.json", "not valid JSON"});
  test::expect_input_error([&] { tokenizer_load(write("empty.json", "{}")); }, {"missing field \"model\""});
  test::expect_input_error(
      [&] { tokenizer_load(write("wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})")); },
      {"model.type \"WordPiece\" is not supported"});
  const std::string base = fixture("tiny_byte_level.json").dump();
  const auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(base);
    j[key] = value;
    return j;
  };
  test::expect_input_error([&] { JsonTokenizer(with("normalizer", {{"type", "Lowercase"}}), "f.json"); },
                           {"f.json: normalizer.type \"Lowercase\" is not supported"});
  test::expect_input_error(
      [&] {
        JsonTokenizer(with("pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Metaspace"}}}}}),
                      "f.json");
      },
      {"pre_tokenizer.pretokenizers[0].type \"Metaspace\" is not supported"});
  test::expect_input_error([&] { JsonTokenizer(with("decoder", {{"type", "WordPiece"}}), "f.json"); },
                           {"decoder.type \"WordPiece\""});
  test::expect_input_error(
      [&] {
        JsonTokenizer(with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                                             {"behavior", "Isolated"}}),
                      "f.json");
      },
      {"pre_tokenizer.pattern", "does not compile"});
  nlohmann::json bad_merge = nlohmann::json::parse(base);
  bad_merge["model"]["merges"].push_back({"a", "zz"});
  test::expect_input_error([&] { JsonTokenizer(bad_merge, "f.json"); }, {"model.merges[8]", "\"zz\""});
}

TEST(TokenizerJsonBpe, CommandLine) {
  const std::string fixture_path = (kTokenizerGoldens / "fixtures" / "tiny_byte_level.json").string();
  test::RunResult r = test::run_hybridlm("tokenize --tokenizer " + fixture_path + " --text 'abcd aaaa' --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[7,3,4,12]\n");  // abcd | Ġ | aaaa
  r = test::run_hybridlm("tokenize --tokenizer " + fixture_path + " --text 'abcd'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"abc\""), std::string::npos) << r.out;
  r = test::run_hybridlm("tokenize --tokenizer " + fixture_path + " --decode --text 7,3,20");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "abcd<|x|>\n");
  r = test::run_hybridlm("tokenize --tokenizer bytes --text 'é' --json");
  EXPECT_EQ(r.out, "[195,169]\n");
  r = test::run_hybridlm("tokenize --tokenizer /nonexistent/tokenizer.json --text x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
  r = test::run_hybridlm("tokenize --tokenizer " + fixture_path + " --decode --text 7,99");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("id 99"), std::string::npos) << r.err;
}

// ---- the four real tokenizer files ----

struct RealTokenizer {
  const char* name;
  // What decode(encode(x)) gives back for NFC text x: NFC normalizer -> NFC(x); Gemma's decoder turns '▁' into ' '.
  std::string (*round_trip)(const std::string&);
};

const RealTokenizer kRealTokenizers[] = {
    {"qwen3", [](const std::string& x) { return unicode_nfc(x); }},
    {"llama3", [](const std::string& x) { return x; }},
    {"gemma3", [](const std::string& x) { return replace_all(x, "▁", " "); }},
    {"deepseek_v3", [](const std::string& x) { return x; }},
};

void PrintTo(const RealTokenizer& t, std::ostream* os) { *os << t.name; }

class RealTokenizerTest : public ::testing::TestWithParam<RealTokenizer> {};

TEST_P(RealTokenizerTest, MatchesHfGoldens) {
  const RealTokenizer& spec = GetParam();
  const std::filesystem::path file = tokenizer_data_dir() / spec.name / "tokenizer.json";
  ASSERT_TRUE(std::filesystem::exists(file))
      << file << " is missing: run `bash scripts/fetch-tokenizers.sh` (or `make tokenizers`) to install it";
  const std::unique_ptr<Tokenizer> tok = tokenizer_load(file.string());
  const std::vector<TextRow> texts = read_texts();
  ASSERT_GT(texts.size(), 50u);

  // decode(encode(x)) gives x back (modulo the file's normalizer), and encoding is thread-independent.
  std::vector<Ids> serial;
  for (const TextRow& row : texts) {
    serial.push_back(tok->encode(row.text));
    if (row.id.find("raw-nfd") != std::string::npos && std::string(spec.name) != "qwen3") continue;
    EXPECT_EQ(tok->decode(serial.back()), spec.round_trip(row.text)) << spec.name << " round trip of " << row.id;
  }
  std::vector<Ids> parallel(texts.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < texts.size(); i += 3) parallel[i] = tok->encode(texts[i].text);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(parallel, serial) << "encode differs when called from several threads";

  const std::filesystem::path golden = kTokenizerGoldens / (std::string(spec.name) + ".ids.jsonl");
  // Every tokenizer of kRealTokenizers has a committed golden: a missing one is a failure, not a skip.
  ASSERT_TRUE(std::filesystem::exists(golden))
      << golden << " is missing (generate it with tools/goldens/make_tokenizer_goldens.py on the GPU machine)";
  std::ifstream in(golden);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json header = nlohmann::json::parse(line);
  ASSERT_EQ(header.at("version").get<int>(), 1) << golden << ": unknown golden format version";
  std::ifstream file_in(file, std::ios::binary);
  const std::string file_bytes((std::istreambuf_iterator<char>(file_in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(header.at("tokenizer_sha256").get<std::string>(), sha256_hex(file_bytes))
      << golden << " was made from another " << file << " (regenerate the goldens or re-fetch the file)";
  if (header.contains("texts_sha256")) {
    std::ifstream texts_in(kTokenizerGoldens / "texts.jsonl", std::ios::binary);
    const std::string texts_bytes((std::istreambuf_iterator<char>(texts_in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(header["texts_sha256"].get<std::string>(), sha256_hex(texts_bytes))
        << golden << " was made from another texts.jsonl (regenerate the goldens)";
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < texts.size(); ++i) index[texts[i].id] = i;
  int compared = 0, mismatched = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json row = nlohmann::json::parse(line);
    const std::string id = row.at("id").get<std::string>();
    const auto it = index.find(id);
    ASSERT_NE(it, index.end()) << golden << ": text " << id << " is not in texts.jsonl (regenerate the goldens)";
    const Ids expected = row.at("ids").get<Ids>();
    const Ids& got = serial[it->second];
    ++compared;
    if (got != expected) {
      size_t k = 0;
      while (k < got.size() && k < expected.size() && got[k] == expected[k]) ++k;
      const auto* json_tok = dynamic_cast<const JsonTokenizer*>(tok.get());
      const auto show = [&](const Ids& ids) {
        return k < ids.size() ? std::to_string(ids[k]) + " " + nlohmann::json(*json_tok->id_to_token(ids[k])).dump()
                              : std::string("(end)");
      };
      if (++mismatched <= 5)
        ADD_FAILURE() << spec.name << " " << id << ": first difference at token " << k << ": HF " << show(expected)
                      << ", ours " << show(got) << " (HF " << expected.size() << " tokens, ours " << got.size() << ")";
    }
    if (row.contains("decoded")) {
      EXPECT_EQ(tok->decode(expected), row["decoded"].get<std::string>()) << spec.name << " decode of " << id;
    }
  }
  EXPECT_EQ(mismatched, 0) << spec.name << ": " << mismatched << " of " << compared << " texts differ from HF";
  EXPECT_EQ(compared, static_cast<int>(texts.size())) << golden << " does not cover every text of texts.jsonl";
}

INSTANTIATE_TEST_SUITE_P(Files, RealTokenizerTest, ::testing::ValuesIn(kRealTokenizers),
                         [](const auto& info) { return std::string(info.param.name); });
