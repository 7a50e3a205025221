// The study report (study_report.h): HTML with inline SVG built from analysis/svg_chart.h, plus CSV/JSON.
#include "study/study_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "analysis/svg_chart.h"
#include "core/error.h"
#include "models/json_file.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string full_precision(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string join_ints(const std::vector<int>& v, const char* sep = ",") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Rows of a small CSV written by the analysis code (no quoting there: fields are codes and numbers).
std::vector<std::vector<std::string>> read_csv(const fs::path& path) {
  std::ifstream in(path);
  HLM_CHECK_INPUT(in.good(), path.string(), ": cannot read");
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ',');) fields.push_back(f);
    rows.push_back(std::move(fields));
  }
  return rows;
}

// Charts carry a clipPath id ("plot"); ids must be unique in one HTML document, so each inlined chart gets its own.
std::string inline_svg(const std::string& svg) {
  static int counter = 0;
  const std::string id = "plot" + std::to_string(++counter);
  std::string out = svg;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"id=\"plot\"", "id=\"" + id + "\""},
                                 std::pair<std::string, std::string>{"url(#plot)", "url(#" + id + ")"}})
    for (size_t pos = out.find(from); pos != std::string::npos; pos = out.find(from, pos + to.size()))
      out.replace(pos, from.size(), to);
  return out;
}

std::string share_text(std::optional<double> tokens, int64_t total) {
  if (!tokens) return "not reached";
  return fixed(100.0 * *tokens / static_cast<double>(total), 1) + " %";
}

// What each per-layer capture point holds (layers/capture.h), for the SoftCKA labels.
std::string point_description(const std::string& point) {
  if (point == "attn_in") return "residual stream entering layer i";
  if (point == "attn_out") return "residual stream after layer i's token mixer and its residual add, before the MLP";
  if (point == "attn_delta") return "token-mixer output of layer i before its residual add";
  if (point == "mlp_delta") return "MLP output of layer i before its residual add";
  return point;
}

std::string plain(const std::string& label, const std::string& same_as) {
  return same_as.empty() ? label : label + " (= " + same_as + ")";
}

