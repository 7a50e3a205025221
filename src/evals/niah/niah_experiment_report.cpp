// Reports of the trained retrieval experiment (see niah_experiment_report.h).
#include "evals/niah/niah_experiment_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "analysis/svg_chart.h"
#include "evals/niah/niah_language.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kEnglish = "eng_Latn";

std::vector<int64_t> sorted_lengths(const NiahExperimentConfig& c) {
  std::vector<int64_t> l = c.eval_lengths;
  std::sort(l.begin(), l.end());
  return l;
}

std::string num(double x, const char* format = "%.1f") {
  if (!std::isfinite(x)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

std::string length_label(int64_t length) {
  return length % 1000 == 0 ? std::to_string(length / 1000) + "K" : std::to_string(length);
}

// Accuracy (%) of one architecture on one language at one length: mean over the tasks whose cells ran.
double lang_accuracy(const NiahArchResult& a, const std::string& lang, int64_t length) {
  double sum = 0;
  int ran = 0;
  for (const NiahCell& c : a.cells)
    if (c.lang == lang && c.length == length && c.status == "ok") {
      sum += 100.0 * c.accuracy();
      ++ran;
    }
  return ran > 0 ? sum / ran : kNaN;
}

// Correct answers and samples of one architecture on one task at one length, summed over the languages whose
// cells ran.
struct TaskCount {
  int64_t correct = 0, n = 0;
};
TaskCount task_count(const NiahArchResult& a, const std::string& task, int64_t length) {
  TaskCount k;
  for (const NiahCell& c : a.cells)
    if (c.task == task && c.length == length && c.status == "ok") {
      k.correct += c.correct;
      k.n += c.n;
    }
  return k;
}

double mean_finite(const std::vector<double>& v) {
  double sum = 0;
  int n = 0;
  for (double x : v)
    if (std::isfinite(x)) {
      sum += x;
      ++n;
    }
  return n > 0 ? sum / n : kNaN;
}

std::vector<std::string> other_langs(const NiahExperimentConfig& c) {
  std::vector<std::string> out;
  for (const std::string& l : c.langs)
    if (l != kEnglish) out.push_back(l);
  return out;
}

bool has_english(const NiahExperimentConfig& c) {
  return std::find(c.langs.begin(), c.langs.end(), kEnglish) != c.langs.end();
}

// Mean over `langs` of a per-language value.
double group_mean(const std::vector<std::string>& langs, const std::function<double(const std::string&)>& value) {
  std::vector<double> v;
  for (const std::string& l : langs) v.push_back(value(l));
  return mean_finite(v);
}

const NiahArchResult* baseline(const NiahExperimentResult& r) {
  for (const NiahArchResult& a : r.archs)
    if (a.arch == kNiahBaselineArch) return &a;
  return nullptr;
}

double deficit(const NiahArchResult& base, const NiahArchResult& a, const std::string& lang, int64_t length) {
  return lang_accuracy(base, lang, length) - lang_accuracy(a, lang, length);
}

struct Cost {
  int cells = 0;
  double seconds = 0, prefill = 0, decode = 0;  // per sample, mean over cells
  int64_t peak_state = 0, plan = 0;             // max over cells
};

Cost cost_of(const NiahArchResult& a, int64_t length) {
  Cost c;
  for (const NiahCell& cell : a.cells) {
    if (cell.length != length || cell.status != "ok" || cell.n == 0) continue;
    ++c.cells;
    c.seconds += cell.seconds / static_cast<double>(cell.n);
    c.prefill += cell.prefill_seconds / static_cast<double>(cell.n);
    c.decode += cell.decode_seconds / static_cast<double>(cell.n);
    c.peak_state = std::max(c.peak_state, cell.peak_state_bytes);
    c.plan = std::max(c.plan, cell.plan_bytes);
  }
  if (c.cells > 0) {
    c.seconds /= c.cells;
    c.prefill /= c.cells;
    c.decode /= c.cells;
  }
  return c;
}

// Cells of an arch at a length that did not run (oom / too_long), as " (k OOM, j too long)".
std::string not_run(const NiahArchResult& a, int64_t length) {
  int oom = 0, too_long = 0;
  for (const NiahCell& c : a.cells)
    if (c.length == length) {
      oom += c.status == "oom";
      too_long += c.status == "too_long";
    }
  std::string out;
  if (oom) out += std::to_string(oom) + " OOM";
  if (too_long) out += (out.empty() ? "" : ", ") + std::to_string(too_long) + " too long";
  return out;
}

ChartSeries series(const std::string& label, std::vector<double> x, const std::string& dash = "") {
  ChartSeries s;
  s.label = label;
  s.x = std::move(x);
  s.dash = dash;
  return s;
}

std::string language_name(const std::string& code) {
  for (const NiahLanguage& l : niah_languages())
    if (l.code == code) return std::string(l.name);
  return code;
}

}  // namespace

std::string niah_experiment_accuracy_csv(const NiahExperimentResult& r) {
  std::ostringstream os;
  os << "arch,layout,lang,length,tasks_run,accuracy\n";
  for (const NiahArchResult& a : r.archs)
    for (const std::string& lang : r.config.langs)
      for (int64_t length : sorted_lengths(r.config)) {
        int ran = 0;
        for (const NiahCell& c : a.cells) ran += c.lang == lang && c.length == length && c.status == "ok";
        os << a.arch << "," << a.layout << "," << lang << "," << length << "," << ran << ","
           << (ran > 0 ? num(lang_accuracy(a, lang, length), "%.4f") : std::string()) << "\n";
      }
  return os.str();
}

std::string niah_experiment_tasks_csv(const NiahExperimentResult& r) {
  std::ostringstream os;
  os << "arch,task,length,correct,n,accuracy\n";
  for (const NiahArchResult& a : r.archs)
    for (const std::string& task : r.config.eval_tasks)
      for (int64_t l : sorted_lengths(r.config)) {
        const TaskCount k = task_count(a, task, l);
        if (k.n == 0) continue;
        os << a.arch << "," << task << "," << l << "," << k.correct << "," << k.n << ","
           << num(100.0 * static_cast<double>(k.correct) / static_cast<double>(k.n), "%.2f") << "\n";
      }
  return os.str();
}

std::string niah_experiment_deficit_csv(const NiahExperimentResult& r) {
  std::ostringstream os;
  os << "arch,lang,length,accuracy_full_attention,accuracy,deficit\n";
  const NiahArchResult* base = baseline(r);
  if (!base) return os.str();
  for (const NiahArchResult& a : r.archs) {
    if (&a == base) continue;
    for (const std::string& lang : r.config.langs)
      for (int64_t length : sorted_lengths(r.config)) {
        const double f = lang_accuracy(*base, lang, length), h = lang_accuracy(a, lang, length);
        const auto field = [](double x) { return std::isfinite(x) ? num(x, "%.4f") : std::string(); };
        os << a.arch << "," << lang << "," << length << "," << field(f) << "," << field(h) << "," << field(f - h)
           << "\n";
      }
  }
  return os.str();
}

std::string niah_experiment_cost_csv(const NiahExperimentResult& r) {
  std::ostringstream os;
  os << "arch,layout,length,cells_run,seconds_per_sample,prefill_seconds_per_sample,decode_seconds_per_sample,"
        "peak_state_bytes,plan_bytes\n";
  for (const NiahArchResult& a : r.archs)
    for (int64_t length : sorted_lengths(r.config)) {
      const Cost c = cost_of(a, length);
      os << a.arch << "," << a.layout << "," << length << "," << c.cells << ",";
      if (c.cells > 0)
        os << num(c.seconds, "%.6f") << "," << num(c.prefill, "%.6f") << "," << num(c.decode, "%.6f") << ","
           << c.peak_state << "," << c.plan;
      else
        os << ",,,,";
      os << "\n";
    }
  return os.str();
}

std::string niah_experiment_report_markdown(const NiahExperimentResult& r) {
  const NiahExperimentConfig& c = r.config;
  const std::vector<int64_t> lengths = sorted_lengths(c);
  const std::vector<std::string> others = other_langs(c);
  const bool english = has_english(c);
  const NiahArchResult* base = baseline(r);
  std::ostringstream os;
  os << "# NIAH trained retrieval experiment\n\n";
  os << "Models trained from scratch (`hybridlm pretrain`, "
     << (c.train_loss == "answer" ? "CE on the answer's tokens only" : "CE on every token")
     << ") on NIAH-format examples built from the training documents of `"
     << c.corpus << "` (tokenizer `" << c.tokenizer << "`, " << c.train.tokens << " tokens per architecture in rows of "
     << c.train.seq_len << "; haystacks of";
  for (int64_t l : c.train_lengths) os << " " << l;
  os << " tokens; tasks";
  for (const std::string& t : c.train_tasks) os << " " << t;
  os << "), then evaluated with the `hybridlm niah` harness on held-out prose (held_out_docs " << c.held_out_docs
     << ", split " << c.split << "): " << c.eval_n << " samples per (language, task, length), greedy, up to "
     << c.max_new_tokens << " new tokens, stop at `" << c.stop << "`; tasks";
  for (const std::string& t : c.eval_tasks) os << " " << t;
  os << "; device " << c.device << ", precision " << c.eval_precision << ", prefill chunks of " << c.prefill_chunk
     << " tokens. Accuracy: mean over tasks of the cells that ran (%).\n\n";
  for (const NiahArchResult& a : r.archs)
    if (!a.eval_complete())
      os << "**" << a.arch << ": partial evaluation** (" << a.cells.size() << " of " << a.eval_cells_planned
         << " cells; evaluated shortest length first, so its longer lengths may be missing or cover fewer languages; "
            "a rerun continues it).\n\n";

  // Table 2 layout.
  os << "## Accuracy (%), the seed's Table 2 layout\n\n| arch | layout |";
  if (english)
    for (int64_t l : lengths) os << " English " << length_label(l) << " |";
  for (int64_t l : lengths) os << " Non-Eng (" << others.size() << ") " << length_label(l) << " |";
  os << "\n|---|---|";
  for (size_t i = 0; i < lengths.size() * (english ? 2 : 1); ++i) os << "---:|";
  os << "\n";
  for (const NiahArchResult& a : r.archs) {
    os << "| " << a.arch << " | " << a.layout << " |";
    if (english)
      for (int64_t l : lengths) os << " " << num(lang_accuracy(a, kEnglish, l)) << " |";
    for (int64_t l : lengths)
      os << " " << num(group_mean(others, [&](const std::string& g) { return lang_accuracy(a, g, l); })) << " |";
    os << "\n";
  }

  // Per task: the Table 2 mean hides which tasks carry it (a model that always answers the none word scores 100 % on
  // none and 0 elsewhere).
  os << "\n## Per task: correct answers / samples, all languages\n\n";
  if (std::find(c.eval_tasks.begin(), c.eval_tasks.end(), "none") != c.eval_tasks.end())
    os << "A model that answers the none word to every prompt gets every `none` sample and nothing else: "
       << num(100.0 / static_cast<double>(c.eval_tasks.size())) << " % in the tables above, with no retrieval.\n\n";
  os << "| arch | task |";
  for (int64_t l : lengths) os << " " << length_label(l) << " |";
  os << "\n|---|---|";
  for (size_t i = 0; i < lengths.size(); ++i) os << "---:|";
  os << "\n";
  for (const NiahArchResult& a : r.archs)
    for (const std::string& task : c.eval_tasks) {
      os << "| " << a.arch << " | " << task << " |";
      for (int64_t l : lengths) {
        const TaskCount k = task_count(a, task, l);
        os << " " << (k.n ? std::to_string(k.correct) + "/" + std::to_string(k.n) : std::string("n/a")) << " |";
      }
      os << "\n";
    }

  // Deficits.
  if (base && r.archs.size() > 1) {
    os << "\n## Deficit against full attention (percentage points; positive: the architecture is worse)\n\n"
          "Seed Table 2 pattern (hybrid vs full attention): a larger deficit outside English at short contexts, "
          "narrowing as the context grows. Deficits below are means over languages of per-language deficits.\n\n"
          "| arch |";
    if (english)
      for (int64_t l : lengths) os << " English " << length_label(l) << " |";
    for (int64_t l : lengths) os << " Non-Eng " << length_label(l) << " |";
    os << " non-Eng − Eng, shortest → longest |\n|---|";
    for (size_t i = 0; i < lengths.size() * (english ? 2 : 1); ++i) os << "---:|";
    os << "---|\n";
    for (const NiahArchResult& a : r.archs) {
      if (&a == base) continue;
      os << "| " << a.arch << " |";
      std::vector<double> eng, non;
      for (int64_t l : lengths) {
        eng.push_back(english ? deficit(*base, a, kEnglish, l) : kNaN);
        non.push_back(group_mean(others, [&](const std::string& g) { return deficit(*base, a, g, l); }));
      }
      if (english)
        for (double d : eng) os << " " << num(d) << " |";
      for (double d : non) os << " " << num(d) << " |";
      os << " " << num(non.front() - eng.front()) << " → " << num(non.back() - eng.back()) << " |\n";
    }
  }

  // Per language.
  os << "\n## Per language: accuracy (%) by length";
  if (base && r.archs.size() > 1) os << ", and each architecture's deficit against full attention (points)";
  os << "\n\ntokens/cp: haystack tokens per code point under the tokenizer (the inflation the fixed token budget "
        "meets: a higher value means less text per haystack).\n\n| language | tokens/cp | arch |";
  for (int64_t l : lengths) os << " " << length_label(l) << " |";
  if (base)
    for (int64_t l : lengths) os << " deficit " << length_label(l) << " |";
  os << "\n|---|---:|---|";
  for (size_t i = 0; i < lengths.size() * (base ? 2 : 1); ++i) os << "---:|";
  os << "\n";
  for (const std::string& lang : c.langs) {
    double tpc = kNaN;
    for (const NiahLanguageStats& s : r.languages)
      if (s.code == lang) tpc = s.tokens_per_code_point();
    for (const NiahArchResult& a : r.archs) {
      os << "| " << lang << " (" << language_name(lang) << ") | " << num(tpc, "%.2f") << " | " << a.arch << " |";
      for (int64_t l : lengths) os << " " << num(lang_accuracy(a, lang, l)) << " |";
      if (base)
        for (int64_t l : lengths) os << " " << (&a == base ? std::string("–") : num(deficit(*base, a, lang, l))) << " |";
      os << "\n";
    }
  }

  // Cost.
  os << "\n## Cost: seconds per sample and peak inference state\n\nSeconds: the generate call (prefill + decode, up "
        "to "
     << c.max_batch << " sequences at once) divided by its samples, mean over the cells that ran. Peak state: KV "
                       "blocks in use + GDN states (weights and activations not counted), the largest over the cells, "
                       "with up to "
     << std::min(c.max_batch, c.eval_n) << " sequences at once.\n\n| arch |";
  for (int64_t l : lengths) os << " s/sample " << length_label(l) << " |";
  for (int64_t l : lengths) os << " peak MiB " << length_label(l) << " |";
  os << " not run |\n|---|";
  for (size_t i = 0; i < lengths.size() * 2; ++i) os << "---:|";
  os << "---|\n";
  for (const NiahArchResult& a : r.archs) {
    os << "| " << a.arch << " |";
    for (int64_t l : lengths) {
      const Cost k = cost_of(a, l);
      os << " " << (k.cells ? num(k.seconds, "%.3f") : "n/a") << " |";
    }
    for (int64_t l : lengths) {
      const Cost k = cost_of(a, l);
      os << " " << (k.cells ? num(static_cast<double>(k.peak_state) / 1048576.0, "%.3f") : "n/a") << " |";
    }
    std::string nr;
    for (int64_t l : lengths) {
      const std::string s = not_run(a, l);
      if (!s.empty()) nr += (nr.empty() ? "" : "; ") + length_label(l) + ": " + s;
    }
    os << " " << (nr.empty() ? "–" : nr) << " |\n";
  }

  // Training.
  os << "\n## Training\n\n| arch | layout | parameters | tokens | tokens/s (median step) | seconds | test CE "
        "(NIAH-format rows) | eval seconds | eval cells |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const NiahArchResult& a : r.archs)
    os << "| " << a.arch << " | " << a.layout << " | " << a.parameters << " | " << a.train_tokens << " | "
       << num(a.tokens_per_second, "%.0f") << " | " << num(a.train_seconds, "%.1f") << " | "
       << num(a.test_ce, "%.4f") << " | " << num(a.eval_seconds, "%.1f") << " | " << a.cells.size() << "/"
       << a.eval_cells_planned << " |\n";
  return os.str();
}

void niah_experiment_report_write(const NiahExperimentResult& r, const std::filesystem::path& out) {
  const NiahExperimentConfig& c = r.config;
  std::vector<NiahCell> cells;
  for (const NiahArchResult& a : r.archs) cells.insert(cells.end(), a.cells.begin(), a.cells.end());
  file_write_atomic(out / "niah.csv", niah_cells_csv(cells));
  file_write_atomic(out / "niah.md", "# NIAH (OneRULER tasks), trained models\n\n" + niah_cells_markdown(cells));
  file_write_atomic(out / "accuracy.csv", niah_experiment_accuracy_csv(r));
  file_write_atomic(out / "deficit.csv", niah_experiment_deficit_csv(r));
  file_write_atomic(out / "tasks.csv", niah_experiment_tasks_csv(r));
  file_write_atomic(out / "cost.csv", niah_experiment_cost_csv(r));
  std::ostringstream training;
  training << "arch,layout,parameters,train_tokens,tokens_per_second,train_seconds,test_ce,eval_seconds,eval_cells,"
              "eval_cells_planned\n";
  for (const NiahArchResult& a : r.archs)
    training << a.arch << "," << a.layout << "," << a.parameters << "," << a.train_tokens << ","
             << num(a.tokens_per_second, "%.1f") << "," << num(a.train_seconds, "%.3f") << ","
             << num(a.test_ce, "%.6f") << "," << num(a.eval_seconds, "%.3f") << "," << a.cells.size() << ","
             << a.eval_cells_planned << "\n";
  file_write_atomic(out / "training.csv", training.str());
  file_write_atomic(out / "report.md", niah_experiment_report_markdown(r));

  const std::vector<int64_t> lengths = sorted_lengths(c);
  auto xs = [&] {
    std::vector<double> x;
    for (int64_t l : lengths) x.push_back(static_cast<double>(l) / 1000.0);
    return x;
  };
  for (const std::string& lang : c.langs) {
    LineChart chart;
    chart.title = "NIAH accuracy, " + lang + " (mean over tasks), trained models";
    chart.x_label = "haystack tokens (thousands)";
    chart.y_label = "accuracy (%)";
    chart.y_min = 0;
    chart.y_max = 100;
    for (const NiahArchResult& a : r.archs) {
      ChartSeries s = series(a.arch, xs());
      for (int64_t l : lengths) s.y.push_back(lang_accuracy(a, lang, l));
      chart.series.push_back(std::move(s));
    }
    file_write_atomic(out / ("accuracy_" + lang + ".svg"), svg_line_chart(chart));
  }
  const NiahArchResult* base = baseline(r);
  if (base && r.archs.size() > 1) {
    LineChart chart;
    chart.title = "Deficit against full attention (points): English (solid) and mean of the other languages (dashed)";
    chart.x_label = "haystack tokens (thousands)";
    chart.y_label = "full attention − arch (points)";
    const std::vector<std::string> others = other_langs(c);
    for (const NiahArchResult& a : r.archs) {
      if (&a == base) continue;
      if (has_english(c)) {
        ChartSeries s = series(a.arch + " English", xs());
        for (int64_t l : lengths) s.y.push_back(deficit(*base, a, kEnglish, l));
        chart.series.push_back(std::move(s));
      }
      ChartSeries s = series(a.arch + " non-English", xs(), "6,4");
      for (int64_t l : lengths)
        s.y.push_back(group_mean(others, [&](const std::string& g) { return deficit(*base, a, g, l); }));
      chart.series.push_back(std::move(s));
    }
    file_write_atomic(out / "deficit.svg", svg_line_chart(chart));
  }
  LineChart time, memory;
  time.title = "NIAH generate time per sample (prefill + decode, batched)";
  time.x_label = memory.x_label = "haystack tokens (thousands)";
  time.y_label = "seconds per sample";
  time.y_min = memory.y_min = 0;
  memory.title = "Peak inference state (KV blocks + GDN states)";
  memory.y_label = "MiB";
  for (const NiahArchResult& a : r.archs) {
    ChartSeries t = series(a.arch, xs()), m = series(a.arch, xs());
    for (int64_t l : lengths) {
      const Cost k = cost_of(a, l);
      t.y.push_back(k.cells ? k.seconds : kNaN);
      m.y.push_back(k.cells ? static_cast<double>(k.peak_state) / 1048576.0 : kNaN);
    }
    time.series.push_back(std::move(t));
    memory.series.push_back(std::move(m));
  }
  file_write_atomic(out / "time.svg", svg_line_chart(time));
  file_write_atomic(out / "memory.svg", svg_line_chart(memory));
}

}  // namespace hlm
