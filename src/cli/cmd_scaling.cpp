// `hybridlm scaling fit --points runs.csv --out DIR [...]`: Chinchilla fits L(N,D) = E + A/N^α + B/D^β per
// architecture with bootstrap intervals, compute-optimal allocation and token savings (scaling/scaling_analysis.h,
// scaling/scaling_report.h; docs/scaling.md).
// `hybridlm scaling ladder --config ladder.json --out DIR [--device cpu|cuda]`: trains the ladder (scaling/ladder.h),
// appends runs.csv, then fits into DIR/fit.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/subcommands.h"
#include "cli/train_device_cli.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "scaling/ladder.h"
#include "scaling/scaling_points.h"
#include "scaling/scaling_report.h"

namespace hlm {
namespace {

struct FitCommand {
  std::string points, out, weights = "none", grid = "epoch", bounds = "none", flops, savings_n, reference;
  double fixed_exponents = 0, target_loss = 0;
  int bootstrap = 0;
  uint64_t seed = 0;
  bool quiet = false;
};

std::vector<double> parse_number_list(const std::string& text, const char* option) {
  std::vector<double> v;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HLM_CHECK_INPUT(!item.empty() && used == item.size(), option, ": '", item, "' is not a number");
    v.push_back(x);
  }
  HLM_CHECK_INPUT(!v.empty(), option, ": empty list");
  return v;
}

void parse_grid(const std::string& grid, FitOptions& fit) {
  const size_t colon = grid.find(':');
  fit.grid = grid.substr(0, colon);
  if (colon != std::string::npos) {
    try {
      fit.grid_size = std::stoi(grid.substr(colon + 1));
    } catch (const std::exception&) {
      throw_input_error("--grid '", grid, "': expected epoch, olmo or olmo:S");
    }
  }
}

// A progress line to stderr at every tenth of a bootstrap (and its end).
ScalingProgress stderr_progress(bool quiet) {
  if (quiet) return {};
  return [](const std::string& arch, int done, int total) {
    if (done == total || done % std::max(1, total / 10) == 0)
      std::fprintf(stderr, "bootstrap %s: %d/%d\n", arch.c_str(), done, total);
  };
}

int run_fit(const FitCommand& c, const std::vector<std::string>& given) {
  const auto has = [&](const char* key) { return std::find(given.begin(), given.end(), key) != given.end(); };
  ScalingOptions o;
  o.fit.weights = parse_fit_weights(c.weights);
  parse_grid(c.grid, o.fit);
  o.fit.bounds = c.bounds;
  o.bootstrap = c.bootstrap;
  o.seed = c.seed;
  if (has("--fixed-exponents")) o.fixed_exponent = c.fixed_exponents;
  if (has("--flops")) o.flops = parse_number_list(c.flops, "--flops");
  if (has("--savings-n")) o.savings_n = parse_number_list(c.savings_n, "--savings-n");
  if (has("--target-loss")) o.target_loss = c.target_loss;
  o.reference = c.reference;
  scaling_options_validate(o);
  const std::vector<ScalingPoint> points = read_scaling_points(c.points);

  std::printf("scaling fit: %zu points from %s\n%s\n", points.size(), c.points.c_str(),
              scaling_options_json(o).dump(2).c_str());
  const ScalingAnalysis analysis = run_scaling_analysis(points, o, stderr_progress(c.quiet));
  const auto written = write_scaling_outputs(analysis, c.out);
  {
    nlohmann::json resolved = scaling_options_json(o);
    resolved["points"] = c.points;
    resolved["out"] = c.out;
    resolved["reference_resolved"] = analysis.reference;
    resolved["target_loss_resolved"] = analysis.target_loss;
    std::ofstream f(std::filesystem::path(c.out) / "options.json");
    f << resolved.dump(2) << "\n";
    HLM_CHECK_INPUT(f.good(), "--out: cannot write options.json");
  }
  const ScalingTables tables = scaling_tables(analysis);
  std::printf("\n%s\n%s\n%s", parameters_markdown(tables).c_str(), compute_markdown(analysis, tables).c_str(),
              savings_markdown(analysis, tables).c_str());
  std::printf("\nwrote %zu files under %s (fit.json, tables as CSV and Markdown, SVG charts, options.json)\n",
              written.size() + 1, c.out.c_str());
  return 0;
}

void add_fit(CLI::App* scaling, std::function<int()>& action) {
  auto c = std::make_shared<FitCommand>();
  CLI::App* cmd = scaling->add_subcommand("fit", "Fit L(N,D) = E + A/N^alpha + B/D^beta per architecture");
  cmd->add_option("--points", c->points, "CSV with columns arch,N,D,loss (N non-embedding parameters, D tokens)")
      ->required();
  cmd->add_option("--out", c->out, "Output directory")->required();
  cmd->add_option("--weights", c->weights, "Per-point weights: none | sqrt_flops (sqrt(6ND)) | flops (6ND)")
      ->capture_default_str();
  cmd->add_option("--grid", c->grid, "Starts: epoch (4500, Hoffmann/Epoch) | olmo[:S] (S^5, OLMo-core; S=4)")
      ->capture_default_str();
  cmd->add_option("--bounds", c->bounds,
                  "none (unbounded, Hoffmann) | olmo (E<=min L, A,B in [1e-6,1e4], alpha,beta in [0.01,2])")
      ->capture_default_str();
  cmd->add_option("--fixed-exponents", c->fixed_exponents,
                  "Also fit the fixed-exponent variant: alpha = beta = this value, only E, A, B refit");
  cmd->add_option("--bootstrap", c->bootstrap, "Bootstrap resamples for 95% intervals (0: none)")
      ->capture_default_str();
  cmd->add_option("--seed", c->seed, "Seed of the bootstrap resamples")->capture_default_str();
  cmd->add_option("--flops", c->flops, "FLOP budgets of the compute-optimal table (default 1e18,1e19,...,1e22)");
  cmd->add_option("--savings-n", c->savings_n, "Model sizes of the token-savings table (default 1e9,3e9,7e9,13e9,30e9)");
  cmd->add_option("--target-loss", c->target_loss,
                  "Target loss of the token-savings table (default: the minimum observed loss)");
  cmd->add_option("--reference", c->reference,
                  "Reference architecture for differences and savings (default: transformer, else the first)");
  cmd->add_flag("--quiet", c->quiet, "No bootstrap progress lines");
  cmd->footer(
      "Outputs under --out: fit.json (per architecture E, A, alpha, B, beta, a_opt, b_opt, r2 and their 95% bootstrap\n"
      "intervals under ci), parameters.{csv,md} (Table 18), compute_optimal.{csv,md} (Table 19),\n"
      "token_savings.{csv,md} (Table 20), frontier.svg, fits_<arch>.svg, options.json.\n"
      "Examples:\n"
      "  hybridlm scaling fit --points ladder/runs.csv --out ladder/fit --bootstrap 1000 --seed 0\n"
      "  hybridlm scaling fit --points runs.csv --out fit --weights sqrt_flops --fixed-exponents 0.22 \\\n"
      "      --flops 1e18,1e19,1e20,1e21,1e22 --target-loss 2.474 --reference transformer\n"
      "  hybridlm scaling fit --points runs.csv --out fit --grid olmo:4 --bounds olmo --bootstrap 200");
  cmd->callback([c, cmd, &action] {
    std::vector<std::string> given;
    for (const char* o : {"--fixed-exponents", "--flops", "--savings-n", "--target-loss"})
      if (cmd->count(o) > 0) given.push_back(o);
    action = [c, given] { return run_fit(*c, given); };
  });
}

struct LadderCommand {
  std::string config, out, device;
  std::vector<std::string> architectures;
  bool plan_only = false;
};

int run_ladder(const LadderCommand& c) {
  LadderConfig config = ladder_config_load(c.config);
  if (!c.architectures.empty()) {  // a subset, e.g. one process per architecture on one GPU
    nlohmann::json j = config.source;
    j["architectures"] = c.architectures;
    // A fit reference outside the subset would stop its fit: the fit's default (the first architecture) applies.
    if (j.contains("fit") && j["fit"].is_object() && j["fit"].contains("reference") &&
        j["fit"]["reference"].is_string() &&
        std::find(c.architectures.begin(), c.architectures.end(), j["fit"]["reference"].get<std::string>()) ==
            c.architectures.end()) {
      std::fprintf(stderr, "scaling ladder: fit.reference '%s' is not among --architectures; the fit of this "
                   "subset uses its default reference\n", j["fit"]["reference"].get<std::string>().c_str());
      j["fit"].erase("reference");
    }
    config = ladder_config_from_json(j, c.config + " with --architectures");
  }
  if (!c.device.empty()) {
    HLM_CHECK_INPUT(c.device == "cpu" || c.device == "cuda", "--device: expected cpu or cuda, got '", c.device, "'");
    config.train.device = c.device;
    if (c.device == "cpu") config.train.precision = "fp32";
  }
  std::printf("scaling ladder: %s -> %s\n%s\n", c.config.c_str(), c.out.c_str(),
              ladder_config_to_json(config).dump(2).c_str());
  if (c.plan_only) {
    const int64_t vocab = tokenizer_load(config.tokenizer)->vocab_size();
    const std::vector<LadderRun> plan = ladder_plan(config, vocab);
    // Without a corpus there is nothing to check (the plan alone needs only the tokenizer).
    const bool check = std::filesystem::is_directory(config.data);
    LadderCorpusCoverage cover;
    if (check) {
      cover = ladder_corpus_coverage(config);
      double share = 0;
      for (const LadderCorpusLanguage& l : cover.languages)
        if (l.code == cover.limiting) share = l.share;
      std::printf("corpus %s: %lld training tokens in %zu languages (held-out documents excluded); a run gets all "
                  "its D tokens up to D = %lld (beyond that %s, share %.4f, runs short first)\n",
                  config.data.c_str(), static_cast<long long>(cover.train_tokens), cover.languages.size(),
                  static_cast<long long>(cover.max_tokens), cover.limiting.c_str(), share);
    } else {
      std::printf("corpus %s: not found; its coverage of the runs is not checked\n", config.data.c_str());
    }
    int64_t total = 0, steps = 0, short_runs = 0;
    for (const LadderRun& r : plan) {
      const int64_t short_by = check ? ladder_corpus_shortfall(cover, config, r.tokens) : 0;
      short_runs += short_by > 0;
      total += r.tokens;
      steps += r.steps;
      std::printf("%-32s N %12lld  D %14lld  steps %8lld%s\n", r.id.c_str(), static_cast<long long>(r.N),
                  static_cast<long long>(r.tokens), static_cast<long long>(r.steps),
                  !check ? "" : short_by > 0 ? str_cat("  corpus short by ", short_by, " tokens").c_str()
                                             : "  corpus covers it");
    }
    std::printf("%zu runs, %lld training tokens, %lld steps", plan.size(), static_cast<long long>(total),
                static_cast<long long>(steps));
    if (check) std::printf("; %lld runs would stop early when the corpus runs out", static_cast<long long>(short_runs));
    std::printf("\n");
    return 0;
  }
  const std::unique_ptr<TrainDevice> device =
      train_device_for(config.train);
  const LadderSummary s = ladder_run(config, c.out, device.get(), [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  });
  std::printf("ladder: %d runs trained, %d already done, %d in all; points %s; fits under %s\n", s.trained, s.skipped,
              s.total, s.runs_csv.string().c_str(), s.fit_dir.string().c_str());
  return 0;
}

void add_ladder(CLI::App* scaling, std::function<int()>& action) {
  auto c = std::make_shared<LadderCommand>();
  CLI::App* cmd = scaling->add_subcommand("ladder", "Train a transformer / hybrid / GDN ladder, then fit it");
  cmd->add_option("--config", c->config, "Ladder config JSON (docs/scaling.md)")->required();
  cmd->add_option("--out", c->out, "Ladder directory (runs/, runs.csv, fit/); rerun the same command to resume");
  cmd->add_option("--device", c->device, "cpu | cuda (overrides the config's train.device)");
  cmd->add_option("--architectures", c->architectures,
                  "Comma-separated subset of transformer,hybrid,gdn (overrides the config's architectures)")
      ->delimiter(',');
  cmd->add_flag("--plan", c->plan_only,
                "Print the runs (N, D, steps) and whether the corpus covers each run's tokens, and exit without "
                "training");
  cmd->footer(
      "Runs already in DIR/runs.csv are skipped; an interrupted run resumes from its checkpoint.\n"
      "Examples:\n"
      "  hybridlm scaling ladder --config configs/scaling-ladder-gpu-pkg.json --out runs/ladder --device cuda\n"
      "  hybridlm scaling ladder --config configs/scaling-ladder-gpu-pkg.json --plan\n"
      "  hybridlm scaling ladder --config configs/scaling-ladder-gpu-pkg.json --out runs/ladder-gdn --device cuda \\\n"
      "      --architectures gdn");
  cmd->callback([c, cmd, &action] {
    if (!c->plan_only && cmd->count("--out") == 0) throw CLI::RequiredError("--out");
    action = [c] { return run_ladder(*c); };
  });
}

}  // namespace

void add_scaling_command(CLI::App& app, std::function<int()>& action) {
  CLI::App* cmd = app.add_subcommand("scaling", "Scaling laws: Chinchilla fits and architecture ladders");
  cmd->require_subcommand(1);
  add_fit(cmd, action);
  add_ladder(cmd, action);
}

}  // namespace hlm
