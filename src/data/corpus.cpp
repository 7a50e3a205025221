// Corpus directory reading and writing (format in corpus.h). Reading streams each .jsonl.zst file once: it
// decompresses, hashes the compressed bytes (when corpus.json lists a sha256), validates every line (UTF-8, JSON,
// a "text" string) and compares the counts with corpus.json. Non-goals: deduplication, normalisation, filtering.
#include "data/corpus.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/sha256.h"
#include "data/text_io.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "hybridlm-corpus";
constexpr int kVersion = 1;
constexpr std::array<const char*, 4> kTiers = {"anchor", "high", "mid", "low"};

// FineWeb-2 style: ISO 639-3 (or 639-1) letters, '_', a four-letter ISO 15924 script ("eng_Latn", "cmn_Hani").
bool valid_code(const std::string& c) {
  const size_t us = c.find('_');
  if (us != 2 && us != 3) return false;
  if (c.size() != us + 5) return false;
  for (size_t i = 0; i < us; ++i)
    if (c[i] < 'a' || c[i] > 'z') return false;
  if (c[us + 1] < 'A' || c[us + 1] > 'Z') return false;
  for (size_t i = us + 2; i < c.size(); ++i)
    if (c[i] < 'a' || c[i] > 'z') return false;
  return true;
}

void check_code(const std::string& code, const std::string& where) {
  HLM_CHECK_INPUT(valid_code(code), where, ": language code '", code,
                  "' does not look like a FineWeb-2 code (ISO 639-3 + '_' + script, e.g. eng_Latn, cmn_Hani)");
}

// A file name inside the corpus directory: relative, no "..".
void check_file_name(const std::string& file, const std::string& where) {
  const fs::path p(file);
  bool ok = !file.empty() && p.is_relative();
  for (const auto& part : p) ok = ok && part != "..";
  HLM_CHECK_INPUT(ok, where, ": file '", file, "' must be a relative path inside the corpus directory");
}

std::string read_whole(const fs::path& path) {
  HLM_CHECK_INPUT(fs::is_regular_file(path), path.string(), ": no such file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  HLM_CHECK_INPUT(in.good() || in.eof(), path.string(), ": read error");
  return ss.str();
}

CorpusLanguage parse_language(const json& entry, size_t index, const std::string& where) {
  const std::string at = where + ": languages[" + std::to_string(index) + "]";
  HLM_CHECK_INPUT(entry.is_object(), at, ": expected an object");
  auto field = [&](const char* key) -> const json& {
    HLM_CHECK_INPUT(entry.contains(key), at, ": missing \"", key, "\"");
    return entry.at(key);
  };
  CorpusLanguage lang;
  HLM_CHECK_INPUT(field("code").is_string(), at, ": \"code\" must be a string");
  lang.code = entry["code"].get<std::string>();
  check_code(lang.code, at);
  HLM_CHECK_INPUT(field("file").is_string(), at, ": \"file\" must be a string");
  lang.file = entry["file"].get<std::string>();
  check_file_name(lang.file, at);
  HLM_CHECK_INPUT(field("tier").is_string(), at, ": \"tier\" must be a string");
  lang.tier = entry["tier"].get<std::string>();
  corpus_tier_index(lang.tier);
  HLM_CHECK_INPUT(field("documents").is_number_integer() && entry["documents"].get<int64_t>() >= 0, at,
                  ": \"documents\" must be a non-negative integer");
  lang.documents = entry["documents"].get<int64_t>();
  lang.bytes = -1;  // not listed
  if (entry.contains("bytes")) {
    HLM_CHECK_INPUT(entry["bytes"].is_number_integer() && entry["bytes"].get<int64_t>() >= 0, at,
                    ": \"bytes\" must be a non-negative integer");
    lang.bytes = entry["bytes"].get<int64_t>();
  }
  if (entry.contains("sha256")) {
    HLM_CHECK_INPUT(entry["sha256"].is_string() && entry["sha256"].get<std::string>().size() == 64, at,
                    ": \"sha256\" must be 64 hex digits");
    lang.sha256 = entry["sha256"].get<std::string>();
  }
  return lang;
}

}  // namespace

