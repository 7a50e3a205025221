// `hybridlm tokenize --tokenizer FILE|bytes (--text T | --file F) [--json] [--jsonl] [--decode]`: encode text to ids
// (HF encode with add_special_tokens=False: no BOS/EOS added) or decode ids back to text (data/tokenizer.h).
#include <climits>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/subcommands.h"
#include "core/error.h"
#include "models/json_file.h"
#include "data/text_io.h"
#include "data/tokenizer.h"
#include "data/tokenizer_json.h"

namespace hlm {
namespace {

struct TokenizeOptions {
  std::string tokenizer, text, file;
  bool json = false, jsonl = false, decode = false;
};

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), path, ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Ids written as a JSON list "[1, 2, 3]" or separated by commas and/or whitespace "1,2,3".
std::vector<int32_t> parse_ids(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    try {
      for (const auto& v : nlohmann::json::parse(text)) {
        HLM_CHECK_INPUT(v.is_number_integer(), what, ": expected integer ids, got ", v.dump());
        ids.push_back(v.get<int32_t>());
      }
    } catch (const nlohmann::json::exception& e) {
      throw_input_error(what, ": not a JSON list of ids: ", e.what());
    }
    return ids;
  }
  std::string token;
  const auto flush = [&] {
    if (token.empty()) return;
    HLM_CHECK_INPUT(token.size() <= 10 && std::stoll(token) <= INT32_MAX, what, ": id ", token, " is too large");
    ids.push_back(static_cast<int32_t>(std::stoll(token)));
    token.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      flush();
    } else {
      HLM_CHECK_INPUT(c >= '0' && c <= '9', what, ": unexpected character '", c,
                      "' in a list of ids (use 1,2,3 or [1, 2, 3])");
      token += c;
    }
  }
  flush();
  return ids;
}

// The vocabulary string of an id, shown next to it (byte-level tokens read as stored, e.g. "Ġthe").
std::string token_label(const Tokenizer& tok, int32_t id) {
  if (const auto* json_tok = dynamic_cast<const JsonTokenizer*>(&tok))
    if (const auto t = json_tok->id_to_token(id)) return *t;
  return tok.decode({id});
}

int run_jsonl(const Tokenizer& tok, const std::string& path) {
  jsonl_file_for_each(path, [&](const nlohmann::json& row, int64_t n) {
    HLM_CHECK_INPUT(row.is_object() && row.contains("text") && row["text"].is_string(), path, ":", n,
                    ": expected an object with a string field \"text\"");
    nlohmann::json out = {{"id", row.contains("id") ? row["id"] : nlohmann::json(n)},
                          {"ids", tok.encode(row["text"].get<std::string>())}};
    std::cout << out.dump() << "\n";
  });
  return 0;
}

int run_tokenize(const TokenizeOptions& o) {
  HLM_CHECK_INPUT(!o.text.empty() || !o.file.empty(), "tokenize: give --text T or --file F");
  const std::unique_ptr<Tokenizer> tok = tokenizer_load(o.tokenizer);
  if (o.jsonl) {
    HLM_CHECK_INPUT(!o.file.empty() && !o.decode, "tokenize: --jsonl reads --file (and does not combine with --decode)");
    return run_jsonl(*tok, o.file);
  }
  const std::string input = o.file.empty() ? o.text : read_whole_file(o.file);
  const std::string what = o.file.empty() ? "--text" : o.file;
  if (o.decode) {
    const std::string text = tok->decode(parse_ids(input, what));
    if (o.json) std::cout << nlohmann::json(text).dump() << "\n";
    else std::cout << text << "\n";
    return 0;
  }
  const size_t bad = utf8_first_invalid(input);
  HLM_CHECK_INPUT(bad == std::string::npos, what, ": invalid UTF-8 at byte ", bad);
  const std::vector<int32_t> ids = tok->encode(input);
  if (o.json) {
    std::cout << nlohmann::json(ids).dump() << "\n";
    return 0;
  }
  std::cout << ids.size() << " tokens (" << input.size() << " bytes, tokenizer " << tok->name() << ", vocabulary "
            << tok->vocab_size() << ")\n";
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
  std::cout << "\n";
  if (ids.size() <= 200) {  // a readable table for short inputs
    for (size_t i = 0; i < ids.size(); ++i)
      std::cout << "  " << i << "\t" << ids[i] << "\t" << nlohmann::json(token_label(*tok, ids[i])).dump() << "\n";
  }
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text to token ids (or decode ids) with a tokenizer");
  cmd->footer(
      "Encoding adds no BOS/EOS (HF encode with add_special_tokens=False); added tokens such as <|im_start|> in the\n"
      "text map to their ids. Supported files: HF tokenizer.json with a BPE model (docs/tokenizers.md).\n"
      "Examples:\n"
      "  hybridlm tokenize --tokenizer data/tokenizers/qwen3/tokenizer.json --text 'Hello world'\n"
      "  hybridlm tokenize --tokenizer bytes --text 'é' --json                  # [195,169]\n"
      "  hybridlm tokenize --tokenizer data/tokenizers/gemma3/tokenizer.json --file doc.txt --json\n"
      "  hybridlm tokenize --tokenizer data/tokenizers/llama3/tokenizer.json --decode --text 9906,1917\n"
      "  hybridlm tokenize --tokenizer data/tokenizers/qwen3/tokenizer.json --jsonl --file texts.jsonl");
  cmd->add_option("--tokenizer", options->tokenizer, "tokenizer.json file (or a folder holding one), or 'bytes'")
      ->required();
  CLI::Option* text = cmd->add_option("--text", options->text, "Text to encode (with --decode: ids, 1,2,3 or [1,2,3])");
  CLI::Option* file = cmd->add_option("--file", options->file, "Read the text (or ids with --decode) from a file");
  text->excludes(file);
  file->excludes(text);
  cmd->add_flag("--json", options->json, "Print a JSON list of ids (with --decode: the text as a JSON string)");
  cmd->add_flag("--jsonl", options->jsonl,
                "--file is JSONL with a \"text\" field per line; print {\"id\": ..., \"ids\": [...]} per line");
  cmd->add_flag("--decode", options->decode, "Decode ids to text instead of encoding");
  cmd->callback([options, &action] { action = [options] { return run_tokenize(*options); }; });
}

}  // namespace hlm
