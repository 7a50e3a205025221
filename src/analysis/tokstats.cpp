// Tokenization inflation tables (tokstats.h). English tokens are counted once per unit and tokenizer, then summed
// per language over the units that language shares with English.
#include "analysis/tokstats.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "core/error.h"
#include "data/text_normalizer.h"

namespace hlm {
namespace {

constexpr const char* kEnglish = "eng_Latn";

int64_t count_tokens(const Tokenizer& tok, const std::string& text) {
  return static_cast<int64_t>(tok.encode(unicode_nfc(text)).size());
}

// Distinct values in first-seen order.
std::vector<std::string> ordered(const std::vector<TokStatsRow>& rows, std::string TokStatsRow::*field) {
  std::vector<std::string> out;
  for (const TokStatsRow& r : rows)
    if (std::find(out.begin(), out.end(), r.*field) == out.end()) out.push_back(r.*field);
  return out;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::vector<TokStatsRow> tokstats_compute(const ParallelSet& set, const std::vector<TokStatsTokenizer>& tokenizers,
                                          std::vector<std::string> langs,
                                          const std::function<void(const std::string&)>& on_progress) {
  HLM_CHECK_INPUT(std::find(set.langs.begin(), set.langs.end(), kEnglish) != set.langs.end(), set.path,
                  ": has no ", kEnglish, " text; tokstats measures every language against English");
  if (langs.empty()) {
    for (const std::string& l : set.langs)
      if (l != kEnglish) langs.push_back(l);
  }
  for (const std::string& l : langs) {
    HLM_CHECK_INPUT(std::find(set.langs.begin(), set.langs.end(), l) != set.langs.end(), set.path,
                    ": no language '", l, "' in this set");
    HLM_CHECK_INPUT(!set.pairs(l, kEnglish).empty(), set.path, ": no unit holds both ", l, " and ", kEnglish);
  }
  std::vector<TokStatsRow> rows;
  for (const TokStatsTokenizer& t : tokenizers) {
    std::map<const ParallelUnit*, int64_t> eng;  // English tokens per unit, counted once
    for (const std::string& l : langs) {
      TokStatsRow row{t.label, l, 0, 0, 0, 0.0};
      for (const ParallelUnit* u : set.pairs(l, kEnglish)) {
        auto it = eng.find(u);
        if (it == eng.end()) it = eng.emplace(u, count_tokens(*t.tokenizer, u->text.at(kEnglish))).first;
        row.eng_tokens += it->second;
        row.tokens += count_tokens(*t.tokenizer, u->text.at(l));
        ++row.units;
      }
      HLM_CHECK_INPUT(row.eng_tokens > 0, set.path, ": the English side of the ", l, " units encodes to no tokens");
      row.ratio = static_cast<double>(row.tokens) / static_cast<double>(row.eng_tokens);
      rows.push_back(row);
    }
    if (on_progress) on_progress(t.label);
  }
  return rows;
}

std::string tokstats_label(const std::string& spec) {
  if (spec == "bytes") return spec;
  const std::filesystem::path p(spec);
  if (p.filename() == "tokenizer.json" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return p.stem().string();
}

std::string tokstats_csv(const std::vector<TokStatsRow>& rows) {
  std::string out = "tokenizer,lang,units,tokens,eng_tokens,ratio\n";
  for (const TokStatsRow& r : rows)
    out += r.tokenizer + "," + r.lang + "," + std::to_string(r.units) + "," + std::to_string(r.tokens) + "," +
           std::to_string(r.eng_tokens) + "," + fixed(r.ratio, 4) + "\n";
  return out;
}

std::string tokstats_markdown(const std::vector<TokStatsRow>& rows) {
  const std::vector<std::string> toks = ordered(rows, &TokStatsRow::tokenizer);
  const std::vector<std::string> langs = ordered(rows, &TokStatsRow::lang);
  std::map<std::pair<std::string, std::string>, const TokStatsRow*> cell;
  for (const TokStatsRow& r : rows) cell[{r.lang, r.tokenizer}] = &r;
  std::string out = "| lang | units |";
  std::string rule = "|---|---:|";
  for (const std::string& t : toks) {
    out += " " + t + " |";
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (const std::string& l : langs) {
    const TokStatsRow* first = cell.at({l, toks.front()});
    out += "| " + l + " | " + std::to_string(first->units) + " |";
    for (const std::string& t : toks) out += " " + fixed(cell.at({l, t})->ratio, 2) + " |";
    out += "\n";
  }
  return out;
}

BarChart tokstats_chart(const std::vector<TokStatsRow>& rows, const std::string& set_name) {
  BarChart chart;
  chart.title = "Tokens relative to English on " + set_name;
  chart.y_label = "tokens(X) / tokens(eng_Latn)";
  chart.categories = ordered(rows, &TokStatsRow::lang);
  chart.reference_y = 1.0;
  for (const std::string& t : ordered(rows, &TokStatsRow::tokenizer)) {
    ChartSeries s;
    s.label = t;
    for (const std::string& l : chart.categories)
      for (const TokStatsRow& r : rows)
        if (r.tokenizer == t && r.lang == l) s.y.push_back(r.ratio);
    chart.series.push_back(std::move(s));
  }
  return chart;
}

}  // namespace hlm
