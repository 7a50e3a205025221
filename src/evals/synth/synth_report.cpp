// CSV / Markdown / SVG reports of a synthetic sweep (contracts in synth_report.h).
#include "evals/synth/synth_report.h"

#include <cmath>
#include <iterator>
#include <cstdio>
#include <sstream>

#include "analysis/svg_chart.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

const SynthPairResult* find_pair(const std::vector<SynthPairResult>& results, const std::string& task,
                                 const std::string& arch) {
  for (const SynthPairResult& r : results)
    if (r.task == task && r.arch == arch) return &r;
  return nullptr;
}

const SynthDifficultyResult* find_difficulty(const SynthPairResult* r, int64_t d) {
  if (r == nullptr) return nullptr;
  for (const SynthDifficultyResult& e : r->eval)
    if (e.difficulty == d) return &e;
  return nullptr;
}

std::string fixed(double v, int digits = 3) {
  if (!std::isfinite(v)) return "–";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

const char* difficulty_name(SynthTask task) { return task == SynthTask::Recall ? "m" : "n"; }

// Architectures of the config, in table-column order.
std::vector<SynthArch> config_archs(const SynthConfig& c) {
  std::vector<SynthArch> out;
  for (const SynthArchSpec& s : synth_arch_specs())
    for (const std::string& name : c.architectures)
      if (name == s.name) out.push_back(s.arch);
  return out;
}

std::string task_csv(const SynthConfig& c, SynthTask task, const std::vector<SynthPairResult>& results) {
  std::ostringstream os;
  os << "task,arch,difficulty,m,in_training_range,items,accuracy,moved_items,moved_accuracy,paper_accuracy\n";
  for (SynthArch arch : config_archs(c)) {
    const SynthPairResult* r = find_pair(results, synth_task_name(task), synth_arch_spec(arch).name);
    if (r == nullptr) continue;
    for (const SynthDifficultyResult& e : r->eval) {
      const std::optional<double> paper = synth_paper_cell(c, task, arch, e.difficulty);
      os << r->task << ',' << r->arch << ',' << e.difficulty << ',' << e.m << ',' << (e.in_training_range ? 1 : 0)
         << ',' << e.items << ',' << fixed(e.accuracy, 6) << ',' << e.moved_items << ','
         << (std::isfinite(e.moved_accuracy) ? fixed(e.moved_accuracy, 6) : "") << ','
         << (paper ? fixed(*paper, 6) : "") << '\n';
    }
  }
  return os.str();
}

// One wide table: rows = difficulties, columns = architectures; `moved` picks the moved-items accuracy.
std::string wide_table(const SynthConfig& c, SynthTask task, const std::vector<SynthPairResult>& results, bool moved) {
  const std::vector<SynthArch> archs = config_archs(c);
  std::ostringstream os;
  os << "| " << difficulty_name(task) << (task == SynthTask::StateBasedRecall ? " (m)" : "") << " |";
  for (SynthArch a : archs) os << ' ' << synth_arch_spec(a).label << " |";
  os << "\n|---|";
  for (size_t i = 0; i < archs.size(); ++i) os << "---|";
  os << '\n';
  for (int64_t d : c.eval_difficulties) {
    os << "| " << d;
    if (task == SynthTask::StateBasedRecall) os << " (" << synth_state_based_recall_m(c, d) << ")";
    if (c.train_min <= d && d <= c.train_max) os << " *";
    os << " |";
    for (SynthArch a : archs) {
      const SynthDifficultyResult* e =
          find_difficulty(find_pair(results, synth_task_name(task), synth_arch_spec(a).name), d);
      os << ' ' << (e == nullptr ? "–" : fixed(moved ? e->moved_accuracy : e->accuracy));
      if (!moved)
        if (const std::optional<double> paper = synth_paper_cell(c, task, a, d)) os << " / " << fixed(*paper);
      os << " |";
    }
    os << '\n';
  }
  return os.str();
}

std::string task_markdown(const SynthConfig& c, SynthTask task, const std::vector<SynthPairResult>& results) {
  std::ostringstream os;
  const char* table = task == SynthTask::StateTracking ? "15" : task == SynthTask::Recall ? "16" : "17";
  os << "## " << synth_task_name(task) << " (layout of Olmo Hybrid Table " << table << ")\n\n";
  os << "Accuracy at the answer position on " << c.eval_items << " fresh held-out items per row; rows marked * lie in "
     << "the training range [" << c.train_min << ", " << c.train_max << "]. Chance: "
     << fixed(task == SynthTask::StateTracking ? 1.0 / static_cast<double>(c.variables) : 0.5, 2) << ".\n\n";
  bool any_paper = false;
  for (SynthArch a : config_archs(c))
    for (int64_t d : c.eval_difficulties) any_paper = any_paper || synth_paper_cell(c, task, a, d).has_value();
  if (any_paper)
    os << "Cells with two values: ours / the paper's (" << synth_paper_table(task) << ", Merrill et al. 2026; "
       << "its training recipe is not in the paper's text available to us; ours is this config's). The paper has "
       << "rows 4, 8, 16, 32, 64, 128"
       << (task == SynthTask::StateBasedRecall ? " with m = n (our n = 4 row uses m = 5: five distinct pointers)" : "")
       << ".\n\n";
  else
    os << "Paper's values: none for this config's rows and settings (" << synth_paper_table(task)
       << " has rows 4, 8, 16, 32, 64, 128 with 5 variables, and m = n for state-based recall).\n\n";
  os << wide_table(c, task, results, false) << '\n';
  if (task != SynthTask::Recall) {
    os << "Accuracy on items whose queried pointer moved (the shortcut \"initial value\" fails on them):\n\n"
       << wide_table(c, task, results, true) << '\n';
  }
  return os.str();
}

std::string task_svg(const SynthConfig& c, SynthTask task, const std::vector<SynthPairResult>& results) {
  LineChart chart;
  chart.title = std::string(synth_task_name(task)) + ": accuracy vs " + difficulty_name(task);
  chart.x_label = std::string("log2 ") + difficulty_name(task) + " (dotted: end of training range; dashed: paper)";
  chart.y_label = "accuracy";
  chart.y_min = 0.0;
  chart.y_max = 1.0;
  if (c.train_max > 0) chart.marker_x.push_back(std::log2(static_cast<double>(c.train_max)));
  // One colour per architecture (its column index): ours solid, the paper's dashed.
  constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"};
  std::vector<ChartSeries> paper_series;
  for (SynthArch a : config_archs(c)) {
    const std::string colour = kColours[static_cast<size_t>(a) % std::size(kColours)];
    ChartSeries paper;
    paper.label = std::string(synth_arch_spec(a).label) + " (paper)";
    paper.colour = colour;
    paper.dash = "6,4";
    for (int64_t d : c.eval_difficulties)
      if (const std::optional<double> v = synth_paper_cell(c, task, a, d); v && d > 0) {
        paper.x.push_back(std::log2(static_cast<double>(d)));
        paper.y.push_back(*v);
      }
    if (!paper.x.empty()) paper_series.push_back(std::move(paper));
    const SynthPairResult* r = find_pair(results, synth_task_name(task), synth_arch_spec(a).name);
    if (r == nullptr) continue;
    ChartSeries s;
    s.label = synth_arch_spec(a).label;
    s.colour = colour;
    for (const SynthDifficultyResult& e : r->eval) {
      if (e.difficulty <= 0) continue;
      s.x.push_back(std::log2(static_cast<double>(e.difficulty)));
      s.y.push_back(e.accuracy);
    }
    chart.series.push_back(std::move(s));
  }
  for (ChartSeries& p : paper_series) chart.series.push_back(std::move(p));
  return svg_line_chart(chart);
}

}  // namespace

