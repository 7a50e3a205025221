#include "scaling/scaling_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "analysis/svg_chart.h"
#include "core/error.h"

namespace hlm {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Collects f(resample fit) over the ok resamples (NaN where a resample failed, so indices stay paired).
template <typename F>
std::vector<double> over_resamples(const std::vector<ChinchillaFit>& fits, F f) {
  std::vector<double> v(fits.size(), kNaN);
  for (size_t b = 0; b < fits.size(); ++b)
    if (fits[b].ok) v[b] = f(fits[b]);
  return v;
}

ParameterRow parameter_row(const std::string& arch, const std::string& variant, const VariantFits& v) {
  ParameterRow r;
  r.arch = arch;
  r.variant = variant;
  r.params = v.fit.params;
  r.a_opt = alloc_a_opt(r.params);
  r.b_opt = alloc_b_opt(r.params);
  r.r2 = v.fit.r2;
  r.objective = v.fit.objective;
  const auto& rs = v.resamples;
  r.E = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return f.params.E; }));
  r.A = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return f.params.A; }));
  r.alpha = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return f.params.alpha; }));
  r.B = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return f.params.B; }));
  r.beta = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return f.params.beta; }));
  r.a_opt_ci = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return alloc_a_opt(f.params); }));
  r.b_opt_ci = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return alloc_b_opt(f.params); }));
  r.r2_ci = percentile_interval(over_resamples(rs, [](const ChinchillaFit& f) { return f.r2; }));
  r.resamples_ok = static_cast<int>(std::count_if(rs.begin(), rs.end(), [](const ChinchillaFit& f) { return f.ok; }));
  return r;
}

const ArchitectureFits& find_arch(const ScalingAnalysis& a, const std::string& name) {
  for (const ArchitectureFits& f : a.archs)
    if (f.arch == name) return f;
  throw_internal_error("unknown architecture ", name);
}

std::vector<double> paired(const std::vector<double>& x, const std::vector<double>& y, double (*op)(double, double)) {
  std::vector<double> out(std::min(x.size(), y.size()));
  for (size_t b = 0; b < out.size(); ++b) out[b] = op(x[b], y[b]);
  return out;
}

double ratio_or_nan(double num, double den) {
  if (std::isinf(num) && std::isinf(den)) return kNaN;  // both unreachable: no factor
  return num / den;
}

