// Replicate spreads and findings (study_replicates.h).
#include "study/study_replicates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace hlm {
namespace {

using json = nlohmann::json;

std::string num(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string range_text(const SeedSpread& s, int decimals) {
  if (s.n == 0) return "none";
  return num(s.mean, decimals) + " [" + num(s.min, decimals) + ", " + num(s.max, decimals) + "]";
}

json spread_json(const SeedSpread& s) {
  const auto v = [&](double x) { return s.n ? json(x) : json(nullptr); };
  return {{"mean", v(s.mean)}, {"min", v(s.min)}, {"max", v(s.max)}, {"n", s.n}};
}

std::string full(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

SeedSpread seed_spread(const std::vector<double>& values) {
  SeedSpread s;
  s.mean = s.min = s.max = NAN;
  double sum = 0.0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    s.min = s.n ? std::min(s.min, v) : v;
    s.max = s.n ? std::max(s.max, v) : v;
    sum += v;
    ++s.n;
  }
  if (s.n) s.mean = sum / s.n;
  return s;
}

bool spreads_disjoint(const SeedSpread& a, const SeedSpread& b) {
  return a.n > 0 && b.n > 0 && (a.max < b.min || b.max < a.min);
}

const char* replicate_metric_key(ReplicateMetric m) {
  switch (m) {
    case ReplicateMetric::R: return "R";
    case ReplicateMetric::DeltaBar: return "delta_bar";
    case ReplicateMetric::MeanKl: return "mean_kl";
    case ReplicateMetric::ReachShare: return "reach_share";
  }
  return "";
}

const char* replicate_metric_title(ReplicateMetric m) {
  switch (m) {
    case ReplicateMetric::R: return "R (geometric mean of per-language D_KL ratios to the baseline)";
    case ReplicateMetric::DeltaBar: return "δ̄ (mean L_LM gap to the teacher, nats)";
    case ReplicateMetric::MeanKl: return "mean test D_KL (nats/token)";
    case ReplicateMetric::ReachShare: return "tokens to reach the baseline's final gap (share of training)";
  }
  return "";
}

std::vector<double> replicate_values(const StudyReplicated& p, ReplicateMetric m) {
  std::vector<double> out;
  for (const StudySeedResult& s : p.seeds) {
    switch (m) {
      case ReplicateMetric::R: out.push_back(s.relative_kl); break;
      case ReplicateMetric::DeltaBar: out.push_back(s.delta_bar); break;
      case ReplicateMetric::MeanKl: out.push_back(s.mean_kl); break;
      case ReplicateMetric::ReachShare:
        out.push_back(s.reach_tokens && s.total_tokens > 0 ? *s.reach_tokens / static_cast<double>(s.total_tokens)
                                                           : NAN);
        break;
    }
  }
  return out;
}

std::vector<ReplicateFinding> replicate_findings(const StudyReplicates& r) {
  std::vector<ReplicateFinding> out;
  if (r.placements.empty()) return out;
  const StudyReplicated& base = r.placements.front();
  for (size_t p = 1; p < r.placements.size(); ++p) {
    const StudyReplicated& pl = r.placements[p];
    for (ReplicateMetric m : kReplicateMetrics) {
      ReplicateFinding f;
      f.placement = pl.label;
      f.metric = replicate_metric_key(m);
      f.spread = seed_spread(replicate_values(pl, m));
      f.baseline = seed_spread(replicate_values(base, m));
      const int decimals = m == ReplicateMetric::MeanKl ? 4 : 3;
      std::ostringstream t;
      t << pl.label << ", " << f.metric << " " << range_text(f.spread, decimals) << " over " << pl.seeds.size()
        << " seeds";
      if (m == ReplicateMetric::R) {
        f.exceeds = f.spread.n == static_cast<int>(pl.seeds.size()) && (f.spread.max < 1.0 || f.spread.min > 1.0);
        t << (f.exceeds ? (f.spread.max < 1.0 ? ": below 1 in every seed, closer to the teacher than the baseline "
                                                "beyond the seed-to-seed spread"
                                              : ": above 1 in every seed, further from the teacher than the baseline "
                                                "beyond the seed-to-seed spread")
                        : ": the range includes 1, within the seed-to-seed spread");
      } else {
        // Every seed must have a value (a target reached in every seed) for a range to stand for the placement.
        const bool complete = f.spread.n == static_cast<int>(pl.seeds.size()) &&
                              f.baseline.n == static_cast<int>(base.seeds.size());
        f.exceeds = complete && spreads_disjoint(f.spread, f.baseline);
        t << " vs " << base.label << " " << range_text(f.baseline, decimals)
          << (f.exceeds ? (f.spread.max < f.baseline.min ? ": lower, the ranges do not overlap (exceeds the spread)"
                                                         : ": higher, the ranges do not overlap (exceeds the spread)")
                        : complete ? ": the ranges overlap, within the seed-to-seed spread"
                                   : ": not every seed has a value, no claim");
      }
      f.text = t.str();
      out.push_back(std::move(f));
    }
  }
  for (size_t p = 1; p < r.placements.size(); ++p) {
    const StudyReplicated& pl = r.placements[p];
    for (size_t l = 0; l < r.languages.size(); ++l) {
      if (r.excluded[l]) continue;
      std::vector<double> a, b;
      for (const StudySeedResult& s : pl.seeds) a.push_back(s.kl.at(l));
      for (const StudySeedResult& s : base.seeds) b.push_back(s.kl.at(l));
      ReplicateFinding f;
      f.placement = pl.label;
      f.metric = "kl:" + r.languages[l];
      f.spread = seed_spread(a);
      f.baseline = seed_spread(b);
      f.exceeds = spreads_disjoint(f.spread, f.baseline);
      if (!f.exceeds) continue;
      f.text = pl.label + ", D_KL of " + r.languages[l] + " " + range_text(f.spread, 4) + " vs " + base.label + " " +
               range_text(f.baseline, 4) + (f.spread.max < f.baseline.min ? ": lower" : ": higher") +
               " beyond the seed-to-seed spread";
      out.push_back(std::move(f));
    }
  }
  return out;
}

json replicates_to_json(const StudyReplicates& r) {
  json j = {{"data_seeds", r.data_seeds}, {"languages", r.languages}, {"excluded", r.excluded},
            {"placements", json::array()}, {"findings", json::array()}};
  for (const StudyReplicated& p : r.placements) {
    json pj = {{"label", p.label}, {"same_as", p.same_as}, {"seeds", json::array()}};
    for (const StudySeedResult& s : p.seeds)
      pj["seeds"].push_back({{"seed", s.seed},
                             {"R", s.relative_kl},
                             {"delta_bar", s.delta_bar},
                             {"mean_kl", s.mean_kl},
                             {"reach_tokens", s.reach_tokens ? json(*s.reach_tokens) : json(nullptr)},
                             {"crossing_tokens", s.crossing_tokens ? json(*s.crossing_tokens) : json(nullptr)},
                             {"total_tokens", s.total_tokens},
                             {"kl", s.kl},
                             {"ce_gap", s.ce_gap}});
    for (ReplicateMetric m : kReplicateMetrics) pj[replicate_metric_key(m)] = spread_json(seed_spread(replicate_values(p, m)));
    j["placements"].push_back(std::move(pj));
  }
  for (const ReplicateFinding& f : replicate_findings(r))
    j["findings"].push_back({{"placement", f.placement},
                             {"metric", f.metric},
                             {"spread", spread_json(f.spread)},
                             {"baseline", spread_json(f.baseline)},
                             {"exceeds_spread", f.exceeds},
                             {"text", f.text}});
  return j;
}

std::string replicates_csv(const StudyReplicates& r) {
  std::ostringstream os;
  os << "placement,seed,metric,language,value\n";
  for (const StudyReplicated& p : r.placements)
    for (const StudySeedResult& s : p.seeds) {
      const auto row = [&](const std::string& metric, const std::string& lang, std::optional<double> v) {
        os << p.label << ',' << s.seed << ',' << metric << ',' << lang << ',' << (v ? full(*v) : "") << '\n';
      };
      row("R", "", s.relative_kl);
      row("delta_bar", "", s.delta_bar);
      row("mean_kl", "", s.mean_kl);
      row("reach_tokens", "", s.reach_tokens);
      row("crossing_tokens", "", s.crossing_tokens);
      row("total_tokens", "", static_cast<double>(s.total_tokens));
      for (size_t l = 0; l < r.languages.size(); ++l) {
        row("kl", r.languages[l], s.kl.at(l));
        row("ce_gap", r.languages[l], s.ce_gap.at(l));
      }
    }
  return os.str();
}

}  // namespace hlm