std::optional<double> synth_paper_cell(const SynthConfig& c, SynthTask task, SynthArch arch, int64_t difficulty) {
  if (task != SynthTask::Recall && c.variables != kSynthVariables) return std::nullopt;  // the paper: 5 pointers
  if (task == SynthTask::StateBasedRecall && c.state_based_recall_m != 0) return std::nullopt;  // the paper: m = n
  return synth_paper_accuracy(task, arch, difficulty);
}

void synth_write_reports(const std::filesystem::path& dir, const SynthConfig& c,
                         const std::vector<SynthPairResult>& results) {
  std::ostringstream all;
  all << "# Synthetic expressivity suite (Olmo Hybrid Tables 15–17, Figure 7)\n\n"
      << "Model: " << c.num_layers << " layers, d_model " << c.hidden_size << ", d_ff " << c.intermediate_size << ", "
      << c.num_heads << " heads of " << c.head_dim << "; hybrid layout:";
  for (const std::string& t : synth_hybrid_layer_types(c)) all << ' ' << (t == "full_attention" ? "attn" : "GDN");
  all << ". Training: " << c.steps << " steps x " << c.batch_size << " items, lr " << c.lr << ", seed " << c.seed
      << ".\n\n";
  for (const std::string& name : c.tasks) {
    const SynthTask task = synth_task_from_name(name);
    const std::string md = task_markdown(c, task, results);
    file_write_atomic(dir / (name + ".csv"), task_csv(c, task, results));
    file_write_atomic(dir / (name + ".md"), md);
    file_write_atomic(dir / (name + ".svg"), task_svg(c, task, results));
    all << md;
  }
  all << "## Training\n\n| task | architecture | parameters | train tokens | tokens/s | final answer CE |\n"
      << "|---|---|---|---|---|---|\n";
  for (const SynthPairResult& r : results)
    all << "| " << r.task << " | " << r.arch << " | " << r.parameters << " | " << r.train_tokens << " | "
        << fixed(r.tokens_per_second, 0) << " | " << fixed(r.final_loss, 4) << " |\n";
  file_write_atomic(dir / "results.md", all.str());
}

}  // namespace hlm