int corpus_tier_index(const std::string& tier) {
  for (size_t i = 0; i < kTiers.size(); ++i)
    if (tier == kTiers[i]) return static_cast<int>(i);
  throw_input_error("unknown tier '", tier, "' (known: anchor, high, mid, low)");
}

Corpus Corpus::open(const fs::path& dir) {
  HLM_CHECK_INPUT(fs::is_directory(dir), dir.string(), ": no such corpus directory");
  const fs::path meta_path = dir / "corpus.json";
  const std::string where = meta_path.string();
  json meta;
  try {
    meta = json::parse(read_whole(meta_path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number overflow
    throw_input_error(where, ": invalid JSON (", e.what(), ")");
  }
  HLM_CHECK_INPUT(meta.is_object() && meta.value("format", json()).is_string() &&
                      meta["format"].get<std::string>() == kFormat,
                  where, ": not a hybridlm corpus (\"format\" must be \"", kFormat, "\")");
  HLM_CHECK_INPUT(meta.value("version", json()).is_number_integer() && meta["version"].get<int>() == kVersion, where,
                  ": unsupported corpus version ", meta.value("version", json()).dump(), " (this build reads ",
                  kVersion, ")");
  HLM_CHECK_INPUT(meta.contains("languages") && meta["languages"].is_array() && !meta["languages"].empty(), where,
                  ": \"languages\" must be a non-empty array");
  Corpus corpus;
  corpus.dir_ = dir;
  std::set<std::string> codes;
  for (size_t i = 0; i < meta["languages"].size(); ++i) {
    CorpusLanguage lang = parse_language(meta["languages"][i], i, where);
    HLM_CHECK_INPUT(codes.insert(lang.code).second, where, ": language ", lang.code, " is listed twice");
    const fs::path file = dir / lang.file;
    HLM_CHECK_INPUT(fs::is_regular_file(file), file.string(), ": listed in ", where, " but missing");
    corpus.languages_.push_back(std::move(lang));
  }
  nlohmann::json provenance = nlohmann::json::object();
  for (const char* key : {"packages", "source_bytes", "left_out"})
    if (meta.contains(key)) provenance[key] = meta[key];
  corpus.provenance_ = corpus_provenance_from_json(provenance, where);
  return corpus;
}

const CorpusLanguage& Corpus::language(const std::string& code) const {
  std::string known;
  for (const CorpusLanguage& lang : languages_) {
    if (lang.code == code) return lang;
    known += (known.empty() ? "" : ", ") + lang.code;
  }
  throw_input_error("unknown language '", code, "'; the corpus at ", dir_.string(), " has: ", known);
}

CorpusDocuments Corpus::read_documents(const std::string& code) const {
  const CorpusLanguage& lang = language(code);
  const fs::path path = dir_ / lang.file;
  const std::string where = path.string();
  CorpusDocuments out;
  int64_t lines = 0, bytes = 0;
  Sha256 hash;
  const bool check_hash = !lang.sha256.empty();
  zstd_for_each_line(
      path,
      [&](std::string_view line, int64_t n) {
        lines = n;
        const size_t bad = utf8_first_invalid(line);
        HLM_CHECK_INPUT(bad == std::string_view::npos, where, ": line ", n, ": invalid UTF-8 at byte ", bad);
        json doc;
        try {
          doc = json::parse(line);
        } catch (const json::exception& e) {  // parse_error, or out_of_range (number overflow)
          throw_input_error(where, ": line ", n, ": invalid JSON (", e.what(), ")");
        }
        HLM_CHECK_INPUT(doc.is_object() && doc.contains("text") && doc["text"].is_string(), where, ": line ", n,
                        ": missing \"text\" string field");
        std::string text = doc["text"].get<std::string>();
        // \u escapes decode to valid UTF-8 or fail to parse; the check guards against other JSON libraries' quirks.
        HLM_CHECK_INPUT(utf8_first_invalid(text) == std::string::npos, where, ": line ", n, ": invalid UTF-8 text");
        bytes += static_cast<int64_t>(text.size());
        if (text.empty()) {
          ++out.skipped_empty;
        } else {
          out.texts.push_back(std::move(text));
        }
      },
      [&](std::string_view chunk) {
        if (check_hash) hash.update(chunk);
      });
  HLM_CHECK_INPUT(lines == lang.documents, where, ": holds ", lines, " documents but corpus.json lists ",
                  lang.documents);
  HLM_CHECK_INPUT(lang.bytes < 0 || bytes == lang.bytes, where, ": holds ", bytes,
                  " text bytes but corpus.json lists ", lang.bytes);
  if (check_hash) {
    const std::string actual = hash.hex_digest();
    HLM_CHECK_INPUT(actual == lang.sha256, where, ": sha256 ", actual, " differs from corpus.json (", lang.sha256,
                    "): the file changed after the corpus was written");
  }
  return out;
}

void corpus_write(const fs::path& dir, const std::vector<CorpusLanguage>& languages,
                  const std::vector<std::vector<std::string>>& docs, const std::vector<std::string>& sources,
                  const CorpusProvenance& provenance) {
  const std::string where = dir.string();
  HLM_CHECK_INPUT(languages.size() == docs.size(), where, ": ", languages.size(), " languages but ", docs.size(),
                  " document lists");
  HLM_CHECK_INPUT(!languages.empty(), where, ": a corpus needs at least one language");
  // Validate everything before the first file is written.
  std::set<std::string> codes, files;
  std::vector<CorpusLanguage> listed = languages;
  for (size_t l = 0; l < listed.size(); ++l) {
    CorpusLanguage& lang = listed[l];
    check_code(lang.code, where);
    HLM_CHECK_INPUT(codes.insert(lang.code).second, where, ": language ", lang.code, " given twice");
    corpus_tier_index(lang.tier);
    if (lang.file.empty()) lang.file = lang.code + ".jsonl.zst";
    check_file_name(lang.file, where);
    HLM_CHECK_INPUT(lang.file != "corpus.json" && files.insert(lang.file).second, where, ": file name '", lang.file,
                    "' is used twice");
    for (size_t d = 0; d < docs[l].size(); ++d) {
      const size_t bad = utf8_first_invalid(docs[l][d]);
      HLM_CHECK_INPUT(bad == std::string::npos, where, ": ", lang.code, " document ", d, ": invalid UTF-8 at byte ",
                      bad);
    }
  }
  for (const auto& [code, per_source] : provenance.source_bytes) {
    HLM_CHECK_INPUT(codes.count(code), where, ": source_bytes names ", code,
                    ", which is not among the languages written");
    const std::string& wanted = code;  // a structured binding cannot be captured by clang < 16 (the fuzz build)
    const size_t l = static_cast<size_t>(
        std::find_if(listed.begin(), listed.end(), [&](const CorpusLanguage& x) { return x.code == wanted; }) -
        listed.begin());
    int64_t text_bytes = 0, listed_bytes = 0;
    for (const std::string& d : docs[l]) text_bytes += static_cast<int64_t>(d.size());
    for (const auto& [source, bytes] : per_source) listed_bytes += bytes;
    HLM_CHECK_INPUT(listed_bytes == text_bytes, where, ": source_bytes of ", code, " sum to ", listed_bytes,
                    " but its documents hold ", text_bytes, " text bytes");
  }
  fs::create_directories(dir);
  nlohmann::ordered_json meta_languages = nlohmann::ordered_json::array();
  for (size_t l = 0; l < listed.size(); ++l) {
    CorpusLanguage& lang = listed[l];
    std::string jsonl;
    lang.bytes = 0;
    for (const std::string& text : docs[l]) {
      jsonl += json{{"text", text}}.dump();
      jsonl += '\n';
      lang.bytes += static_cast<int64_t>(text.size());
    }
    const std::string compressed = zstd_compress(jsonl);
    lang.documents = static_cast<int64_t>(docs[l].size());
    lang.sha256 = sha256_hex(compressed);
    fs::create_directories((dir / lang.file).parent_path());
    file_write_atomic(dir / lang.file, compressed);
    meta_languages.push_back(nlohmann::ordered_json{{"code", lang.code},
                                                    {"file", lang.file},
                                                    {"tier", lang.tier},
                                                    {"documents", lang.documents},
                                                    {"bytes", lang.bytes},
                                                    {"sha256", lang.sha256}});
  }
  nlohmann::ordered_json meta;
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["languages"] = meta_languages;
  meta["sources"] = sources;
  corpus_provenance_to_json(provenance, meta);
  file_write_atomic(dir / "corpus.json", meta.dump(2) + "\n");
}

}  // namespace hlm
