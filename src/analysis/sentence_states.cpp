// Tokenizing analysis sentences and collecting per-layer states (sentence_states.h).
#include "analysis/sentence_states.h"

#include <algorithm>

#include "core/error.h"
#include "data/tokenizer_json.h"

namespace hlm {

TokenizedSentence tokenize_sentence(const Tokenizer& tokenizer, const std::string& text, bool keep_special) {
  TokenizedSentence s;
  s.ids = tokenizer.encode(text);
  const auto* json = dynamic_cast<const JsonTokenizer*>(&tokenizer);
  for (size_t i = 0; i < s.ids.size(); ++i)
    if (keep_special || json == nullptr || !json->is_special(s.ids[i])) s.kept.push_back(static_cast<int64_t>(i));
  return s;
}

void SentenceStates::gather(size_t p, int layer, size_t s, const TokenizedSentence& sentence,
                            std::vector<float>& out) const {
  const std::vector<float>& v = values[p][static_cast<size_t>(layer)];
  out.resize(sentence.kept.size() * static_cast<size_t>(hidden));
  const int64_t begin = cu_seqlens[s];
  for (size_t r = 0; r < sentence.kept.size(); ++r)
    std::copy_n(v.begin() + (begin + sentence.kept[r]) * hidden, hidden, out.begin() + static_cast<int64_t>(r) * hidden);
}

SentenceStates forward_sentence_states(Model& model, const std::vector<const TokenizedSentence*>& sentences,
                                       const std::vector<CapturePoint>& points, const StatesForward& forward) {
  for (CapturePoint p : points)
    HLM_CHECK_INPUT(capture_point_info(p).per_layer, "capture point ", capture_point_info(p).name,
                    " is not a per-layer point");
  TokenBatch batch;
  for (const TokenizedSentence* s : sentences) {
    HLM_CHECK_INPUT(!s->ids.empty(), "cannot run the model on an empty sentence");
    batch.add_sequence(s->ids);
  }
  SentenceStates states;
  states.points = points;
  states.cu_seqlens = batch.cu_seqlens;
  states.hidden = model.config().hidden_size;
  states.values.assign(points.size(), std::vector<std::vector<float>>(static_cast<size_t>(model.config().num_hidden_layers)));
  const Capture capture = [&](CapturePoint point, int layer, const Tensor& value) {
    const auto it = std::find(points.begin(), points.end(), point);
    if (it == points.end()) return;
    const float* data = value.f32();
    states.values[static_cast<size_t>(it - points.begin())][static_cast<size_t>(layer)].assign(data, data + value.numel());
  };
  if (forward) {
    forward(batch, points, capture);
  } else {
    model.forward(batch, {}, capture);
  }
  const auto expected = static_cast<size_t>(batch.total_tokens() * states.hidden);
  for (size_t p = 0; p < points.size(); ++p)
    for (size_t layer = 0; layer < states.values[p].size(); ++layer)
      HLM_CHECK(states.values[p][layer].size() == expected, "forward_sentence_states: ",
                capture_point_info(points[p]).name, " layer ", layer, " holds ", states.values[p][layer].size(),
                " values, expected ", expected);
  return states;
}

std::vector<std::string> split_list(const std::string& list, const std::string& what) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    items.push_back(list.substr(start, comma - start));
    HLM_CHECK_INPUT(!items.back().empty(), what, ": empty item in '", list, "'");
    start = comma + 1;
  }
  return items;
}

std::vector<CapturePoint> parse_layer_points(const std::string& list) {
  std::vector<CapturePoint> points;
  for (const std::string& name : split_list(list, "--points")) {
    const CapturePointInfo* info = capture_point_by_name(name);
    if (info == nullptr || !info->per_layer) {
      std::string known;
      for (const auto& row : kCapturePointTable)
        if (row.per_layer) known += (known.empty() ? "" : ", ") + std::string(row.name);
      throw_input_error("--points: '", name, "' is not a per-layer capture point (known: ", known, ")");
    }
    if (std::find(points.begin(), points.end(), info->point) == points.end()) points.push_back(info->point);
  }
  return points;
}

}  // namespace hlm
