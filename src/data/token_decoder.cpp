#include "data/token_decoder.h"

#include "core/error.h"
#include "data/byte_level.h"
#include "data/pcre2_regex.h"
#include "data/tokenizer_json_fields.h"
#include "data/unicode_text.h"

namespace hlm {
namespace {

class ByteLevelDecoder final : public TokenDecoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) bytes += byte_level_decode_token(t);
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder final : public TokenDecoder {
 public:
  ReplaceDecoder(const nlohmann::json& j, const std::string& where) {
    const JsonPattern p = json_pattern(j, where);
    if (p.is_regex) regex_ = std::make_unique<Pcre2Regex>(p.text, where + ".pattern");
    else literal_ = p.text;
    content_ = json_string(j, "content", where);
  }
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<RegexMatch> matches;
    for (std::string& t : tokens) {
      matches.clear();
      if (regex_) {
        regex_->find_all(t, matches);
      } else if (!literal_.empty()) {
        for (size_t pos = t.find(literal_); pos != std::string::npos; pos = t.find(literal_, pos + literal_.size()))
          matches.push_back({pos, pos + literal_.size()});
      }
      if (matches.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const RegexMatch& m : matches) {
        out.append(t, prev, m.begin - prev);
        out += content_;
        prev = m.end;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::unique_ptr<Pcre2Regex> regex_;
  std::string literal_, content_;
};

// Runs of "<0xNN>" tokens become their bytes: the text when valid UTF-8, else one U+FFFD per byte (as HF).
class ByteFallbackDecoder final : public TokenDecoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_len = 0;
    const auto flush = [&] {
      if (run_len == 0) return;
      if (utf8_lossy(run) == run) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_len; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_len = 0;
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        const auto hex = [](char c) {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          return -1;
        };
        const int hi = hex(t[3]), lo = hex(t[4]);
        if (hi >= 0 && lo >= 0) byte = hi * 16 + lo;
      }
      if (byte >= 0) {
        run += static_cast<char>(byte);
        ++run_len;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public TokenDecoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder final : public TokenDecoder {
 public:
  StripDecoder(const nlohmann::json& j, const std::string& where) {
    const std::string content = json_string(j, "content", where);
    size_t pos = 0;
    HLM_CHECK_INPUT(!content.empty() && (content_ = utf8_next(content, pos), pos == content.size()), where,
                    ".content: expected one character, got \"", content, "\"");
    const auto count = [&](const char* key) {
      HLM_CHECK_INPUT(j.contains(key) && j[key].is_number_unsigned(), where, ".", key,
                      ": expected a non-negative integer");
      return j[key].get<size_t>();
    };
    start_ = count("start");
    stop_ = count("stop");
  }
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t i = 0; i < start_ && begin < end; ++i) {
        size_t p = begin;
        if (utf8_next(t, p) != content_) break;
        begin = p;
      }
      for (size_t i = 0; i < stop_ && end > begin; ++i) {
        size_t p = end;
        if (utf8_prev(t, p) != content_) break;
        end = p;
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  char32_t content_ = 0;
  size_t start_ = 0, stop_ = 0;
};

class SequenceDecoder final : public TokenDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenDecoder>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

}  // namespace

std::unique_ptr<TokenDecoder> token_decoder_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j, where);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(j, where);
  if (type == "Sequence") {
    const nlohmann::json& list = json_array(j, "decoders", where);
    std::vector<std::unique_ptr<TokenDecoder>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = token_decoder_from_json(list[i], str_cat(where, ".decoders[", i, "]"));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  throw_input_error(where, ".type \"", type,
                    "\" is not supported (supported decoders: ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence)");
}

}  // namespace hlm
