// Where a corpus's text came from, recorded in corpus.json by `hybridlm corpus import --sources FILE` (make corpus).
// The sources file (and the same keys in corpus.json):
//   {"packages": [{"registry": "debian|npm|...", "name": "chromium-l10n", "version": "156.0...", "bytes": 9000000}],
//    "source_bytes": {"fra_Latn": {"chromium": 123456, "lo_ui": 7890}},   // UTF-8 text bytes per source, per language
//    "left_out": {"bod_Tibt": 61234}}                                     // languages dropped (bytes they had)
// Every key is optional; other keys are input errors (typos would otherwise vanish). Byte counts are non-negative.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hlm {

struct CorpusPackage {
  std::string registry, name, version;
  int64_t bytes = 0;  // size of the downloaded archive
};

struct CorpusProvenance {
  std::vector<CorpusPackage> packages;
  std::map<std::string, std::map<std::string, int64_t>> source_bytes;  // language -> source -> text bytes
  std::map<std::string, int64_t> left_out;                              // language -> text bytes it had
  bool empty() const { return packages.empty() && source_bytes.empty() && left_out.empty(); }
};

// Parses the object above; `where` names the file in errors.
CorpusProvenance corpus_provenance_from_json(const nlohmann::json& j, const std::string& where);
CorpusProvenance corpus_provenance_load(const std::filesystem::path& path);
// The corpus.json keys ("packages", "source_bytes", "left_out"), added to `meta` when non-empty.
void corpus_provenance_to_json(const CorpusProvenance& p, nlohmann::ordered_json& meta);

}  // namespace hlm