// Number formatting: %.4g for parameters, fixed decimals where the tables want them.
std::string fmt(double v, const char* format = "%.4g") {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string fmt_ci(const Interval& iv, const char* format = "%.4g") {
  if (iv.count == 0) return "";
  return "[" + fmt(iv.low, format) + ", " + fmt(iv.high, format) + "]";
}

std::string csv_num(double v) {
  if (std::isnan(v)) return "";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

nlohmann::json num_json(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
nlohmann::json ci_json(const Interval& iv) {
  if (iv.count == 0) return nullptr;
  return nlohmann::json::array({num_json(iv.low), num_json(iv.high)});
}

std::string file_safe(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return s;
}

}  // namespace

ScalingTables scaling_tables(const ScalingAnalysis& analysis) {
  ScalingTables t;
  for (const ArchitectureFits& a : analysis.archs) {
    t.parameters.push_back(parameter_row(a.arch, "free", a.free));
    if (a.fixed) t.parameters.push_back(parameter_row(a.arch, "fixed", *a.fixed));
  }
  const ArchitectureFits& ref = find_arch(analysis, analysis.reference);
  for (double c : analysis.options.flops) {
    const auto loss_at = [c](const ChinchillaFit& f) { return compute_optimal(f.params, c).loss; };
    const std::vector<double> ref_losses = over_resamples(ref.free.resamples, loss_at);
    const double ref_loss = compute_optimal(ref.free.fit.params, c).loss;
    for (const ArchitectureFits& a : analysis.archs) {
      ComputeRow r;
      r.flops = c;
      r.arch = a.arch;
      r.optimum = compute_optimal(a.free.fit.params, c);
      const std::vector<double> losses = over_resamples(a.free.resamples, loss_at);
      r.loss_ci = percentile_interval(losses);
      r.delta = r.optimum.loss - ref_loss;
      r.delta_ci = percentile_interval(paired(losses, ref_losses, [](double x, double y) { return x - y; }));
      t.compute.push_back(r);
    }
  }
  const double target = analysis.target_loss;
  for (double n : analysis.options.savings_n) {
    const auto tokens_at = [n, target](const ChinchillaFit& f) { return tokens_needed(f.params, n, target); };
    const std::vector<double> ref_tokens = over_resamples(ref.free.resamples, tokens_at);
    const double ref_d = tokens_needed(ref.free.fit.params, n, target);
    for (const ArchitectureFits& a : analysis.archs) {
      SavingsRow r;
      r.N = n;
      r.arch = a.arch;
      r.tokens = tokens_needed(a.free.fit.params, n, target);
      const std::vector<double> tokens = over_resamples(a.free.resamples, tokens_at);
      r.tokens_ci = percentile_interval(tokens);
      r.savings = ratio_or_nan(ref_d, r.tokens);
      r.savings_ci = percentile_interval(paired(ref_tokens, tokens, ratio_or_nan));
      t.savings.push_back(r);
    }
  }
  return t;
}

nlohmann::json scaling_options_json(const ScalingOptions& o) {
  nlohmann::json j;
  j["weights"] = fit_weights_name(o.fit.weights);
  j["grid"] = o.fit.grid == "olmo" ? "olmo:" + std::to_string(o.fit.grid_size) : o.fit.grid;
  j["bounds"] = o.fit.bounds;
  j["huber_delta"] = o.fit.huber_delta;
  j["fixed_exponents"] = o.fixed_exponent ? nlohmann::json(*o.fixed_exponent) : nlohmann::json(nullptr);
  j["bootstrap"] = o.bootstrap;
  j["seed"] = o.seed;
  j["flops"] = o.flops;
  j["savings_n"] = o.savings_n;
  j["target_loss"] = o.target_loss ? nlohmann::json(*o.target_loss) : nlohmann::json(nullptr);
  j["reference"] = o.reference.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.reference);
  return j;
}

namespace {

nlohmann::json parameter_json(const ParameterRow& r, const ChinchillaFit& fit, size_t points) {
  nlohmann::json j;
  j["E"] = r.params.E;
  j["A"] = r.params.A;
  j["alpha"] = r.params.alpha;
  j["B"] = r.params.B;
  j["beta"] = r.params.beta;
  j["a_opt"] = r.a_opt;
  j["b_opt"] = r.b_opt;
  j["r2"] = num_json(r.r2);
  j["G"] = num_json(alloc_G(r.params));
  j["objective"] = r.objective;
  j["points"] = points;
  j["starts"] = fit.starts;
  j["starts_finite"] = fit.starts_finite;
  j["resamples_ok"] = r.resamples_ok;
  j["ci"] = {{"E", ci_json(r.E)},         {"A", ci_json(r.A)},         {"alpha", ci_json(r.alpha)},
             {"B", ci_json(r.B)},         {"beta", ci_json(r.beta)},   {"a_opt", ci_json(r.a_opt_ci)},
             {"b_opt", ci_json(r.b_opt_ci)}, {"r2", ci_json(r.r2_ci)}};
  return j;
}

}  // namespace

nlohmann::json scaling_fit_json(const ScalingAnalysis& analysis, const ScalingTables& t) {
  nlohmann::json j;
  j["format"] = "hybridlm-scaling-fit";
  j["model"] = "L(N,D) = E + A/N^alpha + B/D^beta";
  j["options"] = scaling_options_json(analysis.options);
  j["reference"] = analysis.reference;
  j["target_loss"] = analysis.target_loss;
  j["ci_level"] = 0.95;
  nlohmann::json archs = nlohmann::json::object();
  for (const ParameterRow& r : t.parameters) {
    const ArchitectureFits& a = find_arch(analysis, r.arch);
    if (r.variant == "free") {
      archs[r.arch] = parameter_json(r, a.free.fit, a.points.size());
    } else {
      archs[r.arch]["fixed_exponent"] = parameter_json(r, a.fixed->fit, a.points.size());
    }
  }
  j["architectures"] = archs;
  nlohmann::json compute = nlohmann::json::array();
  for (const ComputeRow& r : t.compute)
    compute.push_back({{"flops", r.flops}, {"arch", r.arch}, {"N", num_json(r.optimum.N)}, {"D", num_json(r.optimum.D)},
                       {"loss", num_json(r.optimum.loss)}, {"loss_ci", ci_json(r.loss_ci)},
                       {"delta", num_json(r.delta)}, {"delta_ci", ci_json(r.delta_ci)}});
  j["compute_optimal"] = compute;
  nlohmann::json savings = nlohmann::json::array();
  for (const SavingsRow& r : t.savings)
    savings.push_back({{"N", r.N}, {"arch", r.arch}, {"tokens", num_json(r.tokens)}, {"tokens_ci", ci_json(r.tokens_ci)},
                       {"savings", num_json(r.savings)}, {"savings_ci", ci_json(r.savings_ci)}});
  j["token_savings"] = savings;
  return j;
}

std::string parameters_csv(const ScalingTables& t) {
  std::ostringstream os;
  os << "arch,variant,E,E_low,E_high,A,A_low,A_high,alpha,alpha_low,alpha_high,B,B_low,B_high,beta,beta_low,beta_high,"
        "a_opt,a_opt_low,a_opt_high,b_opt,b_opt_low,b_opt_high,r2,r2_low,r2_high,objective,resamples_ok\n";
  const auto cell = [&](double v, const Interval& iv) {
    os << ',' << csv_num(v) << ',' << (iv.count ? csv_num(iv.low) : "") << ',' << (iv.count ? csv_num(iv.high) : "");
  };
  for (const ParameterRow& r : t.parameters) {
    os << r.arch << ',' << r.variant;
    cell(r.params.E, r.E);
    cell(r.params.A, r.A);
    cell(r.params.alpha, r.alpha);
    cell(r.params.B, r.B);
    cell(r.params.beta, r.beta);
    cell(r.a_opt, r.a_opt_ci);
    cell(r.b_opt, r.b_opt_ci);
    cell(r.r2, r.r2_ci);
    os << ',' << csv_num(r.objective) << ',' << r.resamples_ok << '\n';
  }
  return os.str();
}

std::string parameters_markdown(const ScalingTables& t) {
  std::ostringstream os;
  os << "| Architecture | Fit | E | A | α | B | β | a_opt | b_opt | R² |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
  const auto cell = [&](double v, const Interval& iv, const char* f) {
    os << " " << fmt(v, f) << (iv.count ? " " + fmt_ci(iv, f) : "") << " |";
  };
  for (const ParameterRow& r : t.parameters) {
    os << "| " << r.arch << " | " << (r.variant == "free" ? "free" : "fixed α=β") << " |";
    cell(r.params.E, r.E, "%.3f");
    cell(r.params.A, r.A, "%.4g");
    cell(r.params.alpha, r.alpha, "%.3f");
    cell(r.params.B, r.B, "%.4g");
    cell(r.params.beta, r.beta, "%.3f");
    cell(r.a_opt, r.a_opt_ci, "%.3f");
    cell(r.b_opt, r.b_opt_ci, "%.3f");
    cell(r.r2, r.r2_ci, "%.4f");
    os << "\n";
  }
  os << "\nIntervals: 95 % bootstrap percentiles (points resampled with replacement, each refit with the same grid).\n";
  return os.str();
}

std::string compute_csv(const ScalingTables& t) {
  std::ostringstream os;
  os << "flops,arch,N,D,loss,loss_low,loss_high,delta,delta_low,delta_high\n";
  for (const ComputeRow& r : t.compute)
    os << csv_num(r.flops) << ',' << r.arch << ',' << csv_num(r.optimum.N) << ',' << csv_num(r.optimum.D) << ','
       << csv_num(r.optimum.loss) << ',' << (r.loss_ci.count ? csv_num(r.loss_ci.low) : "") << ','
       << (r.loss_ci.count ? csv_num(r.loss_ci.high) : "") << ',' << csv_num(r.delta) << ','
       << (r.delta_ci.count ? csv_num(r.delta_ci.low) : "") << ',' << (r.delta_ci.count ? csv_num(r.delta_ci.high) : "")
       << '\n';
  return os.str();
}

std::string compute_markdown(const ScalingAnalysis& analysis, const ScalingTables& t) {
  std::ostringstream os;
  os << "| FLOPs |";
  for (const ArchitectureFits& a : analysis.archs) os << " " << a.arch << " N* (B) | D* (B) | Loss |";
  os << "\n|---|";
  for (size_t i = 0; i < analysis.archs.size(); ++i) os << "---|---|---|";
  os << "\n";
  for (double c : analysis.options.flops) {
    os << "| " << fmt(c, "%.3g") << " |";
    for (const ComputeRow& r : t.compute) {
      if (r.flops != c) continue;
      os << " " << fmt(r.optimum.N / 1e9, "%.3g") << " | " << fmt(r.optimum.D / 1e9, "%.3g") << " | "
         << fmt(r.optimum.loss, "%.3f");
      if (r.loss_ci.count) os << " " << fmt_ci(r.loss_ci, "%.3f");
      if (r.arch != analysis.reference && r.delta_ci.count) os << " Δ " << fmt_ci(r.delta_ci, "%+.3f");
      os << " |";
    }
    os << "\n";
  }
  os << "\nN* in billions of parameters, D* in billions of tokens (C = 6ND); loss [95 % CI]; Δ [CI]: paired loss "
        "difference to "
     << analysis.reference << ".\n";
  return os.str();
}

std::string savings_csv(const ScalingTables& t) {
  std::ostringstream os;
  os << "N,arch,tokens,tokens_low,tokens_high,savings,savings_low,savings_high\n";
  for (const SavingsRow& r : t.savings)
    os << csv_num(r.N) << ',' << r.arch << ',' << csv_num(r.tokens) << ','
       << (r.tokens_ci.count ? csv_num(r.tokens_ci.low) : "") << ','
       << (r.tokens_ci.count ? csv_num(r.tokens_ci.high) : "") << ',' << csv_num(r.savings) << ','
       << (r.savings_ci.count ? csv_num(r.savings_ci.low) : "") << ','
       << (r.savings_ci.count ? csv_num(r.savings_ci.high) : "") << '\n';
  return os.str();
}

std::string savings_markdown(const ScalingAnalysis& analysis, const ScalingTables& t) {
  std::ostringstream os;
  os << "| N | " << analysis.reference << " D |";
  for (const ArchitectureFits& a : analysis.archs)
    if (a.arch != analysis.reference) os << " " << a.arch << " D | Savings |";
  os << "\n|---|---|";
  for (size_t i = 1; i < analysis.archs.size(); ++i) os << "---|---|";
  os << "\n";
  for (double n : analysis.options.savings_n) {
    os << "| " << fmt(n / 1e9, "%.3g") << "B |";
    for (const SavingsRow& r : t.savings)
      if (r.N == n && r.arch == analysis.reference) os << " " << fmt(r.tokens / 1e9, "%.1f") << "B |";
    for (const SavingsRow& r : t.savings) {
      if (r.N != n || r.arch == analysis.reference) continue;
      os << " " << fmt(r.tokens / 1e9, "%.1f") << "B | " << fmt(r.savings, "%.2f") << "×";
      if (r.savings_ci.count) os << " " << fmt_ci(r.savings_ci, "%.2f");
      os << " |";
    }
    os << "\n";
  }
  os << "\nTarget loss " << fmt(analysis.target_loss, "%.4f")
     << "; D in billions of tokens needed at N to reach it (inf: unreachable at that N); savings = D_"
     << analysis.reference << " / D_arch (> 1: fewer tokens than " << analysis.reference
     << "), 95 % paired bootstrap CI.\n";
  return os.str();
}

namespace {

void write_text(const std::filesystem::path& path, const std::string& text, std::vector<std::filesystem::path>& out) {
  std::ofstream f(path, std::ios::binary);
  HLM_CHECK_INPUT(f.good(), "--out: cannot write ", path.string());
  f << text;
  HLM_CHECK_INPUT(f.good(), "--out: failed writing ", path.string());
  out.push_back(path);
}

// Observed points as one scatter series (NaN gaps between points keep them unconnected).
ChartSeries scatter(const std::string& label, const std::vector<std::pair<double, double>>& xy) {
  ChartSeries s;
  s.label = label;
  for (const auto& [x, y] : xy) {
    s.x.push_back(x), s.y.push_back(y);
    s.x.push_back(kNaN), s.y.push_back(kNaN);
  }
  return s;
}

std::string frontier_svg(const ScalingAnalysis& analysis) {
  LineChart chart;
  chart.title = "Loss vs compute: observed points and the fitted compute-optimal frontier";
  chart.x_label = "log10 training FLOPs (6ND)";
  chart.y_label = "loss (nats/token)";
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const ArchitectureFits& a : analysis.archs)
    for (const ScalingPoint& p : a.points) {
      lo = std::min(lo, std::log10(6 * p.N * p.D));
      hi = std::max(hi, std::log10(6 * p.N * p.D));
    }
  hi += 1.0;  // one decade of extrapolation
  for (const ArchitectureFits& a : analysis.archs) {
    std::vector<std::pair<double, double>> xy;
    for (const ScalingPoint& p : a.points) xy.emplace_back(std::log10(6 * p.N * p.D), p.loss);
    chart.series.push_back(scatter(a.arch + " observed", xy));
    ChartSeries line;
    line.label = a.arch + " frontier";
    for (int i = 0; i <= 40; ++i) {
      const double lc = lo + (hi - lo) * i / 40.0;
      line.x.push_back(lc);
      line.y.push_back(compute_optimal(a.free.fit.params, std::pow(10.0, lc)).loss);
    }
    chart.series.push_back(line);
  }
  return svg_line_chart(chart);
}

std::string arch_fit_svg(const ArchitectureFits& a) {
  LineChart chart;
  chart.title = a.arch + ": observed losses and the fitted L(N, D) per model size";
  chart.x_label = "log10 tokens D";
  chart.y_label = "loss (nats/token)";
  std::vector<std::pair<double, double>> xy;
  std::set<double> sizes;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const ScalingPoint& p : a.points) {
    xy.emplace_back(std::log10(p.D), p.loss);
    sizes.insert(p.N);
    lo = std::min(lo, std::log10(p.D)), hi = std::max(hi, std::log10(p.D));
  }
  chart.series.push_back(scatter("observed", xy));
  if (sizes.size() > 8) {  // a legend of at most 8 curves: every k-th size
    std::set<double> kept;
    size_t k = (sizes.size() + 7) / 8, i = 0;
    for (double n : sizes)
      if (i++ % k == 0) kept.insert(n);
    sizes = kept;
  }
  for (double n : sizes) {
    ChartSeries line;
    line.label = "fit N=" + fmt(n, "%.3g");
    for (int i = 0; i <= 30; ++i) {
      const double ld = lo + (hi - lo) * i / 30.0;
      line.x.push_back(ld);
      line.y.push_back(a.free.fit.params.predict(n, std::pow(10.0, ld)));
    }
    chart.series.push_back(line);
  }
  return svg_line_chart(chart);
}

}  // namespace

std::vector<std::filesystem::path> write_scaling_outputs(const ScalingAnalysis& analysis,
                                                         const std::filesystem::path& out) {
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  HLM_CHECK_INPUT(!ec, "--out: cannot create ", out.string(), ": ", ec.message());
  const ScalingTables t = scaling_tables(analysis);
  std::vector<std::filesystem::path> written;
  write_text(out / "fit.json", scaling_fit_json(analysis, t).dump(2) + "\n", written);
  write_text(out / "parameters.csv", parameters_csv(t), written);
  write_text(out / "parameters.md", parameters_markdown(t), written);
  write_text(out / "compute_optimal.csv", compute_csv(t), written);
  write_text(out / "compute_optimal.md", compute_markdown(analysis, t), written);
  write_text(out / "token_savings.csv", savings_csv(t), written);
  write_text(out / "token_savings.md", savings_markdown(analysis, t), written);
  write_text(out / "frontier.svg", frontier_svg(analysis), written);
  for (const ArchitectureFits& a : analysis.archs)
    write_text(out / ("fits_" + file_safe(a.arch) + ".svg"), arch_fit_svg(a), written);
  return written;
}

}  // namespace hlm
