// Attention locality per full-attention layer and language (locality.h).
#include "analysis/locality.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "analysis/svg_chart.h"
#include "core/error.h"
#include "layers/attention_layer.h"
#include "models/architecture.h"
#include "models/safetensors.h"
#include "ops/attention/attention_locality.h"

namespace hlm {

LocalityResult attention_locality(Model& model, const std::string& label, const Tokenizer& tokenizer,
                                  const ParallelSet& set, const LocalitySettings& s,
                                  const std::function<void(const std::string&)>& progress) {
  const ModelConfig& c = model.config();
  HLM_CHECK_INPUT(!s.windows.empty(), "locality: no windows");
  for (int64_t k : s.windows) HLM_CHECK_INPUT(k >= 1, "locality: windows must be at least 1, got ", k);
  HLM_CHECK_INPUT(s.max_units >= 0, "--max-units must not be negative");
  HLM_CHECK_INPUT(tokenizer.vocab_size() <= c.vocab_size, "tokenizer ", tokenizer.name(), " has ",
                  tokenizer.vocab_size(), " tokens but the model's vocabulary is ", c.vocab_size);
  LocalityResult r;
  r.model = label;
  r.num_layers = c.num_hidden_layers;
  r.windows = s.windows;
  r.langs = s.langs.empty() ? set.langs : s.langs;
  for (const std::string& lang : r.langs)
    HLM_CHECK_INPUT(std::find(set.langs.begin(), set.langs.end(), lang) != set.langs.end(), set.path,
                    ": no text in language ", lang);
  // Full-attention layers only: a sliding_attention layer's mass lies in its window by construction (OLMo-3).
  for (size_t i = 0; i < c.layer_kinds.size(); ++i)
    if (c.layer_kinds[i] == LayerKind::FullAttention && c.attention_window(static_cast<int64_t>(i)) == 0)
      r.layers.push_back(static_cast<int>(i));
  HLM_CHECK_INPUT(!r.layers.empty(), label, ": the model has no full-attention layer");
  const size_t NW = s.windows.size(), NL = r.langs.size();
  r.share.assign(r.layers.size(), std::vector<std::vector<double>>(NL, std::vector<double>(NW, 0.0)));
  r.sentences.assign(NL, 0);
  r.queries.assign(NL, 0);

  const AttentionShape base{0, c.num_attention_heads, c.num_key_value_heads, c.head_dim};
  const double scale = architecture_spec(c.architecture).hyper(c).attention_scale;
  auto arena = std::make_shared<Arena>();
  ModelStash stash;
  std::vector<double> mass;
  for (size_t l = 0; l < NL; ++l) {
    int64_t done = 0;
    for (const ParallelUnit& u : set.units) {
      if (s.max_units > 0 && done >= s.max_units) break;
      const auto text = u.text.find(r.langs[l]);
      if (text == u.text.end()) continue;
      ++done;
      TokenBatch batch;
      const std::vector<int32_t> ids = tokenizer.encode(text->second);
      if (ids.empty()) continue;
      batch.add_sequence(ids);
      arena->reset();
      stash.mixer.assign(static_cast<size_t>(c.num_hidden_layers), LayerStash{arena.get(), {}, {}});
      stash.mlp.assign(static_cast<size_t>(c.num_hidden_layers), LayerStash{arena.get(), {}, {}});
      model.forward(batch, {.stash = &stash});
      const int64_t T = batch.total_tokens();
      AttentionShape shape = base;
      shape.total_tokens = T;
      mass.resize(static_cast<size_t>(T) * NW);
      for (size_t li = 0; li < r.layers.size(); ++li) {
        const AttentionQk qk = attention_stash_qk(stash.mixer[static_cast<size_t>(r.layers[li])]);
        shape.window = c.attention_window(r.layers[li]);  // the softmax the forward ran (0 for these layers)
        attention_recent_mass(mass.data(), qk.q, qk.k, batch.cu_seqlens.data(), 1, shape, scale, s.windows.data(),
                              static_cast<int64_t>(NW));
        for (int64_t t = 0; t < T; ++t)
          for (size_t w = 0; w < NW; ++w) r.share[li][l][w] += mass[static_cast<size_t>(t) * NW + w];
      }
      r.sentences[l] += 1;
      r.queries[l] += T;
    }
    HLM_CHECK_INPUT(r.queries[l] > 0, set.path, ": no non-empty ", r.langs[l], " sentence");
    for (auto& layer : r.share)
      for (double& v : layer[l]) v /= static_cast<double>(r.queries[l]);
    if (progress)
      progress("locality: " + label + " " + r.langs[l] + ": " + std::to_string(r.sentences[l]) + " sentences, " +
               std::to_string(r.queries[l]) + " queries");
  }
  return r;
}

void locality_write_outputs(const std::filesystem::path& dir, const std::vector<LocalityResult>& results) {
  HLM_CHECK(!results.empty(), "locality: no results to write");
  std::filesystem::create_directories(dir);
  std::ostringstream csv;
  csv << "model,layer,lang,k,share\n";
  char buf[32];
  for (const LocalityResult& r : results)
    for (size_t li = 0; li < r.layers.size(); ++li)
      for (size_t l = 0; l < r.langs.size(); ++l)
        for (size_t w = 0; w < r.windows.size(); ++w) {
          std::snprintf(buf, sizeof buf, "%.8f", r.share[li][l][w]);
          csv << r.model << ',' << r.layers[li] << ',' << r.langs[l] << ',' << r.windows[w] << ',' << buf << '\n';
        }
  file_write_atomic(dir / "locality.csv", csv.str());

  for (size_t w = 0; w < results.front().windows.size(); ++w) {
    const int64_t k = results.front().windows[w];
    LineChart chart;
    chart.title = "Attention mass on the last " + std::to_string(k) + " tokens (mean over languages)";
    chart.x_label = "relative depth (layer / layers)";
    chart.y_label = "share of attention mass";
    chart.y_min = 0.0;
    chart.y_max = 1.0;
    for (const LocalityResult& r : results) {
      HLM_CHECK_INPUT(r.windows == results.front().windows, "locality: models were run with different windows");
      ChartSeries series;
      series.label = r.model;
      for (size_t li = 0; li < r.layers.size(); ++li) {
        double mean = 0.0;
        for (size_t l = 0; l < r.langs.size(); ++l) mean += r.share[li][l][w] / static_cast<double>(r.langs.size());
        series.x.push_back(static_cast<double>(r.layers[li]) / static_cast<double>(r.num_layers));
        series.y.push_back(mean);
      }
      chart.series.push_back(std::move(series));
    }
    file_write_atomic(dir / ("locality_k" + std::to_string(k) + ".svg"), svg_line_chart(chart));
  }
}

}  // namespace hlm
