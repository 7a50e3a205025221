// parse_lm_head_chunking / lm_head_chunking_text (contract: lm_head_chunking_text.h).
#include "train/lm_head_chunking_text.h"

#include <climits>
#include <cstdint>

#include "core/error.h"

namespace hlm {

namespace {

constexpr int64_t kFull = INT32_MAX;  // "full": one chunk covers any vocabulary

// A positive decimal integer of at most INT32_MAX, digits only (no sign, spaces or suffix); -1 when it is not one.
int64_t positive_int(const std::string& s) {
  if (s.empty() || s.size() > 10) return -1;
  int64_t v = 0;
  for (const char ch : s) {
    if (ch < '0' || ch > '9') return -1;
    v = v * 10 + (ch - '0');
  }
  return v >= 1 && v <= kFull ? v : -1;
}

}  // namespace

LmHeadChunking parse_lm_head_chunking(const std::string& text) {
  const size_t x = text.find('x');
  const std::string rows = x == std::string::npos ? text : text.substr(0, x);
  const std::string cols = x == std::string::npos ? "" : text.substr(x + 1);
  const int64_t r = positive_int(rows);
  const int64_t c = cols == "full" ? kFull : positive_int(cols);
  HLM_CHECK_INPUT(x != std::string::npos && r > 0 && c > 0, "LM-head loss chunking '", text,
                  "': expected ROWSxCOLS or ROWSxfull (row block x vocabulary chunk, integers 1 to ", kFull,
                  "), e.g. 4096x4096 or 2048xfull");
  return LmHeadChunking{.vocab_chunk = c, .row_block = r};
}

std::string lm_head_chunking_text(const LmHeadChunking& chunking) {
  return std::to_string(chunking.row_block) + "x" +
         (chunking.vocab_chunk >= kFull ? std::string("full") : std::to_string(chunking.vocab_chunk));
}

}  // namespace hlm
