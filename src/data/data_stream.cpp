// TrainStream: data-seeded interleaving of per-language training documents into packed rows (see data_stream.h).
// State lives in plain vectors indexed by corpus language; cursor() mirrors them into the StreamCursor maps. Every
// random choice is a Philox draw at a counter (per-language shuffles: document index; interleaving: `draws`), so a
// restored cursor continues exactly as an uninterrupted stream. Passes: `docs` stays in the pass-0 order; pass p >= 1
// reads it through `order` (pass_order), rebuilt from (data seed, language, p) on a new pass and on restore.
#include "data/data_stream.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <span>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_mixture.h"
#include "data/data_pack.h"
#include "data/data_split.h"

namespace hlm {

struct TrainStream::Impl {
  struct Language {
    std::string code;
    std::vector<std::string> docs;      // training documents in this run's pass-0 order
    std::vector<int64_t> order;         // pass >= 1: the pass's i-th document is docs[order[i]]; empty in pass 0
    std::vector<int64_t> suffix_bytes;  // [docs + 1]: text bytes of the pass's documents i.. (in the pass's order)
    int64_t quota = -1;                 // tokens; -1 = no quota
    const std::string& doc(int64_t i) const {
      return docs[static_cast<size_t>(order.empty() ? i : order[static_cast<size_t>(i)])];
    }
  };
  const Tokenizer* tokenizer = nullptr;
  DataConfig config;
  std::vector<Language> langs;
  std::map<std::string, int64_t> quotas;
  std::vector<int64_t> next_doc, taken;  // per language: cursor.next_document, cursor.tokens_taken
  std::vector<int32_t> carry;
  int32_t carry_language = -1;
  uint64_t draws = 0;
  int64_t pass = 0;
  bool exhausted = false;
  StreamCursor view;  // filled by cursor()
  uint64_t interleave_stream = rng_stream_id("train-interleave");

  // Weight of language l in the next draw: remaining quota, or remaining text bytes without quotas; 0 when done.
  uint64_t weight(size_t l) const {
    const Language& lang = langs[l];
    if (next_doc[l] >= static_cast<int64_t>(lang.docs.size())) return 0;
    if (lang.quota < 0) return static_cast<uint64_t>(lang.suffix_bytes[next_doc[l]]);
    return taken[l] < lang.quota ? static_cast<uint64_t>(lang.quota - taken[l]) : 0;
  }

  // Every language's document order and remaining bytes for pass p (0: the pass-0 order, no permutation).
  void set_pass(int64_t p) {
    pass = p;
    for (Language& lang : langs) {
      const auto n = static_cast<int64_t>(lang.docs.size());
      lang.order = p == 0 ? std::vector<int64_t>{} : pass_order(lang.code, n, config.data_seed, p);
      lang.suffix_bytes.assign(lang.docs.size() + 1, 0);
      for (int64_t d = n; d-- > 0;)
        lang.suffix_bytes[static_cast<size_t>(d)] =
            lang.suffix_bytes[static_cast<size_t>(d) + 1] + static_cast<int64_t>(lang.doc(d).size());
    }
  }

  // Starts the next pass when one is left and some language could be drawn in it (under its quota, with
  // documents); false otherwise (the stream is used up for good).
  bool start_next_pass() {
    if (pass + 1 >= config.passes) return false;
    bool any = false;
    for (size_t l = 0; l < langs.size(); ++l)
      any = any || (!langs[l].docs.empty() && (langs[l].quota < 0 || taken[l] < langs[l].quota));
    if (!any) return false;
    set_pass(pass + 1);
    std::fill(next_doc.begin(), next_doc.end(), 0);
    return true;
  }

