// MoE routing divergence: pooled router distributions and their Jensen-Shannon divergence (contract in routing.h).
#include "analysis/routing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analysis/sentence_states.h"
#include "analysis/svg_chart.h"
#include "core/error.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

constexpr double kMixtureFloor = 1e-10;  // M clamped below (the reference code's torch.clamp)
constexpr double kEntropyEps = 1e-10;    // inside the entropy's log
constexpr double kNormFloor = 1e-6;      // lower bound of the entropy normaliser

double kl_to_mixture(std::span<const double> p, const std::vector<double>& m) {
  double kl = 0.0;
  for (size_t e = 0; e < p.size(); ++e)
    if (p[e] > 0.0) kl += p[e] * std::log(p[e] / m[e]);
  return kl;
}

double entropy(std::span<const double> p) {
  double h = 0.0;
  for (double v : p) h -= v * std::log(v + kEntropyEps);
  return h;
}

std::string format_double(double v) {
  if (!std::isfinite(v)) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.8f", v);
  return buf;
}

}  // namespace

double js_divergence(std::span<const double> p, std::span<const double> q) {
  HLM_CHECK_INPUT(p.size() == q.size() && !p.empty(), "jsd: distributions of ", p.size(), " and ", q.size(),
                  " experts");
  std::vector<double> m(p.size());
  for (size_t e = 0; e < p.size(); ++e) m[e] = std::max(0.5 * (p[e] + q[e]), kMixtureFloor);
  return 0.5 * kl_to_mixture(p, m) + 0.5 * kl_to_mixture(q, m);
}

double entropy_normalised_jsd(std::span<const double> p, std::span<const double> q) {
  const double bound = std::log(static_cast<double>(p.size())) - 0.5 * (entropy(p) + entropy(q));
  return js_divergence(p, q) / std::max(bound, kNormFloor);
}

std::vector<double> pooled_routing(const float* probs, const std::vector<int64_t>& rows, const MoeDims& dims,
                                   RoutingPool pool) {
  const int64_t E = dims.experts, k = dims.top_k;
  std::vector<double> out(static_cast<size_t>(E), 0.0);
  std::vector<int32_t> expert(static_cast<size_t>(k));
  std::vector<float> weight(static_cast<size_t>(k));
  for (const int64_t t : rows) {
    const float* p = probs + t * E;
    if (pool == RoutingPool::Softmax) {
      for (int64_t e = 0; e < E; ++e) out[e] += p[e];
    } else {
      moe_select(p, dims, expert.data(), weight.data());
      for (int64_t j = 0; j < k; ++j) out[expert[j]] += weight[j];
    }
  }
  for (double& v : out) v /= static_cast<double>(std::max<size_t>(rows.size(), 1));
  return out;
}

RoutingResult routing_divergence(Model& model, const Tokenizer& tokenizer, const ParallelSet& set,
                                 const RoutingSettings& s, const std::function<void(const std::string&)>& progress) {
  const ModelConfig& c = model.config();
  RoutingResult r;
  r.settings = s;
  for (int i = 0; i < static_cast<int>(c.num_hidden_layers); ++i)
    if (c.moe_layer(i)) r.layers.push_back(i);
  HLM_CHECK_INPUT(!r.layers.empty(), "routing: model_type ", c.model_type, " has no routed-expert (MoE) layer");
  HLM_CHECK_INPUT(!s.langs.empty(), "routing: no language to compare with ", s.anchor);
  for (const std::string& lang : s.langs) {
    HLM_CHECK_INPUT(lang != s.anchor, "routing: --langs holds the anchor language ", lang);
    HLM_CHECK_INPUT(std::find(set.langs.begin(), set.langs.end(), lang) != set.langs.end(), "routing: language '",
                    lang, "' is not in ", set.path);
  }
  const MoeDims dims = moe_dims(c);
  r.experts = dims.experts;
  const size_t NL = s.langs.size(), NM = r.layers.size();
  r.jsd.assign(NM, std::vector<double>(NL, 0.0));
  r.jsd_normalised = r.jsd;
  r.pairs.assign(NL, 0);
  r.skipped_pairs.assign(NL, 0);
  std::map<int, size_t> layer_index;
  for (size_t m = 0; m < NM; ++m) layer_index[r.layers[m]] = m;

  for (const ParallelUnit& unit : set.units) {
    const auto anchor_text = unit.text.find(s.anchor);
    if (anchor_text == unit.text.end()) continue;
    // The languages of this unit still wanting pairs.
    std::vector<size_t> langs;
    for (size_t l = 0; l < NL; ++l)
      if (unit.text.count(s.langs[l]) && (s.max_pairs == 0 || r.pairs[l] + r.skipped_pairs[l] < s.max_pairs))
        langs.push_back(l);
    if (langs.empty()) continue;
    std::vector<TokenizedSentence> sentences{tokenize_sentence(tokenizer, anchor_text->second, s.keep_special)};
    for (size_t l : langs) sentences.push_back(tokenize_sentence(tokenizer, unit.text.at(s.langs[l]), s.keep_special));
    TokenBatch batch;
    std::vector<int64_t> start;  // first row of each sentence in the packed batch
    int64_t rows = 0;
    std::vector<size_t> in_batch;  // sentence index of each packed sequence (empty sentences are left out)
    for (size_t i = 0; i < sentences.size(); ++i) {
      start.push_back(rows);
      if (sentences[i].ids.empty()) continue;
      batch.add_sequence(sentences[i].ids);
      rows += static_cast<int64_t>(sentences[i].ids.size());
      in_batch.push_back(i);
    }
    // pooled[m][i]: sentence i's distribution at MoE layer m (empty when it has no kept token).
    std::vector<std::vector<std::vector<double>>> pooled(NM, std::vector<std::vector<double>>(sentences.size()));
    if (!in_batch.empty()) {
      std::vector<float> probs;
      ForwardOptions options;
      int current = -1;
      const auto pool_layer = [&] {
        if (current < 0) return;
        const size_t m = layer_index.at(current);
        for (size_t i : in_batch) {
          if (sentences[i].kept.empty()) continue;
          std::vector<int64_t> kept_rows;
          for (int64_t pos : sentences[i].kept) kept_rows.push_back(start[i] + pos);
          pooled[m][i] = pooled_routing(probs.data(), kept_rows, dims, s.pool);
        }
      };
      // The hook hands out one buffer; the previous MoE layer's probabilities are pooled before it is reused.
      options.router_probs = [&](int layer, int64_t T, int64_t E) {
        pool_layer();
        current = layer;
        probs.assign(static_cast<size_t>(T * E), 0.0f);
        return probs.data();
      };
      model.forward(batch, options);
      pool_layer();
      ++r.units;
    }
    for (size_t j = 0; j < langs.size(); ++j) {
      const size_t l = langs[j], i = j + 1;
      if (pooled[0][0].empty() || pooled[0][i].empty()) {
        ++r.skipped_pairs[l];
        continue;
      }
      for (size_t m = 0; m < NM; ++m) {
        r.jsd[m][l] += js_divergence(pooled[m][0], pooled[m][i]);
        r.jsd_normalised[m][l] += entropy_normalised_jsd(pooled[m][0], pooled[m][i]);
      }
      ++r.pairs[l];
    }
    if (progress && r.units % 50 == 0 && r.units > 0) progress("routing: " + std::to_string(r.units) + " units");
  }
  for (size_t l = 0; l < NL; ++l) {
    HLM_CHECK_INPUT(r.pairs[l] > 0, "routing: no usable ", s.anchor, "-", s.langs[l], " pair in ", set.path, " (",
                    r.skipped_pairs[l], " skipped: no kept tokens)");
    for (size_t m = 0; m < NM; ++m) {
      r.jsd[m][l] /= static_cast<double>(r.pairs[l]);
      r.jsd_normalised[m][l] /= static_cast<double>(r.pairs[l]);
    }
  }
  return r;
}

