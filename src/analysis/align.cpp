// SoftCKA per layer against the anchor language (align.h): pair selection, σ, the per-unit loop, outputs.
#include "analysis/align.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analysis/sentence_states.h"
#include "analysis/svg_chart.h"
#include "core/error.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

// A unit that takes part: its anchor sentence and the languages (indices into settings.langs) it is a pair for.
struct UnitWork {
  const ParallelUnit* unit;
  std::vector<size_t> langs;
};

// Units in file order, each with the languages for which it is one of the first max_pairs pairs.
std::vector<UnitWork> select_units(const ParallelSet& set, const AlignSettings& s) {
  std::map<const ParallelUnit*, std::vector<size_t>> langs_of;
  for (size_t l = 0; l < s.langs.size(); ++l) {
    std::vector<const ParallelUnit*> pairs = set.pairs(s.anchor, s.langs[l]);
    HLM_CHECK_INPUT(!pairs.empty(), set.path, ": no unit holds both ", s.anchor, " and ", s.langs[l]);
    if (s.max_pairs > 0 && static_cast<int64_t>(pairs.size()) > s.max_pairs) pairs.resize(static_cast<size_t>(s.max_pairs));
    for (const ParallelUnit* u : pairs) langs_of[u].push_back(l);
  }
  std::vector<UnitWork> work;
  for (const ParallelUnit& u : set.units)
    if (auto it = langs_of.find(&u); it != langs_of.end()) work.push_back({&u, it->second});
  return work;
}

// The unit's sentences: [0] the anchor, then one per language of w.langs (same order).
std::vector<TokenizedSentence> tokenize_unit(const Tokenizer& tok, const UnitWork& w, const AlignSettings& s) {
  std::vector<TokenizedSentence> out;
  out.push_back(tokenize_sentence(tok, w.unit->text.at(s.anchor), s.keep_special));
  for (size_t l : w.langs) out.push_back(tokenize_sentence(tok, w.unit->text.at(s.langs[l]), s.keep_special));
  return out;
}

// Sentences the model can run (at least one token) and the analysis can use (at least one kept token).
bool usable(const TokenizedSentence& s) { return !s.ids.empty() && !s.kept.empty(); }

SentenceStates run_unit(Model& model, const std::vector<TokenizedSentence>& sentences,
                        const std::vector<CapturePoint>& points, const StatesForward& forward) {
  std::vector<const TokenizedSentence*> ptrs;
  for (const TokenizedSentence& s : sentences) ptrs.push_back(&s);
  return forward_sentence_states(model, ptrs, points, forward);
}

// σ per (point, layer) by the median heuristic over a pooled token sample of the first units.
std::vector<std::vector<double>> median_sigmas(Model& model, const Tokenizer& tok, const std::vector<UnitWork>& work,
                                               const AlignSettings& s, int64_t layers, const StatesForward& forward,
                                               int64_t& sample_tokens) {
  const int64_t H = model.config().hidden_size;
  std::vector<std::vector<std::vector<float>>> sample(s.points.size(), std::vector<std::vector<float>>(size_t(layers)));
  sample_tokens = 0;
  std::vector<float> rows;
  for (const UnitWork& w : work) {
    if (sample_tokens >= s.sigma_sample_tokens) break;
    std::vector<TokenizedSentence> sentences = tokenize_unit(tok, w, s);
    sentences.erase(std::remove_if(sentences.begin(), sentences.end(), [](const auto& x) { return !usable(x); }),
                    sentences.end());
    if (sentences.empty()) continue;
    const SentenceStates states = run_unit(model, sentences, s.points, forward);
    for (size_t i = 0; i < sentences.size() && sample_tokens < s.sigma_sample_tokens; ++i) {
      const int64_t take = std::min<int64_t>(static_cast<int64_t>(sentences[i].kept.size()),
                                             s.sigma_sample_tokens - sample_tokens);
      for (size_t p = 0; p < s.points.size(); ++p)
        for (int layer = 0; layer < layers; ++layer) {
          states.gather(p, layer, i, sentences[i], rows);
          auto& dst = sample[p][size_t(layer)];
          dst.insert(dst.end(), rows.begin(), rows.begin() + take * H);
        }
      sample_tokens += take;
    }
  }
  HLM_CHECK_INPUT(sample_tokens >= 2, "the median bandwidth needs at least 2 tokens in the parallel set");
  std::vector<std::vector<double>> sigma(s.points.size(), std::vector<double>(size_t(layers)));
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (size_t p = 0; p < s.points.size(); ++p)
    for (int64_t layer = 0; layer < layers; ++layer)
      sigma[p][size_t(layer)] = std::sqrt(median_sq_distance_pairs(sample[p][size_t(layer)].data(), sample_tokens, H));
  for (size_t p = 0; p < s.points.size(); ++p)
    for (int64_t layer = 0; layer < layers; ++layer)
      HLM_CHECK_INPUT(sigma[p][size_t(layer)] > 0, "median bandwidth is 0 at ", capture_point_info(s.points[p]).name,
                      " layer ", layer, " (all sampled token states are identical); pass --sigma VALUE");
  return sigma;
}