// Table 3: one row per placement.
std::string table3_html(const StudyReport& rep) {
  std::ostringstream h;
  h << "<table><tr><th>placement</th><th>full-attention layers</th><th>layout</th><th>R: geometric mean of "
       "per-language D<sub>KL</sub> ratios to the baseline ↓</th><th>L<sub>LM</sub> gap δ̄ ↓</th><th>test mean "
       "D<sub>KL</sub></th><th>tokens to reach the baseline's final gap (stays at or below)</th><th>first crossing"
       "</th></tr>\n";
  for (size_t i = 0; i < rep.runs.size(); ++i) {
    const StudyReportRun& r = rep.runs[i];
    double kl = 0.0;
    int n = 0;
    for (size_t l = 0; l < rep.table.languages.size(); ++l)
      if (!rep.table.excluded[l]) kl += rep.table.kl[l][i], ++n;
    h << "<tr><td>" << xml_escape(r.label) << "</td><td>" << join_ints(r.full_layers, ", ") << "</td><td><code>"
      << r.layout << "</code>" << (r.same_as.empty() ? "" : " (= " + xml_escape(r.same_as) + ")") << "</td><td>"
      << fixed(rep.table.relative_kl[i], 3) << "</td><td>"
      << fixed(rep.table.delta_bar[i], 3) << "</td><td>" << fixed(n ? kl / n : NAN, 4) << "</td><td>"
      << share_text(r.reach_tokens, r.total_tokens) << "</td><td>" << share_text(r.crossing_tokens, r.total_tokens)
      << "</td></tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

// Table C.4: per language a D_KL row and an L_LM-gap row, then R and δ̄.
std::string table_c4_html(const CompareTable& t) {
  std::ostringstream h;
  h << "<table><tr><th>language</th><th>tier</th><th>metric</th>";
  for (const std::string& label : t.labels) h << "<th>" << xml_escape(label) << "</th>";
  h << "</tr>\n";
  for (size_t l = 0; l < t.languages.size(); ++l) {
    const std::string name = xml_escape(t.languages[l]) + (t.excluded[l] ? "<sup>†</sup>" : "");
    for (int row = 0; row < 2; ++row) {
      const auto& values = row == 0 ? t.kl[l] : t.ce_gap[l];
      // The best (lowest) value of the row in bold, as the seed's tables do.
      size_t best = 0;
      for (size_t r = 1; r < values.size(); ++r)
        if (values[r] < values[best]) best = r;
      h << "<tr>";
      if (row == 0) h << "<td rowspan=2>" << name << "</td><td rowspan=2>" << t.tiers[l] << "</td>";
      h << "<td>" << (row == 0 ? "D<sub>KL</sub>" : "L<sub>LM</sub> gap") << "</td>";
      for (size_t r = 0; r < values.size(); ++r)
        h << "<td>" << (r == best ? "<b>" : "") << fixed(values[r], 3) << (r == best ? "</b>" : "") << "</td>";
      h << "</tr>\n";
    }
  }
  h << "<tr class=sum><td colspan=3>R (geometric mean of per-language D<sub>KL</sub> ratios)</td>";
  for (double v : t.relative_kl) h << "<td>" << fixed(v, 3) << "</td>";
  h << "</tr>\n<tr class=sum><td colspan=3>δ̄</td>";
  for (double v : t.delta_bar) h << "<td>" << fixed(v, 3) << "</td>";
  h << "</tr>\n</table>\n";
  return h.str();
}

std::string curves_svg(const StudyReport& rep, bool gap) {
  LineChart c;
  c.title = gap ? "Validation L_LM gap to the teacher (mean over languages)" : "Validation D_KL(teacher || student)";
  c.x_label = "training tokens";
  c.y_label = gap ? "L_LM gap (nats/token)" : "D_KL (nats/token)";
  for (const StudyReportRun& r : rep.runs) {
    ChartSeries s;
    // A placement sharing another's run has the same curve: drawn dashed over it, so both stay visible.
    s.label = plain(r.label, r.same_as);
    if (!r.same_as.empty()) s.dash = "6,4";
    for (const ValidationPoint& p : r.curve) {
      s.x.push_back(static_cast<double>(p.tokens));
      s.y.push_back(gap ? p.mean_ce_gap : p.mean_kl);
    }
    c.series.push_back(std::move(s));
  }
  if (gap && !rep.runs.empty()) {
    const double end = static_cast<double>(rep.runs.front().total_tokens);
    ChartSeries target;
    target.label = "target: " + rep.runs.front().label + " final gap";
    target.dash = "2,3";
    target.x = {0.0, end};
    target.y = {rep.target_gap, rep.target_gap};
    c.series.push_back(std::move(target));
    // Step 0 is the converted, untrained student: its gap dwarfs the rest, so the axis starts at the first
    // validation after it when there is one.
    double top = rep.target_gap;
    for (const StudyReportRun& r : rep.runs)
      for (size_t i = r.curve.size() > 1 ? 1 : 0; i < r.curve.size(); ++i) top = std::max(top, r.curve[i].mean_ce_gap);
    c.y_max = top * 1.1;
  }
  return inline_svg(svg_line_chart(c));
}

struct AnalysisTables {
  // softcka[model][point][layer] = mean over languages; locality[model][k][layer] = mean share over languages.
  std::map<std::string, std::map<std::string, std::map<int, double>>> softcka;
  std::map<std::string, std::map<int64_t, std::map<int, std::pair<double, int>>>> locality;
  std::string softcka_csv = "model,layer,point,lang,softcka\n", locality_csv = "model,layer,lang,k,share\n";
};

AnalysisTables read_analysis(const StudyReport& rep) {
  AnalysisTables a;
  for (const StudyReportModel& m : rep.models) {
    for (const auto& row : read_csv(m.align_dir / "softcka.csv")) {
      if (row.size() != 4) continue;
      a.softcka_csv += m.label + "," + row[0] + "," + row[1] + "," + row[2] + "," + row[3] + "\n";
      if (row[2] == "mean") a.softcka[m.label][row[1]][std::stoi(row[0])] = std::strtod(row[3].c_str(), nullptr);
    }
    for (const auto& row : read_csv(m.locality_dir / "locality.csv")) {
      if (row.size() != 5) continue;
      a.locality_csv += m.label + "," + row[1] + "," + row[2] + "," + row[3] + "," + row[4] + "\n";
      auto& cell = a.locality[m.label][std::stoll(row[3])][std::stoi(row[1])];
      cell.first += std::strtod(row[4].c_str(), nullptr);
      cell.second += 1;
    }
  }
  return a;
}

std::string softcka_overview_svg(const StudyReport& rep, const AnalysisTables& a, const std::string& point) {
  LineChart c;
  c.title = "SoftCKA vs English at " + point + " (" + point_description(point) + "), mean over languages";
  c.x_label = "layer";
  c.y_label = "SoftCKA";
  for (const StudyReportModel& m : rep.models) {
    ChartSeries s;
    s.label = m.label;
    const auto it = a.softcka.find(m.label);
    if (it == a.softcka.end() || !it->second.count(point)) continue;
    for (const auto& [layer, v] : it->second.at(point)) s.x.push_back(layer), s.y.push_back(v);
    c.series.push_back(std::move(s));
  }
  return inline_svg(svg_line_chart(c));
}

// SoftCKA at one capture point: one row per model, one column per layer (mean over languages).
std::string softcka_table_html(const StudyReport& rep, const AnalysisTables& a, const std::string& point) {
  int layers = 0;
  for (const StudyReportModel& m : rep.models) layers = std::max(layers, m.layers);
  std::ostringstream h;
  h << "<table><caption>SoftCKA vs " << xml_escape(rep.config["analysis"].value("anchor", std::string("eng_Latn")))
    << " at <b>" << xml_escape(point) << "</b> (" << xml_escape(point_description(point))
    << "), mean over languages</caption>\n<tr><th>model</th>";
  for (int l = 0; l < layers; ++l) h << "<th>" << l << "</th>";
  h << "</tr>\n";
  for (const StudyReportModel& m : rep.models) {
    const auto it = a.softcka.find(m.label);
    if (it == a.softcka.end() || !it->second.count(point)) continue;
    const std::map<int, double>& row = it->second.at(point);
    h << "<tr><td>" << xml_escape(m.label) << "</td>";
    for (int l = 0; l < layers; ++l) {
      const bool full = m.label != "teacher" &&
                        std::find(m.full_layers.begin(), m.full_layers.end(), l) != m.full_layers.end();
      const auto v = row.find(l);
      h << "<td>" << (full ? "<u>" : "") << (v == row.end() ? "–" : fixed(v->second, 3)) << (full ? "</u>" : "")
        << "</td>";
    }
    h << "</tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

std::string spread_cell(const SeedSpread& s, int decimals) {
  if (s.n == 0) return "–";
  return fixed(s.mean, decimals) + " [" + fixed(s.min, decimals) + ", " + fixed(s.max, decimals) + "]";
}

// Replicates over data seeds: per aggregate metric one table (a column per seed, then mean and range), the findings,
// then per language the D_KL and L_LM gap as mean [min, max] per replicated placement.
std::string replicates_html(const StudyReport& rep) {
  const StudyReplicates& r = rep.replicates;
  std::ostringstream h;
  h << "<h2>Replicates over data seeds</h2>\n<p>Data seeds ";
  for (size_t i = 0; i < r.data_seeds.size(); ++i) h << (i ? ", " : "") << r.data_seeds[i];
  h << " (training documents reshuffled and languages interleaved anew; the same teacher, students and held-out "
       "sets). Seed "
    << r.data_seeds.front() << " is the run of the tables above. Replicated: ";
  for (size_t i = 0; i < r.placements.size(); ++i)
    h << (i ? ", " : "") << xml_escape(plain(r.placements[i].label, r.placements[i].same_as));
  h << ". R and the Figure 6 target of each seed are against the baseline's run with the same seed.</p>\n";
  for (ReplicateMetric m : kReplicateMetrics) {
    const int decimals = m == ReplicateMetric::MeanKl ? 4 : 3;
    const bool share = m == ReplicateMetric::ReachShare;
    h << "<table><caption>" << xml_escape(replicate_metric_title(m)) << "</caption>\n<tr><th>placement</th>";
    for (uint64_t seed : r.data_seeds) h << "<th>seed " << seed << "</th>";
    h << "<th>mean</th><th>range [min, max]</th><th>seeds</th></tr>\n";
    for (const StudyReplicated& p : r.placements) {
      const std::vector<double> v = replicate_values(p, m);
      const SeedSpread sp = seed_spread(v);
      h << "<tr><td>" << xml_escape(plain(p.label, p.same_as)) << "</td>";
      for (double x : v)
        h << "<td>" << (std::isfinite(x) ? (share ? fixed(100.0 * x, 1) + " %" : fixed(x, decimals)) : "not reached")
          << "</td>";
      const auto f = [&](double x) { return share ? fixed(100.0 * x, 1) + " %" : fixed(x, decimals); };
      h << "<td>" << (sp.n ? f(sp.mean) : "–") << "</td><td>"
        << (sp.n ? "[" + f(sp.min) + ", " + f(sp.max) + "]" : "–") << "</td><td>" << sp.n << " of " << v.size()
        << "</td></tr>\n";
    }
    h << "</table>\n";
  }
  h << "<h3>Differences against the seed-to-seed spread</h3>\n<p class=note>A difference exceeds the spread when "
       "the placement's range over the seeds and the baseline's do not overlap (for R, a ratio to the same seed's "
       "baseline: when its range excludes 1). With few seeds this is a rough screen, not a significance "
       "test.</p>\n<ul>\n";
  int per_language = 0;
  for (const ReplicateFinding& f : replicate_findings(r)) {
    if (f.metric.rfind("kl:", 0) == 0) {
      ++per_language;
      continue;
    }
    h << "<li>" << (f.exceeds ? "<b>" : "") << xml_escape(f.text) << (f.exceeds ? "</b>" : "") << "</li>\n";
  }
  h << "</ul>\n";
  if (per_language > 0) {
    h << "<p>Languages whose test D<sub>KL</sub> differs from the baseline's beyond the spread:</p>\n<ul>\n";
    for (const ReplicateFinding& f : replicate_findings(r))
      if (f.metric.rfind("kl:", 0) == 0) h << "<li>" << xml_escape(f.text) << "</li>\n";
    h << "</ul>\n";
  } else {
    h << "<p>No language's test D<sub>KL</sub> differs from the baseline's beyond the spread.</p>\n";
  }
  h << "<table><caption>Per language over the seeds: mean [min, max]</caption>\n<tr><th>language</th><th>metric"
       "</th>";
  for (const StudyReplicated& p : r.placements) h << "<th>" << xml_escape(plain(p.label, p.same_as)) << "</th>";
  h << "</tr>\n";
  for (size_t l = 0; l < r.languages.size(); ++l)
    for (int row = 0; row < 2; ++row) {
      h << "<tr>";
      if (row == 0)
        h << "<td rowspan=2>" << xml_escape(r.languages[l]) << (r.excluded[l] ? "<sup>†</sup>" : "") << "</td>";
      h << "<td>" << (row == 0 ? "D<sub>KL</sub>" : "L<sub>LM</sub> gap") << "</td>";
      for (const StudyReplicated& p : r.placements) {
        std::vector<double> v;
        for (const StudySeedResult& sr : p.seeds) v.push_back(row == 0 ? sr.kl.at(l) : sr.ce_gap.at(l));
        h << "<td>" << spread_cell(seed_spread(v), 3) << "</td>";
      }
      h << "</tr>\n";
    }
  h << "</table>\n";
  // Validation curves of every seed: one colour per (placement, seed), later seeds dashed.
  LineChart c;
  c.title = "Validation L_LM gap per data seed (mean over languages)";
  c.x_label = "training tokens";
  c.y_label = "L_LM gap (nats/token)";
  double top = 0.0;
  for (const StudyReplicated& p : r.placements)
    for (size_t k = 0; k < p.seeds.size(); ++k) {
      ChartSeries sr;
      sr.label = plain(p.label, p.same_as) + " seed " + std::to_string(p.seeds[k].seed);
      if (k > 0) sr.dash = k == 1 ? "6,4" : "2,3";
      const std::vector<ValidationPoint>& curve = p.seeds[k].curve;
      for (size_t i = 0; i < curve.size(); ++i) {
        sr.x.push_back(static_cast<double>(curve[i].tokens));
        sr.y.push_back(curve[i].mean_ce_gap);
        if (i > 0 || curve.size() == 1) top = std::max(top, curve[i].mean_ce_gap);
      }
      c.series.push_back(std::move(sr));
    }
  if (top > 0.0) c.y_max = top * 1.1;
  h << "<div class=charts>\n" << inline_svg(svg_line_chart(c)) << "</div>\n";
  return h.str();
}

std::string locality_svg(const StudyReport& rep, const AnalysisTables& a, int64_t k) {
  LineChart c;
  c.title = "Attention share on the last " + std::to_string(k) + " tokens (full-attention layers, mean over languages)";
  c.x_label = "layer";
  c.y_label = "share";
  c.y_min = 0.0;
  c.y_max = 1.0;
  for (const StudyReportModel& m : rep.models) {
    const auto it = a.locality.find(m.label);
    if (it == a.locality.end() || !it->second.count(k)) continue;
    ChartSeries s;
    s.label = m.label;
    for (const auto& [layer, sum] : it->second.at(k)) s.x.push_back(layer), s.y.push_back(sum.first / sum.second);
    c.series.push_back(std::move(s));
  }
  return inline_svg(svg_line_chart(c));
}

const char* kStyle = R"(<style>
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
caption { text-align: left; font-weight: bold; padding: 4px 0; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
tr.sum td { background: #f7f7f7; font-weight: bold; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.8em; }
.charts svg { margin: 0.5em 0; display: block; } .note { color: #555; font-size: 0.9em; }
</style>
)";

std::string data_budget_html(const StudyReport& rep) {
  std::ostringstream h;
  h << "<h2>Data budget</h2>\n<table><tr><th>stage</th><th>tokens planned</th><th>tokens trained</th><th>passes "
       "begun / allowed</th><th>tokens per language</th></tr>\n";
  for (const StudyDataBudget& b : rep.data_budget) {
    std::string per_language;
    for (const auto& [code, n] : b.tokens_by_language)
      per_language += (per_language.empty() ? "" : ", ") + code + " " + std::to_string(n);
    h << "<tr><td>" << xml_escape(b.stage) << "</td><td>" << b.tokens_planned << "</td><td>" << b.tokens_trained
      << (b.data_exhausted ? " (data ran out)" : "") << "</td><td>" << b.passes_used << " / " << b.passes
      << "</td><td>" << (per_language.empty() ? std::string("not recorded") : xml_escape(per_language))
      << "</td></tr>\n";
  }
  h << "</table>\n<p class=note>A pass reads every training document of a language once (held-out documents never); "
       "each later pass reshuffles them by the data seed and the pass, and languages at their token quota stay out "
       "(docs/training.md). Tokens per language count every token of the trained rows.</p>\n";
  return h.str();
}

std::string report_html(const StudyReport& rep, const AnalysisTables& a) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>hybridlm placement study</title>\n" << kStyle
    << "</head><body>\n<h1>Full-attention placement study</h1>\n";
  const StudyReportRun& base = rep.runs.front();
  h << "<p>Teacher <code>" << xml_escape(rep.teacher) << "</code> (architecture <b>"
    << xml_escape(rep.teacher_architecture) << "</b>";
  for (size_t i = 0; i < rep.teacher_scalars.size(); ++i)
    h << (i == 0 ? ": " : ", ") << xml_escape(rep.teacher_scalars[i].first) << " " << rep.teacher_scalars[i].second;
  h << "; students <b>" << xml_escape(rep.student_architecture) << "</b>"
    << (rep.teacher_scalars.empty() ? "" : " with the same multipliers") << "), " << rep.runs.size()
    << " students with the same full-attention budget (" << base.full_layers.size() << " of " << base.layout.size()
    << " layers), distilled with identical data, seeds and settings (forward KL, τ = "
    << rep.config["distill"].value("tau", 1.0) << ", " << base.total_tokens << " tokens each). Baseline: "
    << xml_escape(base.label) << ". Layout: A = full attention, R = Gated DeltaNet, layer 0 first.</p>\n";

  if (!rep.data_budget.empty()) h << data_budget_html(rep);
  h << "<h2>Test results (as seed Table 3)</h2>\n" << table3_html(rep);
  h << "<p class=note>R is a geometric mean of per-language ratios: exp(mean over languages of log(D<sub>KL</sub> / "
       "D<sub>KL</sub> of "
    << xml_escape(base.label)
    << ")) (seed Eq. 5); δ̄ = mean over languages of L<sub>LM</sub>(student) − L<sub>LM</sub>(teacher) in nats (Eq. 4); "
       "both on the test split. Tokens to reach (seed Figure 6), as a share of the training tokens: the first "
       "validation point from which the mean validation L<sub>LM</sub> gap stays at or below "
    << xml_escape(base.label) << "'s final validation gap (" << fixed(rep.target_gap, 4)
    << " nats) to the end of the run; first crossing: where the gap first gets there, linearly interpolated between "
       "validation points (earlier when the curve crosses back above the target later).";
  {
    std::string left_out;
    for (size_t l = 0; l < rep.table.languages.size(); ++l)
      if (rep.table.excluded[l]) left_out += (left_out.empty() ? "" : ", ") + rep.table.languages[l];
    h << " Languages left out of every average: " << (left_out.empty() ? "none" : xml_escape(left_out));
    if (rep.config["compare"].value("exclude_mnw_Mymr", true))
      h << " (mnw_Mymr is left out whenever the corpus has it, as in the seed; compare.exclude_mnw_Mymr false keeps "
           "it)";
    h << ".";
  }
  h << "</p>\n";

  if (!rep.replicates.placements.empty()) h << replicates_html(rep);

  h << "<h2>Validation curves</h2>\n<div class=charts>\n" << curves_svg(rep, true) << curves_svg(rep, false)
    << "</div>\n<p class=note>A placement with the same full-attention layers as another shares its run: its line "
       "is drawn dashed over the other's.</p>\n";

  h << "<h2>Per-language test results (as seed Table C.4)</h2>\n" << table_c4_html(rep.table)
    << "<p class=note>Tier: E/H/M/L = English/high/mid/low sampling tier; † = left out of R and δ̄; bold = lowest in "
       "the row.</p>\n";

  if (!rep.models.empty()) {
    h << "<h2>Cross-lingual alignment (SoftCKA)</h2>\n<p class=note>Capture points: ";
    for (size_t i = 0; i < rep.align_points.size(); ++i)
      h << (i ? "; " : "") << "<b>" << xml_escape(rep.align_points[i]) << "</b> = "
        << xml_escape(point_description(rep.align_points[i]));
    h << ". Underlined: full-attention layers of a hybrid student.</p>\n";
    for (const std::string& p : rep.align_points) h << softcka_table_html(rep, a, p);
    h << "<div class=charts>\n";
    for (const std::string& p : rep.align_points) h << softcka_overview_svg(rep, a, p);
    h << "</div>\n<p class=note>Per model, one line per language; dotted vertical lines mark the full-attention "
         "layers of hybrid students.</p>\n<div class=charts>\n";
    for (const StudyReportModel& m : rep.models)
      for (const std::string& p : rep.align_points) {
        const fs::path svg = m.align_dir / ("softcka_" + p + ".svg");
        h << "<h3>" << xml_escape(m.label) << " · SoftCKA at " << xml_escape(p) << " · full attention: "
          << (m.label == "teacher" ? std::string("every layer") : join_ints(m.full_layers, ", ")) << "</h3>\n";
        if (fs::exists(svg)) h << inline_svg(read_text(svg)) << "\n";
      }
    h << "</div>\n<h2>Attention locality</h2>\n<div class=charts>\n";
    for (int64_t k : rep.locality_k) h << locality_svg(rep, a, k);
    h << "</div>\n";
  }

  h << "<h2>Versions</h2>\n<table>";
  for (const auto& [what, value] : rep.versions)
    h << "<tr><td>" << xml_escape(what) << "</td><td>" << xml_escape(value) << "</td></tr>";
  h << "</table>\n<h2>Resolved config</h2>\n<pre>" << xml_escape(rep.config.dump(2)) << "</pre>\n";
  h << "<p class=note>Files beside this report: summary.csv, summary.json, compare.csv (Table C.4 at full precision), "
       "curves.csv, "
    << (rep.replicates.placements.empty() ? "" : "replicates.csv, ") << "softcka.csv, locality.csv.</p>\n</body></html>\n";
  return h.str();
}

}  // namespace

StudyDataBudget study_data_budget_read(const fs::path& run_dir, const std::string& stage) {
  const json config = json_file_read(run_dir / "config.json");
  const json meta = json_file_read(run_dir / "test.json").value("meta", json::object());
  StudyDataBudget b;
  b.stage = stage;
  try {
    b.tokens_planned = config.at("tokens").get<int64_t>();
    b.tokens_trained = meta.at("tokens_trained").get<int64_t>();
    b.passes = meta.value("passes", int64_t{1});
    b.passes_used = meta.value("passes_used", int64_t{1});
    b.data_exhausted = meta.value("data_exhausted", false);
    if (meta.contains("tokens_by_language"))
      b.tokens_by_language = meta.at("tokens_by_language").get<std::map<std::string, int64_t>>();
  } catch (const json::exception& e) {
    throw_input_error(run_dir.string(), ": config.json or test.json: ", e.what());
  }
  return b;
}

void study_write_report(const fs::path& dir, const StudyReport& rep) {
  HLM_CHECK(!rep.runs.empty() && rep.runs.size() == rep.table.labels.size(), "study report: runs and table disagree");
  const AnalysisTables analysis = read_analysis(rep);

  std::ostringstream summary_csv, curves_csv;
  summary_csv << "placement,full_layers,layout,R_geomean_kl_ratio,delta_bar,reach_tokens,reach_share,crossing_tokens,"
                 "total_tokens\n";
  json summary = {{"format", "hybridlm-study-summary"},
                  {"version", 1},
                  {"baseline", rep.runs.front().label},
                  {"teacher",
                   {{"dir", rep.teacher},
                    {"architecture", rep.teacher_architecture},
                    {"scalars", json(std::map<std::string, double>(rep.teacher_scalars.begin(), rep.teacher_scalars.end()))},
                    {"student_architecture", rep.student_architecture}}},
                  {"target_gap", rep.target_gap},
                  {"definitions",
                   {{"R", "geometric mean over languages of D_KL(teacher||student) / D_KL(teacher||baseline), test"},
                    {"reach_tokens", "first validation point from which the mean L_LM gap stays <= target_gap"},
                    {"crossing_tokens", "first crossing of target_gap, interpolated between validation points"}}},
                  {"placements", json::array()}};
  curves_csv << "placement,seed,tokens,mean_kl,mean_ce_gap\n";
  const uint64_t main_seed = rep.replicates.data_seeds.empty() ? 0 : rep.replicates.data_seeds.front();
  for (size_t i = 0; i < rep.runs.size(); ++i) {
    const StudyReportRun& r = rep.runs[i];
    // NaN when not reached (a plain double: GCC's -Wmaybe-uninitialized misreads an optional here).
    const double share = r.reach_tokens ? *r.reach_tokens / static_cast<double>(r.total_tokens) : NAN;
    summary_csv << r.label << ",\"" << join_ints(r.full_layers) << "\"," << r.layout << ','
                << full_precision(rep.table.relative_kl[i]) << ',' << full_precision(rep.table.delta_bar[i]) << ','
                << (r.reach_tokens ? full_precision(*r.reach_tokens) : "") << ','
                << (std::isfinite(share) ? full_precision(share) : "") << ','
                << (r.crossing_tokens ? full_precision(*r.crossing_tokens) : "") << ',' << r.total_tokens << '\n';
    summary["placements"].push_back({{"label", r.label},
                                     {"full_layers", r.full_layers},
                                     {"layout", r.layout},
                                     {"R", rep.table.relative_kl[i]},
                                     {"delta_bar", rep.table.delta_bar[i]},
                                     {"reach_tokens", r.reach_tokens ? json(*r.reach_tokens) : json(nullptr)},
                                     {"reach_share", std::isfinite(share) ? json(share) : json(nullptr)},
                                     {"crossing_tokens", r.crossing_tokens ? json(*r.crossing_tokens) : json(nullptr)},
                                     {"total_tokens", r.total_tokens}});
    for (const ValidationPoint& p : r.curve)
      curves_csv << r.label << ',' << main_seed << ',' << p.tokens << ',' << full_precision(p.mean_kl) << ','
                 << full_precision(p.mean_ce_gap) << '\n';
  }
  for (const StudyReplicated& p : rep.replicates.placements)
    for (size_t k = 1; k < p.seeds.size(); ++k)  // seed 0's curves are above
      for (const ValidationPoint& v : p.seeds[k].curve)
        curves_csv << p.label << ',' << p.seeds[k].seed << ',' << v.tokens << ',' << full_precision(v.mean_kl) << ','
                   << full_precision(v.mean_ce_gap) << '\n';
  summary["data_budget"] = json::array();
  for (const StudyDataBudget& b : rep.data_budget)
    summary["data_budget"].push_back({{"stage", b.stage},
                                      {"tokens_planned", b.tokens_planned},
                                      {"tokens_trained", b.tokens_trained},
                                      {"passes", b.passes},
                                      {"passes_used", b.passes_used},
                                      {"data_exhausted", b.data_exhausted},
                                      {"tokens_by_language", b.tokens_by_language}});
  if (!rep.replicates.placements.empty()) {
    summary["replicates"] = replicates_to_json(rep.replicates);
    file_write_atomic(dir / "replicates.csv", replicates_csv(rep.replicates));
  }
  file_write_atomic(dir / "summary.csv", summary_csv.str());
  file_write_atomic(dir / "summary.json", summary.dump(2) + "\n");
  file_write_atomic(dir / "compare.csv", compare_table_csv(rep.table));
  file_write_atomic(dir / "curves.csv", curves_csv.str());
  if (!rep.models.empty()) {
    file_write_atomic(dir / "softcka.csv", analysis.softcka_csv);
    file_write_atomic(dir / "locality.csv", analysis.locality_csv);
  }
  file_write_atomic(dir / "report.html", report_html(rep, analysis));
}

}  // namespace hlm
