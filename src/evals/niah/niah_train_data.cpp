// NIAH-format training examples from training text (see niah_train_data.h).
#include "evals/niah/niah_train_data.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_split.h"
#include "data/unicode_text.h"

namespace hlm {
namespace {

// Code-point boundaries of `text` (byte offsets 0 .. size, both ends included).
std::vector<size_t> code_point_offsets(const std::string& text) {
  std::vector<size_t> ends{0};
  for (size_t pos = 0; pos < text.size();) {
    utf8_next(text, pos);
    ends.push_back(pos);
  }
  return ends;
}

}  // namespace

std::vector<std::string> niah_training_sentences(const Corpus& corpus, const std::string& code,
                                                 int64_t held_out_docs) {
  HLM_CHECK_INPUT(held_out_docs >= 1, "held_out_docs must be positive (got ", held_out_docs, ")");
  const CorpusDocuments docs = corpus.read_documents(code);
  const DocumentSplit s = split_documents(code, static_cast<int64_t>(docs.texts.size()), held_out_docs);
  HLM_CHECK_INPUT(!s.train.empty(), "corpus ", corpus.dir().string(), ": language ", code,
                  " has no training document (", docs.texts.size(), " documents, held_out_docs ", held_out_docs,
                  " keeps 2M for validation and test)");
  std::vector<std::string> out;
  for (int64_t d : s.train)
    for (std::string& p : niah_split_sentences(docs.texts[static_cast<size_t>(d)])) out.push_back(std::move(p));
  HLM_CHECK_INPUT(!out.empty(), "corpus ", corpus.dir().string(), ": the training documents of ", code,
                  " hold no sentence (a line piece of >= 8 characters ending with a full stop)");
  return out;
}

std::string niah_answer_text(const NiahSample& s) {
  std::string values;
  for (size_t i = 0; i < s.expected.size(); ++i) values += (i > 0 ? ", " : "") + s.expected[i];
  return "\n<Answer> " + values + " </Answer>";
}

namespace {

// Smallest k in [1, n] with decode(ids[begin, begin + k)) longer than `bytes` bytes (n + 1 when none): token k − 1 of
// the sequence holds byte `bytes` of its text.
int64_t token_holding_byte(const Tokenizer& tokenizer, const std::vector<int32_t>& seq, size_t bytes) {
  int64_t lo = 1, hi = static_cast<int64_t>(seq.size()) + 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const std::vector<int32_t> prefix(seq.begin(), seq.begin() + mid);
    if (tokenizer.decode(prefix).size() > bytes) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace

namespace {

// The answer spans of a sequence's text: per "</Answer>\n<Answer>" seam, the byte range [open, end) from the
// answer's "\n<Answer>" to the end of its "</Answer>", and whether the example's "<text>" lies between the previous
// answer's end (or byte 0) and the seam.
struct AnswerSpan {
  size_t open = 0, end = 0;
  bool has_haystack = false;
};

constexpr std::string_view kClose = "</Answer>", kSeam = "</Answer>\n<Answer>", kHaystackTag = "<text>";

std::vector<AnswerSpan> answer_spans(const std::string& text) {
  std::vector<AnswerSpan> out;
  size_t from = 0;
  for (;;) {
    const size_t seam = text.find(kSeam, from);
    if (seam == std::string::npos) break;
    const size_t open = seam + kClose.size();
    const size_t close = text.find(kClose, open);
    if (close == std::string::npos) break;
    const size_t tag = text.find(kHaystackTag, from);
    out.push_back({open, close + kClose.size(), tag != std::string::npos && tag < seam});
    from = close + kClose.size();
  }
  return out;
}

}  // namespace

void niah_answer_targets(PackedBatch& batch, const Tokenizer& tokenizer) {
  const std::vector<int32_t>& ids = batch.batch.ids;
  const std::vector<int64_t>& cu = batch.batch.cu_seqlens;
  HLM_CHECK(batch.targets.size() == ids.size(), "niah_answer_targets: ", batch.targets.size(), " targets for ",
            ids.size(), " tokens");
  // An answer starts right after the prompt's instruction, which ends with the example tags: "... </Answer>" then
  // "\n<Answer> values </Answer>". Matching the two together never takes the instruction's tags for an answer.
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t begin = cu[s], end = cu[s + 1];
    std::vector<char> keep(static_cast<size_t>(end - begin), 0);  // targets kept, by position in the sequence
    const std::vector<int32_t> seq(ids.begin() + begin, ids.begin() + end);
    const std::string text = tokenizer.decode(seq);
    for (const AnswerSpan& a : answer_spans(text)) {
      if (!a.has_haystack) continue;
      // Tokens [first, last] hold the answer's bytes [open, end); the kept targets predict them.
      const int64_t first = token_holding_byte(tokenizer, seq, a.open) - 1;
      const int64_t last = token_holding_byte(tokenizer, seq, a.end - 1) - 1;
      const int64_t kb = std::max<int64_t>(first - 1, 0), ke = std::min<int64_t>(last, end - begin - 1);
      for (int64_t p = kb; p < ke; ++p) keep[static_cast<size_t>(p)] = 1;
    }
    for (int64_t p = begin; p < end; ++p)
      if (!keep[static_cast<size_t>(p - begin)]) batch.targets[static_cast<size_t>(p)] = kIgnoreTarget;
  }
}

void niah_split_packed_examples(PackedBatch& batch, const Tokenizer& tokenizer) {
  const std::vector<int32_t>& ids = batch.batch.ids;
  const std::vector<int64_t>& cu = batch.batch.cu_seqlens;
  HLM_CHECK(batch.targets.size() == ids.size(), "niah_split_packed_examples: ", batch.targets.size(),
            " targets for ", ids.size(), " tokens");
  std::vector<int64_t> out{0};
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t begin = cu[s], end = cu[s + 1];
    const std::vector<int32_t> seq(ids.begin() + begin, ids.begin() + end);
    const std::string text = tokenizer.decode(seq);
    for (const AnswerSpan& a : answer_spans(text)) {
      if (text.compare(a.end, kNiahPackSeparator.size(), kNiahPackSeparator) != 0) continue;
      const size_t next = a.end + kNiahPackSeparator.size();  // the next example's (or the filler's) first byte
      if (next >= text.size()) continue;
      const int64_t k = token_holding_byte(tokenizer, seq, next) - 1;  // its token starts the new sequence
      if (k <= 0 || k >= end - begin || begin + k <= out.back()) continue;
      out.push_back(begin + k);
      batch.targets[static_cast<size_t>(begin + k - 1)] = kIgnoreTarget;
    }
    out.push_back(end);
  }
  batch.batch.cu_seqlens = std::move(out);
}

NiahTrainExampleBuilder::NiahTrainExampleBuilder(const NiahLanguage& lang, const std::vector<std::string>& sentences,
                                                 const Tokenizer& tokenizer, int64_t seq_len)
    : lang_(lang), sentences_(sentences), tokenizer_(tokenizer), seq_len_(seq_len), gen_(lang, sentences, tokenizer) {
  HLM_CHECK(seq_len_ >= 2, "NIAH training examples need seq_len >= 2");
}

std::string NiahTrainExampleBuilder::example_text(const NiahTaskSpec& task, int64_t length, uint64_t seed,
                                                  int64_t index) {
  const NiahSample s = gen_.generate(task, length, seed, index);
  return s.prompt + niah_answer_text(s);
}

NiahTrainExample NiahTrainExampleBuilder::build(const NiahTaskSpec& task, int64_t length, uint64_t seed,
                                                int64_t index) {
  NiahTrainExample ex;
  ex.text = example_text(task, length, seed, index);
  ex.prompt_tokens = static_cast<int64_t>(tokenizer_.encode(ex.text).size());
  HLM_CHECK_INPUT(ex.prompt_tokens <= seq_len_, "train_data: a ", lang_.code, " ", task.name,
                  " example with a haystack of ", length, " tokens needs ", ex.prompt_tokens,
                  " tokens with its prompt and answer, more than train.seq_len ", seq_len_,
                  ": lower train_data.lengths or raise train.seq_len");
  ex.tokens = ex.prompt_tokens;
  fill(ex, seed, index);
  return ex;
}

NiahTrainExample NiahTrainExampleBuilder::build_packed(const std::function<NiahPackItem(int64_t)>& item,
                                                       int64_t first, uint64_t seed, int64_t filler_index) {
  auto count = [&](const std::string& t) { return static_cast<int64_t>(tokenizer_.encode(t).size()); };
  NiahTrainExample ex;
  const NiahPackItem head = item(first);
  ex.text = head.text;
  ex.tokens = count(ex.text);
  HLM_CHECK_INPUT(ex.tokens <= seq_len_, "train_data: a ", head.what, " needs ", ex.tokens,
                  " tokens with its prompt and answer, more than train.seq_len ", seq_len_,
                  ": lower train_data.lengths or raise train.seq_len");
  ex.examples = 1;
  for (;;) {
    const NiahPackItem next = item(first + ex.examples);
    std::string joined = ex.text + std::string(kNiahPackSeparator) + next.text;
    const int64_t t = count(joined);
    if (t > seq_len_) break;
    ex.text = std::move(joined);
    ex.tokens = t;
    ++ex.examples;
  }
  ex.prompt_tokens = ex.tokens;
  fill(ex, seed, filler_index);
  return ex;
}

void NiahTrainExampleBuilder::fill(NiahTrainExample& ex, uint64_t seed, int64_t index) {
  auto count = [&](const std::string& t) { return static_cast<int64_t>(tokenizer_.encode(t).size()); };
  if (ex.tokens < seq_len_) {
    // Filler: training sentences from a drawn start, at least as many bytes as tokens are missing (a token is at
    // least one byte), then the longest code-point prefix that keeps the example within seq_len.
    const std::string stream = "niah-train-filler/" + std::string(lang_.code);
    const std::array<uint32_t, 4> w = philox4x32(seed, rng_stream_id(stream.c_str()), static_cast<uint64_t>(index));
    size_t next = ((static_cast<uint64_t>(w[0]) << 32) | w[1]) % sentences_.size();
    std::string filler = "\n\n";
    const std::string joiner(lang_.joiner);
    for (size_t k = 0; static_cast<int64_t>(filler.size()) < 2 * (seq_len_ - ex.tokens) + 16; ++k) {
      filler += (k > 0 ? joiner : "") + sentences_[next];
      next = (next + 1) % sentences_.size();
    }
    const std::vector<size_t> cuts = code_point_offsets(filler);
    int64_t lo = 0, hi = static_cast<int64_t>(cuts.size()) - 1;  // largest prefix index with tokens <= seq_len
    int64_t best_tokens = ex.tokens;
    size_t best = 0;
    while (lo <= hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      const int64_t t = count(ex.text + filler.substr(0, cuts[static_cast<size_t>(mid)]));
      if (t <= seq_len_) {
        best = cuts[static_cast<size_t>(mid)];
        best_tokens = t;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    ex.text += filler.substr(0, best);
    ex.tokens = best_tokens;
    // A cut that cannot land on seq_len (the next code point adds two tokens, or a merge): pad with spaces.
    for (int tries = 0; ex.tokens < seq_len_ && tries < 8; ++tries) {
      const int64_t t = count(ex.text + " ");
      if (t > seq_len_) break;
      ex.text += " ";
      ex.tokens = t;
    }
  }
  ex.exact = ex.tokens == seq_len_;
}

NiahTaskSpec niah_train_task(const std::string& name, int keys) {
  NiahTaskSpec task = niah_task_from_name(name);
  HLM_CHECK_INPUT(niah_train_keys_valid(keys), "NIAH training data: keys must be 2, 3 or 4 (got ", keys,
                  "; 0 keeps the tasks' own)");
  // Multikey and none are the tasks whose other keys are distractors; single, multivalue and multiquery keep theirs.
  if (keys > 0 && (task.task == NiahTask::Multikey || task.task == NiahTask::None)) task.keys = keys;
  return task;
}

nlohmann::json niah_train_data_write(const std::string& dir, const NiahTrainDataSpec& spec,
                                     const std::function<void(const std::string&)>& log) {
  HLM_CHECK_INPUT(spec.docs_per_language >= 1, "NIAH training data: docs_per_language must be positive");
  const Corpus corpus = Corpus::open(spec.corpus);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(spec.tokenizer);
  std::vector<NiahTaskSpec> task_specs;
  for (const std::string& t : spec.tasks) task_specs.push_back(niah_train_task(t, spec.keys));
  std::vector<const NiahTaskSpec*> tasks;
  for (const NiahTaskSpec& t : task_specs) tasks.push_back(&t);
  std::vector<CorpusLanguage> languages;
  std::vector<std::vector<std::string>> docs;
  nlohmann::json summary = {{"format", "hybridlm-niah-train-data"},
                            {"seq_len", spec.seq_len},
                            {"seed", spec.seed},
                            {"held_out_docs", spec.held_out_docs},
                            {"languages", nlohmann::json::object()}};
  int64_t total_docs = 0, total_tokens = 0, total_exact = 0, total_examples = 0;
  for (const std::string& code : spec.langs) {
    const NiahLanguage& lang = niah_language(code);
    const std::vector<std::string> sentences = niah_training_sentences(corpus, code, spec.held_out_docs);
    NiahTrainExampleBuilder builder(lang, sentences, *tokenizer, spec.seq_len);
    builder.set_value_digits_min(spec.value_digits_min);
    std::vector<std::string> texts;
    int64_t tokens = 0, exact = 0, answer_tokens = 0, examples = 0;
    // Example i: task tasks[i % T], haystack lengths[(i / T) % N], sample first_index + i.
    auto task_of = [&](int64_t i) -> const NiahTaskSpec& { return *tasks[static_cast<size_t>(i) % tasks.size()]; };
    auto length_of = [&](int64_t i) {
      return spec.lengths[static_cast<size_t>(i / static_cast<int64_t>(tasks.size())) % spec.lengths.size()];
    };
    const auto item = [&](int64_t i) {
      const NiahTaskSpec& task = task_of(i);
      return NiahPackItem{builder.example_text(task, length_of(i), spec.seed, spec.first_index + i),
                          code + " " + std::string(task.name) + " example with a haystack of " +
                              std::to_string(length_of(i)) + " tokens"};
    };
    for (int64_t i = 0; i < spec.docs_per_language; ++i) {
      NiahTrainExample ex = spec.packed ? builder.build_packed(item, examples, spec.seed, spec.first_index + examples)
                                        : builder.build(task_of(i), length_of(i), spec.seed, spec.first_index + i);
      examples += ex.examples;
      tokens += ex.tokens;
      exact += ex.exact ? 1 : 0;
      answer_tokens += ex.prompt_tokens;
      texts.push_back(std::move(ex.text));
    }
    CorpusLanguage cl;
    cl.code = code;
    cl.tier = "high";  // equal shares: every language gets the same token quota
    languages.push_back(cl);
    docs.push_back(std::move(texts));
    summary["languages"][code] = {{"documents", spec.docs_per_language},
                                  {"examples", examples},
                                  {"tokens", tokens},
                                  {"exact", exact},
                                  {"prompt_answer_tokens", answer_tokens},
                                  {"training_sentences", static_cast<int64_t>(sentences.size())}};
    total_docs += spec.docs_per_language;
    total_examples += examples;
    total_tokens += tokens;
    total_exact += exact;
    char line[256];
    std::snprintf(line, sizeof line,
                  "niah experiment: data %s: %lld rows, %lld examples, %lld tokens (%lld rows of exactly seq_len "
                  "%lld), %zu training sentences",
                  code.c_str(), static_cast<long long>(spec.docs_per_language), static_cast<long long>(examples),
                  static_cast<long long>(tokens),
                  static_cast<long long>(exact), static_cast<long long>(spec.seq_len), sentences.size());
    log(line);
  }
  corpus_write(dir, languages, docs, {"NIAH-format examples from the training documents of " + spec.corpus});
  summary["documents"] = total_docs;
  summary["examples"] = total_examples;
  summary["packed"] = spec.packed;
  summary["tasks"] = spec.tasks;
  summary["keys"] = spec.keys;
  summary["first_index"] = spec.first_index;
  summary["tokens"] = total_tokens;
  summary["exact"] = total_exact;
  return summary;
}

}  // namespace hlm
