// Shared by the analyses (align, locality): tokenizing parallel sentences with a record of which tokens count
// (special tokens dropped unless asked), and one forward pass over several sentences that keeps the hidden states
// of chosen per-layer capture points.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "layers/capture.h"
#include "models/model.h"

namespace hlm {

struct TokenizedSentence {
  std::vector<int32_t> ids;   // every token (the model sees them all)
  std::vector<int64_t> kept;  // positions the analysis uses (all, or all but special tokens)
};

// Special tokens: those a tokenizer.json marks "special" (data/tokenizer_json.h); the bytes tokenizer has none.
// Encoding never adds BOS/EOS (the post-processor is not applied), so specials appear only when the text holds them.
TokenizedSentence tokenize_sentence(const Tokenizer& tokenizer, const std::string& text, bool keep_special);

// Per-layer states of one packed forward: values[p][layer] [T_total, hidden] for points[p]; sequence s spans rows
// [cu_seqlens[s], cu_seqlens[s+1]).
struct SentenceStates {
  std::vector<CapturePoint> points;
  std::vector<int64_t> cu_seqlens;
  int64_t hidden = 0;
  std::vector<std::vector<std::vector<float>>> values;
  // The kept rows of sentence s at (point index p, layer) -> out [kept.size(), hidden] (resized).
  void gather(size_t p, int layer, size_t s, const TokenizedSentence& sentence, std::vector<float>& out) const;
};

// The forward behind forward_sentence_states: one pass over a packed batch that calls `capture` with host values
// [T, hidden] for (at least) every layer of the given per-layer points. Empty: the CPU's Model::forward. A device
// brings its own (analysis/cuda/cuda_states_forward.h: CudaModel::forward, downloading only those points).
using StatesForward =
    std::function<void(const TokenBatch& batch, const std::vector<CapturePoint>& points, const Capture& capture)>;

// points must be per-layer points (input error otherwise); sentences must be non-empty. Every (point, layer) must
// have been captured with T·hidden values (internal error otherwise: a forward that skipped one).
SentenceStates forward_sentence_states(Model& model, const std::vector<const TokenizedSentence*>& sentences,
                                       const std::vector<CapturePoint>& points, const StatesForward& forward = {});

// "attn_in,attn_out" -> points (input error naming unknown or non-per-layer names and listing the known ones).
std::vector<CapturePoint> parse_layer_points(const std::string& list);

// "a,b,c" -> {"a","b","c"} (empty items are input errors naming `what`).
std::vector<std::string> split_list(const std::string& list, const std::string& what);

}  // namespace hlm