  // Loads the next document into `carry`; false when every language is used up in the last pass.
  bool draw() {
    for (;;) {
      uint64_t total = 0;
      for (size_t l = 0; l < langs.size(); ++l) total += weight(l);
      if (total == 0) {
        if (!start_next_pass()) return false;
        continue;
      }
      const auto w = philox4x32(config.data_seed, interleave_stream, draws++);
      const uint64_t u = (uint64_t{w[0]} << 32) | w[1];
      uint64_t r = static_cast<uint64_t>((static_cast<unsigned __int128>(u) * total) >> 64);  // uniform in [0, total)
      size_t l = 0;
      for (; l < langs.size(); ++l) {
        const uint64_t wl = weight(l);
        if (r < wl) break;
        r -= wl;
      }
      HLM_CHECK(l < langs.size(), "interleave draw out of range");
      carry = tokenizer->encode(langs[l].doc(next_doc[l]++));
      taken[l] += static_cast<int64_t>(carry.size());
      if (carry.empty()) continue;  // a text the tokenizer maps to no token
      carry_language = static_cast<int32_t>(l);
      return true;
    }
  }

  PackedBatch next(int64_t rows) {
    HLM_CHECK_INPUT(rows >= 0, "train stream: rows must be >= 0, got ", rows);
    const int64_t seq_len = config.seq_len;
    PackedBatch out;
    out.batch.ids.reserve(static_cast<size_t>(rows * seq_len));
    for (int64_t r = 0; r < rows && !exhausted; ++r) {
      for (int64_t fill = 0; fill < seq_len;) {
        if (carry.empty() && !draw()) {
          exhausted = true;
          carry_language = -1;
          break;
        }
        const auto take = static_cast<int64_t>(std::min<size_t>(static_cast<size_t>(seq_len - fill), carry.size()));
        packed_append_piece(out, std::span<const int32_t>(carry.data(), static_cast<size_t>(take)),
                            static_cast<int16_t>(carry_language));
        carry.erase(carry.begin(), carry.begin() + take);
        if (carry.empty()) carry_language = -1;
        fill += take;
      }
    }
    packed_drop_partial_row(out, seq_len);
    if (config.packing == DataPacking::Continuous) packed_join_rows(out, seq_len);
    return out;
  }
};

TrainStream::TrainStream(const Corpus& corpus, const Tokenizer& tokenizer, const DataConfig& config)
    : impl_(std::make_unique<Impl>()) {
  data_config_check(config, corpus);
  Impl& s = *impl_;
  s.tokenizer = &tokenizer;
  s.config = config;
  s.quotas = mixture_quotas(corpus.languages(), config);
  std::vector<CorpusDocuments> all = corpus_read_all(corpus);
  for (size_t l = 0; l < all.size(); ++l) {
    Impl::Language lang;
    lang.code = corpus.languages()[l].code;
    std::vector<std::string>& texts = all[l].texts;
    const DocumentSplit split = split_documents(lang.code, static_cast<int64_t>(texts.size()), config.held_out_docs);
    for (int64_t d : training_order(lang.code, split, config.data_seed)) lang.docs.push_back(std::move(texts[d]));
    if (!s.quotas.empty()) lang.quota = s.quotas.at(lang.code);
    s.langs.push_back(std::move(lang));
  }
  s.set_pass(0);
  s.next_doc.assign(s.langs.size(), 0);
  s.taken.assign(s.langs.size(), 0);
}

TrainStream::~TrainStream() = default;
TrainStream::TrainStream(TrainStream&&) noexcept = default;
TrainStream& TrainStream::operator=(TrainStream&&) noexcept = default;

PackedBatch TrainStream::next(int64_t rows) { return impl_->next(rows); }

const std::map<std::string, int64_t>& TrainStream::quotas() const { return impl_->quotas; }

int64_t TrainStream::pass() const { return impl_->pass; }

const StreamCursor& TrainStream::cursor() const {
  Impl& s = *impl_;
  s.view = StreamCursor{};
  for (size_t l = 0; l < s.langs.size(); ++l) {
    s.view.next_document[s.langs[l].code] = s.next_doc[l];
    s.view.tokens_taken[s.langs[l].code] = s.taken[l];
  }
  s.view.carry_tokens = s.carry;
  s.view.carry_language = s.carry_language;
  s.view.draws = s.draws;
  s.view.pass = s.pass;
  s.view.exhausted = s.exhausted;
  return s.view;
}

void TrainStream::restore(const StreamCursor& c) {
  Impl& s = *impl_;
  const char* what = "stream cursor does not fit this corpus: ";
  HLM_CHECK_INPUT(c.next_document.size() == s.langs.size() && c.tokens_taken.size() == s.langs.size(), what,
                  "it lists ", c.next_document.size(), " languages, the corpus has ", s.langs.size());
  std::vector<int64_t> next_doc(s.langs.size()), taken(s.langs.size());
  for (size_t l = 0; l < s.langs.size(); ++l) {
    const std::string& code = s.langs[l].code;
    const auto nd = c.next_document.find(code);
    const auto tt = c.tokens_taken.find(code);
    HLM_CHECK_INPUT(nd != c.next_document.end() && tt != c.tokens_taken.end(), what, "language ", code, " missing");
    HLM_CHECK_INPUT(nd->second >= 0 && nd->second <= static_cast<int64_t>(s.langs[l].docs.size()), what, code,
                    " next document ", nd->second, " outside 0..", s.langs[l].docs.size());
    HLM_CHECK_INPUT(tt->second >= 0, what, code, " tokens taken ", tt->second, " is negative");
    next_doc[l] = nd->second;
    taken[l] = tt->second;
  }
  HLM_CHECK_INPUT(c.carry_language >= -1 && c.carry_language < static_cast<int32_t>(s.langs.size()), what,
                  "carry language ", c.carry_language, " out of range");
  HLM_CHECK_INPUT(c.carry_tokens.empty() == (c.carry_language == -1), what,
                  "carry tokens and carry language disagree");
  for (int32_t id : c.carry_tokens)
    HLM_CHECK_INPUT(id >= 0 && id < s.tokenizer->vocab_size(), what, "carried token ", id, " outside the vocabulary");
  HLM_CHECK_INPUT(c.pass >= 0 && c.pass < s.config.passes, what, "it is in pass ", c.pass + 1,
                  " but this run has passes = ", s.config.passes);
  if (c.pass != s.pass) s.set_pass(c.pass);
  s.next_doc = std::move(next_doc);
  s.taken = std::move(taken);
  s.carry = c.carry_tokens;
  s.carry_language = c.carry_language;
  s.draws = c.draws;
  s.exhausted = c.exhausted;
}

nlohmann::json stream_cursor_to_json(const StreamCursor& c) {
  return nlohmann::json{{"next_document", c.next_document}, {"tokens_taken", c.tokens_taken},
                        {"carry_tokens", c.carry_tokens},   {"carry_language", c.carry_language},
                        {"draws", c.draws},                 {"pass", c.pass},
                        {"exhausted", c.exhausted}};
}

StreamCursor stream_cursor_from_json(const nlohmann::json& j) {
  HLM_CHECK_INPUT(j.is_object(), "stream cursor: expected a JSON object");
  for (const char* key : {"next_document", "tokens_taken", "carry_tokens", "carry_language", "draws", "exhausted"})
    HLM_CHECK_INPUT(j.contains(key), "stream cursor: missing \"", key, "\"");
  StreamCursor c;
  try {
    c.next_document = j.at("next_document").get<std::map<std::string, int64_t>>();
    c.tokens_taken = j.at("tokens_taken").get<std::map<std::string, int64_t>>();
    c.carry_tokens = j.at("carry_tokens").get<std::vector<int32_t>>();
    HLM_CHECK_INPUT(j.at("carry_language").is_number_integer() && j.at("draws").is_number_unsigned() &&
                        j.at("exhausted").is_boolean(),
                    "stream cursor: carry_language, draws or exhausted has the wrong type");
    c.carry_language = j.at("carry_language").get<int32_t>();
    c.draws = j.at("draws").get<uint64_t>();
    c.exhausted = j.at("exhausted").get<bool>();
    if (j.contains("pass")) {  // absent in checkpoints written before passes existed: pass 0
      HLM_CHECK_INPUT(j.at("pass").is_number_integer() && j.at("pass").get<int64_t>() >= 0,
                      "stream cursor: pass must be a non-negative integer");
      c.pass = j.at("pass").get<int64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw_input_error("stream cursor: ", e.what());
  }
  return c;
}

}  // namespace hlm