// Token-state floats packed per kernel-norm batch (256 MiB): bounds the copy of a unit's states for long sentences.
constexpr int64_t kBatchFloatBudget = int64_t{1} << 26;

std::string format_double(double v) {
  if (!std::isfinite(v)) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.8f", v);
  return buf;
}

}  // namespace

double AlignResult::softcka(size_t point, int layer, size_t lang) const {
  return terms[point][static_cast<size_t>(layer)][lang].value();
}

double AlignResult::mean_softcka(size_t point, int layer) const {
  double sum = 0.0;
  int n = 0;
  for (size_t l = 0; l < settings.langs.size(); ++l)
    if (const double v = softcka(point, layer, l); std::isfinite(v)) sum += v, ++n;
  return n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
}

AlignResult align_softcka(Model& model, const Tokenizer& tokenizer, const ParallelSet& set, const AlignSettings& s,
                          const AlignProgress& progress, KernelNormEngine* engine, const StatesForward& forward,
                          const std::string& forward_device) {
  HLM_CHECK_INPUT(!s.langs.empty(), "align: no languages to compare with ", s.anchor);
  HLM_CHECK_INPUT(!s.points.empty(), "align: no capture points");
  for (const std::string& l : s.langs) HLM_CHECK_INPUT(l != s.anchor, "align: ", l, " is the anchor language");
  HLM_CHECK_INPUT(!s.sigma || (*s.sigma > 0 && std::isfinite(*s.sigma)), "--sigma must be positive");
  HLM_CHECK_INPUT(s.max_pairs >= 0 && s.sigma_sample_tokens >= 2, "bad pair limit or σ sample size");
  HLM_CHECK_INPUT(tokenizer.vocab_size() <= model.config().vocab_size, "tokenizer ", tokenizer.name(), " has ",
                  tokenizer.vocab_size(), " tokens but the model's vocabulary is ", model.config().vocab_size);
  const int64_t L = model.config().num_hidden_layers, H = model.config().hidden_size;
  const size_t P = s.points.size(), NL = s.langs.size();
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };

  std::unique_ptr<KernelNormEngine> cpu_engine;
  if (!engine) cpu_engine = make_cpu_kernel_norm_engine(), engine = cpu_engine.get();

  AlignResult r;
  r.settings = s;
  r.device = engine->name();
  r.forward_device = forward ? forward_device : "cpu";
  r.layers = L;
  r.terms.assign(P, std::vector<std::vector<SoftCkaTerms>>(size_t(L), std::vector<SoftCkaTerms>(NL)));
  r.pairs.assign(NL, 0);
  r.skipped_pairs.assign(NL, 0);
  r.anchor_tokens.assign(NL, 0);
  r.lang_tokens.assign(NL, 0);
  const std::vector<UnitWork> work = select_units(set, s);
  r.units = static_cast<int64_t>(work.size());

  if (s.kernel == CkaKernel::Linear) {
    r.sigma.assign(P, std::vector<double>(size_t(L), 0.0));
  } else if (s.sigma) {
    r.sigma.assign(P, std::vector<double>(size_t(L), *s.sigma));
  } else {
    say("align: estimating the median bandwidth per point and layer");
    r.sigma = median_sigmas(model, tokenizer, work, s, L, forward, r.sigma_sample);
  }

  const size_t cells = P * size_t(L);
  const int64_t report_every = std::max<int64_t>(1, r.units / 20);
  std::vector<float> batch_rows;
  std::vector<KernelNormJob> jobs;
  std::vector<double> norms;
  for (size_t u = 0; u < work.size(); ++u) {
    const UnitWork& w = work[u];
    std::vector<TokenizedSentence> sentences = tokenize_unit(tokenizer, w, s);
    // Usable pairs of this unit: the anchor and the language sentence both have kept tokens.
    std::vector<size_t> langs_here;  // indices into w.langs
    for (size_t i = 0; i < w.langs.size(); ++i) {
      if (usable(sentences[0]) && usable(sentences[i + 1])) {
        langs_here.push_back(i);
        r.pairs[w.langs[i]] += 1;
        r.anchor_tokens[w.langs[i]] += static_cast<int64_t>(sentences[0].kept.size());
        r.lang_tokens[w.langs[i]] += static_cast<int64_t>(sentences[i + 1].kept.size());
      } else {
        r.skipped_pairs[w.langs[i]] += 1;
      }
    }
    if (langs_here.empty()) continue;
    // Drop unusable sentences from the forward; `index` maps a w.langs slot to its row in the packed batch.
    std::vector<TokenizedSentence> run{sentences[0]};
    std::vector<size_t> index(w.langs.size(), 0);
    for (size_t i : langs_here) index[i] = run.size(), run.push_back(sentences[i + 1]);
    const SentenceStates states = run_unit(model, run, s.points, forward);

    // A cell's kept rows: the run's sentences one after another (start[k] = first row of sentence k in the cell).
    std::vector<int64_t> start(run.size() + 1, 0);
    for (size_t k = 0; k < run.size(); ++k) start[k + 1] = start[k] + static_cast<int64_t>(run[k].kept.size());
    const int64_t cell_rows = start.back(), n1 = start[1];
    const size_t cells_per_batch =
        static_cast<size_t>(std::max<int64_t>(1, kBatchFloatBudget / std::max<int64_t>(1, cell_rows * H)));
    for (size_t c0 = 0; c0 < cells; c0 += cells_per_batch) {
      const size_t c1 = std::min(cells, c0 + cells_per_batch);
      batch_rows.resize(static_cast<size_t>(int64_t(c1 - c0) * cell_rows * H));
#pragma omp parallel
      {
        std::vector<float> rows;
#pragma omp for schedule(dynamic)
        for (size_t cell = c0; cell < c1; ++cell) {
          float* dst = batch_rows.data() + int64_t(cell - c0) * cell_rows * H;
          for (size_t k = 0; k < run.size(); ++k) {
            states.gather(cell / size_t(L), static_cast<int>(cell % size_t(L)), k, run[k], rows);
            std::copy(rows.begin(), rows.end(), dst + start[k] * H);
          }
        }
      }
      // Per cell: the anchor's h11 once, then h22 and h12 of each language (the order the sums below read them).
      jobs.clear();
      for (size_t cell = c0; cell < c1; ++cell) {
        const double sigma = r.sigma[cell / size_t(L)][cell % size_t(L)];
        const int64_t base = int64_t(cell - c0) * cell_rows;
        jobs.push_back({base, n1, base, n1, sigma});
        for (size_t i : langs_here) {
          const int64_t row = base + start[index[i]], n2 = start[index[i] + 1] - start[index[i]];
          jobs.push_back({row, n2, row, n2, sigma});
          jobs.push_back({base, n1, row, n2, sigma});
        }
      }
      norms.resize(jobs.size());
      engine->run(batch_rows.data(), int64_t(c1 - c0) * cell_rows, H, s.kernel, jobs, norms);
      size_t next = 0;
      for (size_t cell = c0; cell < c1; ++cell) {
        const double h11 = norms[next++];
        for (size_t i : langs_here) {
          SoftCkaTerms t;
          t.h11 = h11;
          t.h22 = norms[next++];
          t.h12 = norms[next++];
          r.terms[cell / size_t(L)][cell % size_t(L)][w.langs[i]] += t;
        }
      }
    }
    if (static_cast<int64_t>(u + 1) % report_every == 0 || u + 1 == work.size())
      say("align: unit " + std::to_string(u + 1) + "/" + std::to_string(work.size()));
  }
  for (size_t l = 0; l < NL; ++l)
    HLM_CHECK_INPUT(r.pairs[l] > 0, "align: no usable ", s.anchor, "-", s.langs[l], " pair (all ",
                    r.skipped_pairs[l], " had no kept tokens)");
  return r;
}

