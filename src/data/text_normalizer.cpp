#include "data/text_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <vector>

#include "core/error.h"
#include "data/pcre2_regex.h"
#include "data/tokenizer_json_fields.h"

namespace hlm {
namespace {

enum class UnicodeForm { NFC, NFD, NFKC, NFKD };

const icu::Normalizer2& icu_normalizer(UnicodeForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case UnicodeForm::NFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case UnicodeForm::NFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case UnicodeForm::NFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case UnicodeForm::NFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  HLM_CHECK(U_SUCCESS(status) && n != nullptr, "ICU normalizer unavailable: ", u_errorName(status));
  return *n;
}

void normalize_in_place(const icu::Normalizer2& n, std::string& text) {
  UErrorCode status = U_ZERO_ERROR;
  // Most text is already normalized: the quick check avoids a copy.
  if (n.isNormalizedUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), status) &&
      U_SUCCESS(status))
    return;
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&out);
  n.normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, status);
  HLM_CHECK(U_SUCCESS(status), "ICU normalization failed: ", u_errorName(status));
  text = std::move(out);
}

class UnicodeNormalizer final : public TextNormalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : n_(icu_normalizer(form)) {}
  void apply(std::string& text) const override { normalize_in_place(n_, text); }

 private:
  const icu::Normalizer2& n_;
};

// Replace every non-overlapping occurrence of a literal string or a regex with `content`.
class ReplaceNormalizer final : public TextNormalizer {
 public:
  ReplaceNormalizer(const nlohmann::json& j, const std::string& where) {
    const JsonPattern p = json_pattern(j, where);
    if (p.is_regex) regex_ = std::make_unique<Pcre2Regex>(p.text, where + ".pattern");
    else pattern_ = p.text;
    content_ = json_string(j, "content", where);
  }
  void apply(std::string& text) const override {
    std::vector<RegexMatch> matches;
    if (regex_) {
      regex_->find_all(text, matches);
    } else if (!pattern_.empty()) {
      for (size_t pos = text.find(pattern_); pos != std::string::npos; pos = text.find(pattern_, pos + pattern_.size()))
        matches.push_back({pos, pos + pattern_.size()});
    }
    if (matches.empty()) return;
    std::string out;
    out.reserve(text.size() + matches.size() * content_.size());
    size_t prev = 0;
    for (const RegexMatch& m : matches) {
      out.append(text, prev, m.begin - prev);
      out += content_;
      prev = m.end;
    }
    out.append(text, prev, std::string::npos);
    text = std::move(out);
  }

 private:
  std::string pattern_, content_;
  std::unique_ptr<Pcre2Regex> regex_;
};

// Prepends a fixed string to every non-empty piece (SentencePiece's "▁" in newer Llama/Gemma files).
class PrependNormalizer final : public TextNormalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

class SequenceNormalizer final : public TextNormalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<TextNormalizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::string& text) const override {
    for (const auto& s : steps_) s->apply(text);
  }

 private:
  std::vector<std::unique_ptr<TextNormalizer>> steps_;
};

}  // namespace

std::unique_ptr<TextNormalizer> text_normalizer_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKD);
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j, where);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json_string(j, "prepend", where));
  if (type == "Sequence") {
    const nlohmann::json& list = json_array(j, "normalizers", where);
    std::vector<std::unique_ptr<TextNormalizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = text_normalizer_from_json(list[i], str_cat(where, ".normalizers[", i, "]"));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  throw_input_error(where, ".type \"", type,
                    "\" is not supported (supported normalizers: NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence)");
}

std::string unicode_nfc(const std::string& text) {
  std::string out = text;
  normalize_in_place(icu_normalizer(UnicodeForm::NFC), out);
  return out;
}

}  // namespace hlm
