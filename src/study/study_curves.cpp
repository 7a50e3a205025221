// Validation curves and the Figure 6 crossing (study_curves.h).
#include "study/study_curves.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hlm {

std::vector<ValidationPoint> study_read_curve(const std::filesystem::path& path, const std::set<std::string>& excluded) {
  std::ifstream in(path);
  HLM_CHECK_INPUT(in.good(), path.string(), ": cannot read the run's metrics");
  std::vector<ValidationPoint> curve;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw_input_error(path.string(), ":", line_no, ": not JSON");
    }
    if (j.value("type", "") != "valid" || !j.contains("kl") || !j.contains("ce_gap")) continue;
    ValidationPoint p;
    p.tokens = j.value("tokens", int64_t{0});
    double kl = 0.0, gap = 0.0;
    int n = 0;
    for (const auto& [lang, value] : j["kl"].items()) {
      if (excluded.count(lang) || !j["ce_gap"].contains(lang)) continue;
      kl += value.get<double>();
      gap += j["ce_gap"][lang].get<double>();
      ++n;
    }
    HLM_CHECK_INPUT(n > 0, path.string(), ":", line_no, ": no language left after the exclusions");
    p.mean_kl = kl / n;
    p.mean_ce_gap = gap / n;
    curve.push_back(p);
  }
  HLM_CHECK_INPUT(!curve.empty(), path.string(), ": no validation records with KL and L_LM gap (not a distill run?)");
  return curve;
}

StudyReach study_reach(const std::vector<ValidationPoint>& curve, double target) {
  StudyReach r;
  for (size_t i = 0; i < curve.size() && !r.crossing; ++i) {
    if (!(curve[i].mean_ce_gap <= target)) continue;
    if (i == 0) {
      r.crossing = static_cast<double>(curve[0].tokens);
      break;
    }
    const ValidationPoint &a = curve[i - 1], &b = curve[i];
    // a is above the target and b at or below it, so b.gap < a.gap and the fraction lies in (0, 1].
    const double t = (a.mean_ce_gap - target) / (a.mean_ce_gap - b.mean_ce_gap);
    r.crossing = static_cast<double>(a.tokens) + t * static_cast<double>(b.tokens - a.tokens);
  }
  // The point after the last one above the target (a NaN gap counts as above).
  size_t from = 0;
  for (size_t i = 0; i < curve.size(); ++i)
    if (!(curve[i].mean_ce_gap <= target)) from = i + 1;
  if (from < curve.size()) r.reach = static_cast<double>(curve[from].tokens);
  return r;
}

}  // namespace hlm
