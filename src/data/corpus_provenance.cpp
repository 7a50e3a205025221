// Sources-file parsing and corpus.json serialisation for CorpusProvenance (format in corpus_provenance.h).
#include "data/corpus_provenance.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hlm {
namespace {

using nlohmann::json;

int64_t byte_count(const json& v, const std::string& at) {
  HLM_CHECK_INPUT(v.is_number_integer() && v.get<int64_t>() >= 0, at, ": expected a non-negative integer byte count");
  return v.get<int64_t>();
}

std::string string_field(const json& obj, const char* key, const std::string& at) {
  HLM_CHECK_INPUT(obj.contains(key) && obj[key].is_string() && !obj[key].get<std::string>().empty(), at,
                  ": \"", key, "\" must be a non-empty string");
  return obj[key].get<std::string>();
}

}  // namespace

CorpusProvenance corpus_provenance_from_json(const json& j, const std::string& where) {
  HLM_CHECK_INPUT(j.is_object(), where, ": expected a JSON object with \"packages\", \"source_bytes\", \"left_out\"");
  CorpusProvenance p;
  for (const auto& [key, value] : j.items()) {
    HLM_CHECK_INPUT(key == "packages" || key == "source_bytes" || key == "left_out", where, ": unknown key \"", key,
                    "\" (known: packages, source_bytes, left_out)");
  }
  if (j.contains("packages")) {
    HLM_CHECK_INPUT(j["packages"].is_array(), where, ": \"packages\" must be an array");
    for (size_t i = 0; i < j["packages"].size(); ++i) {
      const json& e = j["packages"][i];
      const std::string at = where + ": packages[" + std::to_string(i) + "]";
      HLM_CHECK_INPUT(e.is_object(), at, ": expected an object");
      CorpusPackage pkg{string_field(e, "registry", at), string_field(e, "name", at), string_field(e, "version", at),
                        0};
      if (e.contains("bytes")) pkg.bytes = byte_count(e["bytes"], at + ".bytes");
      p.packages.push_back(std::move(pkg));
    }
  }
  if (j.contains("source_bytes")) {
    HLM_CHECK_INPUT(j["source_bytes"].is_object(), where, ": \"source_bytes\" must map languages to objects");
    for (const auto& [code, per_source] : j["source_bytes"].items()) {
      const std::string at = where + ": source_bytes." + code;
      HLM_CHECK_INPUT(per_source.is_object(), at, ": expected an object {source: bytes}");
      for (const auto& [source, bytes] : per_source.items())
        p.source_bytes[code][source] = byte_count(bytes, at + "." + source);
    }
  }
  if (j.contains("left_out")) {
    HLM_CHECK_INPUT(j["left_out"].is_object(), where, ": \"left_out\" must map languages to byte counts");
    for (const auto& [code, bytes] : j["left_out"].items())
      p.left_out[code] = byte_count(bytes, where + ": left_out." + code);
  }
  return p;
}

CorpusProvenance corpus_provenance_load(const std::filesystem::path& path) {
  const std::string where = path.string();
  HLM_CHECK_INPUT(std::filesystem::is_regular_file(path), where, ": no such file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    throw_input_error(where, ": invalid JSON (", e.what(), ")");
  }
  return corpus_provenance_from_json(j, where);
}

void corpus_provenance_to_json(const CorpusProvenance& p, nlohmann::ordered_json& meta) {
  if (!p.packages.empty()) {
    nlohmann::ordered_json packages = nlohmann::ordered_json::array();
    for (const CorpusPackage& pkg : p.packages)
      packages.push_back(
          {{"registry", pkg.registry}, {"name", pkg.name}, {"version", pkg.version}, {"bytes", pkg.bytes}});
    meta["packages"] = packages;
  }
  if (!p.source_bytes.empty()) meta["source_bytes"] = p.source_bytes;
  if (!p.left_out.empty()) meta["left_out"] = p.left_out;
}

}  // namespace hlm