void routing_write_outputs(const std::filesystem::path& dir, const RoutingResult& r, const ModelConfig& config,
                           const std::vector<std::pair<std::string, std::string>>& meta) {
  std::filesystem::create_directories(dir);
  const RoutingSettings& s = r.settings;
  const size_t NL = s.langs.size();
  const auto mean_over_langs = [&](const std::vector<double>& row) {
    double sum = 0.0;
    for (double v : row) sum += v;
    return sum / static_cast<double>(NL);
  };
  std::ostringstream csv;
  csv << "layer,lang,jsd,jsd_normalised,pairs\n";
  for (size_t m = 0; m < r.layers.size(); ++m) {
    for (size_t l = 0; l < NL; ++l)
      csv << r.layers[m] << ',' << s.langs[l] << ',' << format_double(r.jsd[m][l]) << ','
          << format_double(r.jsd_normalised[m][l]) << ',' << r.pairs[l] << '\n';
    int64_t all_pairs = 0;
    for (int64_t n : r.pairs) all_pairs += n;
    csv << r.layers[m] << ",mean," << format_double(mean_over_langs(r.jsd[m])) << ','
        << format_double(mean_over_langs(r.jsd_normalised[m])) << ',' << all_pairs << '\n';
  }
  file_write_atomic(dir / "routing.csv", csv.str());

  nlohmann::ordered_json j;
  for (const auto& [key, value] : meta) j[key] = value;
  j["model_type"] = config.model_type;
  j["moe_layers"] = r.layers;
  j["experts"] = r.experts;
  j["experts_per_token"] = config.moe->num_experts_per_tok;
  j["norm_topk_prob"] = config.moe->norm_topk_prob;
  j["pool"] = s.pool == RoutingPool::TopK ? "topk" : "softmax";
  j["anchor"] = s.anchor;
  j["langs"] = s.langs;
  j["max_pairs"] = s.max_pairs;
  j["keep_special"] = s.keep_special;
  j["units"] = r.units;
  for (size_t l = 0; l < NL; ++l)
    j["counts"][s.langs[l]] = {{"pairs", r.pairs[l]}, {"skipped_pairs", r.skipped_pairs[l]}};
  file_write_atomic(dir / "settings.json", j.dump(2) + "\n");

  for (const bool normalised : {false, true}) {
    LineChart chart;
    chart.title = std::string(normalised ? "Entropy-normalised routing JSD" : "Routing JSD") + " vs " + s.anchor +
                  " (mean over parallel pairs)";
    chart.x_label = "layer";
    chart.y_label = normalised ? "JSD / (ln E - mean entropy)" : "JSD (nats)";
    chart.y_min = 0.0;
    std::vector<double> xs(r.layers.begin(), r.layers.end());
    for (size_t l = 0; l <= NL; ++l) {
      ChartSeries series{l < NL ? s.langs[l] : "mean", xs, {}};
      for (size_t m = 0; m < r.layers.size(); ++m) {
        const std::vector<double>& row = normalised ? r.jsd_normalised[m] : r.jsd[m];
        series.y.push_back(l < NL ? row[l] : mean_over_langs(row));
      }
      chart.series.push_back(std::move(series));
    }
    file_write_atomic(dir / (normalised ? "routing_jsd_normalised.svg" : "routing_jsd.svg"), svg_line_chart(chart));
  }
}

}  // namespace hlm
