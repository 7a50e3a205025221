// Reads a parallel set (format in parallel_set.h) with the corpus' line readers (plain or zstd).
#include "data/parallel_set.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "data/text_io.h"

namespace hlm {
namespace fs = std::filesystem;

std::vector<const ParallelUnit*> ParallelSet::pairs(const std::string& lang_a, const std::string& lang_b) const {
  std::vector<const ParallelUnit*> out;
  for (const ParallelUnit& u : units)
    if (u.text.count(lang_a) && u.text.count(lang_b)) out.push_back(&u);
  return out;
}

namespace {

// One JSONL line -> unit; key_order receives the language codes in the line's order. Errors carry the line number
// (the caller adds the file).
ParallelUnit parse_unit(std::string_view line, int64_t line_number, std::vector<std::string>& key_order) {
  nlohmann::ordered_json j;  // keeps the file's key order, so `langs` is truly first-seen order
  try {
    j = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number overflow
    throw_input_error("line ", line_number, ": bad JSON (", e.what(), ")");
  }
  HLM_CHECK_INPUT(j.is_object(), "line ", line_number, ": expected a JSON object");
  auto id = j.find("id");
  HLM_CHECK_INPUT(id != j.end(), "line ", line_number, ": missing \"id\"");
  HLM_CHECK_INPUT(id->is_string(), "line ", line_number, ": \"id\" must be a string");
  ParallelUnit unit;
  unit.id = id->get<std::string>();
  HLM_CHECK_INPUT(!unit.id.empty(), "line ", line_number, ": empty \"id\"");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "id") continue;
    HLM_CHECK_INPUT(it->is_string(), "line ", line_number, ": text of \"", it.key(), "\" must be a string");
    std::string text = it->get<std::string>();
    // nlohmann validates UTF-8 on parse; checked again so the contract holds whatever the parser's settings.
    const size_t bad = utf8_first_invalid(text);
    HLM_CHECK_INPUT(bad == std::string_view::npos, "line ", line_number, ": text of \"", it.key(),
                    "\" has invalid UTF-8 at byte ", bad);
    key_order.push_back(it.key());
    unit.text.emplace(it.key(), std::move(text));
  }
  return unit;
}

bool has_zst_suffix(const fs::path& path) { return path.extension() == ".zst"; }

}  // namespace

ParallelSet parallel_set_load(const fs::path& path) {
  HLM_CHECK_INPUT(fs::exists(path), path.string(), ": no such parallel set file");
  ParallelSet set;
  set.path = path.string();
  std::unordered_set<std::string> ids, langs_seen;
  auto on_line = [&](std::string_view line, int64_t line_number) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;  // blank line
    std::vector<std::string> key_order;
    ParallelUnit unit = parse_unit(line, line_number, key_order);
    HLM_CHECK_INPUT(ids.insert(unit.id).second, "line ", line_number, ": duplicate id \"", unit.id, "\"");
    for (const std::string& lang : key_order)
      if (langs_seen.insert(lang).second) set.langs.push_back(lang);
    set.units.push_back(std::move(unit));
  };
  try {
    if (has_zst_suffix(path))
      zstd_for_each_line(path, on_line);
    else
      text_for_each_line(path, on_line);
  } catch (Error& e) {
    if (e.kind() == ErrorKind::Input && e.message().rfind(path.string(), 0) != 0) e.add_context(path.string());
    throw;
  }
  return set;
}

}  // namespace hlm