void align_write_outputs(const std::filesystem::path& dir, const AlignResult& r, const ModelConfig& config,
                         const std::vector<std::pair<std::string, std::string>>& meta) {
  std::filesystem::create_directories(dir);
  const AlignSettings& s = r.settings;
  std::ostringstream csv;
  csv << "layer,point,lang,softcka\n";
  for (size_t p = 0; p < s.points.size(); ++p) {
    const std::string point(capture_point_info(s.points[p]).name);
    for (int layer = 0; layer < r.layers; ++layer) {
      for (size_t l = 0; l < s.langs.size(); ++l)
        csv << layer << ',' << point << ',' << s.langs[l] << ',' << format_double(r.softcka(p, layer, l)) << '\n';
      csv << layer << ',' << point << ",mean," << format_double(r.mean_softcka(p, layer)) << '\n';
    }
  }
  file_write_atomic(dir / "softcka.csv", csv.str());

  // Full-attention layers are marked only in hybrid models (in a dense model every layer is one).
  std::vector<double> full_layers;
  const bool hybrid = std::count(config.layer_kinds.begin(), config.layer_kinds.end(), LayerKind::FullAttention) <
                      static_cast<std::ptrdiff_t>(config.layer_kinds.size());
  std::string kinds;
  for (size_t i = 0; i < config.layer_kinds.size(); ++i) {
    const bool full = config.layer_kinds[i] == LayerKind::FullAttention;
    kinds += full ? 'A' : 'R';
    if (full && hybrid) full_layers.push_back(static_cast<double>(i));
  }

  nlohmann::ordered_json j;
  for (const auto& [key, value] : meta) j[key] = value;
  j["model_type"] = config.model_type;
  j["layers"] = r.layers;
  j["layer_kinds"] = kinds;
  j["anchor"] = s.anchor;
  j["langs"] = s.langs;
  j["kernel"] = s.kernel == CkaKernel::Rbf ? "rbf" : "linear";
  j["sigma_mode"] = s.kernel == CkaKernel::Linear ? "none" : s.sigma ? "value" : "median";
  j["sigma_sample_tokens"] = r.sigma_sample;
  j["max_pairs"] = s.max_pairs;
  j["keep_special"] = s.keep_special;
  j["units"] = r.units;
  j["device"] = r.device;
  j["forward_device"] = r.forward_device;
  for (size_t p = 0; p < s.points.size(); ++p) j["sigma"][std::string(capture_point_info(s.points[p]).name)] = r.sigma[p];
  for (size_t l = 0; l < s.langs.size(); ++l)
    j["counts"][s.langs[l]] = {{"pairs", r.pairs[l]},
                               {"skipped_pairs", r.skipped_pairs[l]},
                               {"anchor_tokens", r.anchor_tokens[l]},
                               {"tokens", r.lang_tokens[l]}};
  file_write_atomic(dir / "settings.json", j.dump(2) + "\n");

  for (size_t p = 0; p < s.points.size(); ++p) {
    const std::string point(capture_point_info(s.points[p]).name);
    LineChart chart;
    chart.title = "SoftCKA vs " + s.anchor + " at " + point + (hybrid ? " (dotted: full-attention layers)" : "");
    chart.x_label = "layer";
    chart.y_label = "SoftCKA";
    chart.marker_x = full_layers;
    std::vector<double> xs;
    for (int layer = 0; layer < r.layers; ++layer) xs.push_back(layer);
    for (size_t l = 0; l <= s.langs.size(); ++l) {
      ChartSeries series;
      series.label = l < s.langs.size() ? s.langs[l] : "mean";
      series.x = xs;
      for (int layer = 0; layer < r.layers; ++layer)
        series.y.push_back(l < s.langs.size() ? r.softcka(p, layer, l) : r.mean_softcka(p, layer));
      chart.series.push_back(std::move(series));
    }
    file_write_atomic(dir / ("softcka_" + point + ".svg"), svg_line_chart(chart));
  }
}

}  // namespace hlm
