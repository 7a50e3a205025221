// `hybridlm compare RUN... --baseline RUN --out DIR [--labels A,B,...] [--exclude CODE,...] [--force]`: the seed's
// δ̄ (Eq. 4) and R (Eq. 5) of each run against a baseline run, and the per-language table of Table C.4, from
// evaluations (a run directory's test.json or `hybridlm eval --out` files; train/compare.h). Writes compare.csv,
// compare.md and compare.json into DIR atomically (a temporary directory renamed into place).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/subcommands.h"
#include "models/safetensors.h"
#include "train/checkpoint_io.h"
#include "train/compare.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

struct CompareOptions {
  std::vector<std::string> runs;
  std::string baseline, out;
  std::vector<std::string> labels, exclude;
  bool force = false;
};

int run_compare(const CompareOptions& o) {
  HLM_CHECK_INPUT(o.labels.empty() || o.labels.size() == o.runs.size(), "--labels gives ", o.labels.size(),
                  " labels for ", o.runs.size(), " runs");
  const fs::path out = fs::absolute(o.out).lexically_normal();
  HLM_CHECK_INPUT(!out.filename().empty(), o.out, ": not a usable output directory name");
  if (fs::exists(out) && !o.force)
    HLM_CHECK_INPUT(fs::is_directory(out) && fs::is_empty(out), o.out,
                    ": --out exists and is not an empty directory (use --force to replace it)");
  const CompareRun baseline = compare_run_load(o.baseline, "");
  std::vector<CompareRun> runs;
  for (size_t i = 0; i < o.runs.size(); ++i) {
    runs.push_back(compare_run_load(o.runs[i], o.labels.empty() ? "" : o.labels[i]));
  }
  CompareRun base = baseline;
  for (const CompareRun& r : runs)
    if (r.source == baseline.source) base.label = r.label;  // the baseline listed among the runs keeps its label
  const std::set<std::string> excluded(o.exclude.begin(), o.exclude.end());
  const CompareTable table = compare_runs(base, runs, excluded);

  nlohmann::json summary = {{"format", "hybridlm-compare"},
                            {"version", 1},
                            {"baseline", base.source},
                            {"excluded", o.exclude},
                            {"runs", nlohmann::json::array()}};
  for (size_t i = 0; i < table.labels.size(); ++i)
    summary["runs"].push_back(
        {{"label", table.labels[i]}, {"R", table.relative_kl[i]}, {"delta_bar", table.delta_bar[i]}});
  const std::string markdown = compare_table_markdown(table);
  directory_write_atomic(out, [&](const fs::path& tmp) {
    file_write_atomic(tmp / "compare.csv", compare_table_csv(table));
    file_write_atomic(tmp / "compare.md", markdown);
    file_write_atomic(tmp / "compare.json", summary.dump(2) + "\n");
  });
  std::printf("%s", markdown.c_str());
  std::printf("wrote        %s/{compare.csv, compare.md, compare.json}\n", o.out.c_str());
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Compare distilled runs with a baseline: R (Eq. 5), delta-bar (Eq. 4), Table C.4 per language");
  cmd->footer(
      "Each RUN is a run directory (its test.json) or a JSON file from `hybridlm eval --out`. Every run must be\n"
      "evaluated on the same languages with the same teacher as the baseline. R = exp(mean log(KL_run / KL_base));\n"
      "delta-bar = mean(CE_run - CE_teacher); both average the languages not in --exclude (the seed excludes Mon).\n"
      "Examples:\n"
      "  hybridlm compare runs/rp runs/sw runs/is runs/es --baseline runs/sp --out tables/qwen_s0\n"
      "  hybridlm compare runs/sp runs/rp --labels SP,RP --baseline runs/sp --exclude mnw_Mymr --out tables/t3");
  cmd->add_option("runs", o->runs, "Run directories or evaluation JSON files")->required();
  cmd->add_option("--baseline", o->baseline, "Baseline run (R = 1)")->required();
  cmd->add_option("--out", o->out, "Output directory (absent or empty unless --force)")->required();
  cmd->add_option("--labels", o->labels, "Column labels, one per RUN (default: directory names)")->delimiter(',');
  cmd->add_option("--exclude", o->exclude, "Language codes left out of R and delta-bar")->delimiter(',');
  cmd->add_flag("--force", o->force, "Replace a non-empty --out");
  cmd->callback([o, &action] { action = [o] { return run_compare(*o); }; });
}

}  // namespace hlm
