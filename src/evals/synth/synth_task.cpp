// Synthetic task generators and token encoding (contracts in synth_task.h).
#include "evals/synth/synth_task.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"

namespace hlm {
namespace {

struct TaskName {
  SynthTask task;
  const char* name;
};
constexpr TaskName kTaskNames[] = {{SynthTask::StateTracking, "state_tracking"},
                                   {SynthTask::Recall, "recall"},
                                   {SynthTask::StateBasedRecall, "state_based_recall"}};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Sequential 32-bit words of one Philox stream: item (task, n, m, split, index) owns stream `stream`, so every item
// is a pure function of its key, independent of which other items were drawn.
class ItemRng {
 public:
  ItemRng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint32_t word() {
    if (used_ == 4) {
      block_ = philox4x32(seed_, stream_, counter_++);
      used_ = 0;
    }
    return block_[used_++];
  }
  // Uniform in [0, k) by rejection (exact; k ≤ 2^32).
  int64_t below(int64_t k) {
    const uint64_t range = static_cast<uint64_t>(k);
    const uint64_t limit = (uint64_t{1} << 32) - ((uint64_t{1} << 32) % range);
    for (;;) {
      const uint64_t w = word();
      if (w < limit) return static_cast<int64_t>(w % range);
    }
  }

 private:
  uint64_t seed_, stream_, counter_ = 0;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
};

uint64_t item_stream(SynthTask task, int64_t n, int64_t m, const SynthItemKey& key) {
  uint64_t h = splitmix64(0x73796E7468ull + static_cast<uint64_t>(task));  // "synth"
  for (uint64_t part : {static_cast<uint64_t>(n), static_cast<uint64_t>(m), static_cast<uint64_t>(key.split),
                        key.index})
    h = splitmix64(h ^ part);
  return h;
}

void append_program(SynthItem& item, const SynthVocab& vocab, bool swap_delimiter) {
  item.tokens.push_back(SynthVocab::kInit);
  for (int v = 0; v < item.variables; ++v) {
    item.tokens.push_back(vocab.var(v));
    item.tokens.push_back(vocab.addr(item.init[static_cast<size_t>(v)]));
  }
  item.tokens.push_back(SynthVocab::kOps);
  for (size_t s = 0; s < item.swaps.size(); ++s) {
    const auto [x, y] = item.swaps[s];
    if (swap_delimiter && s > 0) item.tokens.push_back(SynthVocab::kOps);
    item.tokens.push_back(vocab.var(x));
    item.tokens.push_back(vocab.var(y));
  }
  item.tokens.push_back(SynthVocab::kQuery);
  item.tokens.push_back(vocab.var(static_cast<int>(item.query)));
}

}  // namespace

SynthTask synth_task_from_name(std::string_view name, std::string_view what) {
  for (const TaskName& t : kTaskNames)
    if (name == t.name) return t.task;
  throw_input_error(what, ": unknown task '", name, "' (expected state_tracking, recall or state_based_recall)");
}

const char* synth_task_name(SynthTask task) {
  for (const TaskName& t : kTaskNames)
    if (t.task == task) return t.name;
  return "?";
}

bool synth_task_uses_swaps(SynthTask task) { return task != SynthTask::Recall; }
bool synth_task_uses_bits(SynthTask task) { return task != SynthTask::StateTracking; }

int32_t SynthVocab::addr(int64_t i) const {
  HLM_CHECK_INPUT(0 <= i && i < max_address, "address ", i, " outside the vocabulary's 0..", max_address - 1,
                  " (raise max_address)");
  return static_cast<int32_t>(kAddr0 + i);
}

int64_t synth_sequence_length(SynthTask task, int64_t n, int64_t m, int variables, bool swap_delimiter) {
  const int64_t delimiters = swap_delimiter ? std::max<int64_t>(n - 1, 0) : 0;  // OPS before pairs 2..n
  switch (task) {
    case SynthTask::StateTracking: return 2 * n + 2 * variables + 4 + delimiters;
    case SynthTask::Recall: return m + 2;
    case SynthTask::StateBasedRecall: return m + 2 * n + 2 * variables + 4 + delimiters;
  }
  return 0;
}

SynthItem synth_generate(SynthTask task, int64_t n, int64_t m, const SynthItemKey& key, const SynthVocab& vocab,
                         const SynthGenOptions& options) {
  const int V = options.variables;
  HLM_CHECK_INPUT(2 <= V && V <= kSynthVariables, "variables must be in 2..5, got ", V);
  HLM_CHECK_INPUT(n >= 0, "swap count n must be ≥ 0, got ", n);
  if (task == SynthTask::Recall) HLM_CHECK_INPUT(m >= 1, "recall: array size m must be ≥ 1, got ", m);
  if (task == SynthTask::StateBasedRecall)
    HLM_CHECK_INPUT(m >= V, "state_based_recall: array size m must be ≥ ", V, " (distinct pointers), got ", m);
  const int64_t needed = task == SynthTask::StateTracking ? V : m;
  HLM_CHECK_INPUT(needed <= vocab.max_address, synth_task_name(task), ": needs addresses up to ", needed - 1,
                  " but max_address is ", vocab.max_address);

  SynthItem item;
  item.task = task;
  item.n = task == SynthTask::Recall ? 0 : n;
  item.m = task == SynthTask::StateTracking ? 0 : m;
  item.variables = V;
  ItemRng rng(key.seed, item_stream(task, item.n, item.m, key));

  if (synth_task_uses_bits(task)) {
    item.bits.resize(static_cast<size_t>(m));
    for (int& b : item.bits) b = static_cast<int>(rng.word() >> 31);
    for (int b : item.bits) item.tokens.push_back(vocab.bit(b));
  }
  if (task == SynthTask::Recall) {
    item.query = rng.below(m);
    item.answer = item.bits[static_cast<size_t>(item.query)];
    item.tokens.push_back(SynthVocab::kQuery);
    item.tokens.push_back(vocab.addr(item.query));
    item.answer_token = vocab.bit(static_cast<int>(item.answer));
    return item;
  }

  // Start values: a permutation of 0..V-1 (state tracking) or V distinct values of [0, m) (partial Fisher-Yates).
  const int64_t pool_size = task == SynthTask::StateTracking ? V : m;
  std::vector<int64_t> pool(static_cast<size_t>(pool_size));
  for (int64_t i = 0; i < pool_size; ++i) pool[static_cast<size_t>(i)] = i;
  item.init.resize(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) {
    const int64_t j = v + rng.below(pool_size - v);
    std::swap(pool[static_cast<size_t>(v)], pool[static_cast<size_t>(j)]);
    item.init[static_cast<size_t>(v)] = pool[static_cast<size_t>(v)];
  }
  // Swaps: pair index p in [0, V(V-1)): x = p / (V-1), y = the (p % (V-1))-th variable other than x.
  std::vector<int64_t> value = item.init;
  for (int64_t s = 0; s < n; ++s) {
    int x = 0, y = 0;
    for (;;) {
      const int64_t p = rng.below(V * (V - 1));
      x = static_cast<int>(p / (V - 1));
      y = static_cast<int>(p % (V - 1));
      if (y >= x) ++y;
      if (V == 2) break;  // one pair only: "no undo" cannot apply
      if (!options.no_undo || item.swaps.empty()) break;
      const auto [px, py] = item.swaps.back();
      if (!((px == x && py == y) || (px == y && py == x))) break;
    }
    item.swaps.emplace_back(x, y);
    std::swap(value[static_cast<size_t>(x)], value[static_cast<size_t>(y)]);
  }
  item.query = rng.below(V);
  const int64_t final_value = value[static_cast<size_t>(item.query)];
  item.moved = final_value != item.init[static_cast<size_t>(item.query)];
  append_program(item, vocab, options.swap_delimiter);
  if (task == SynthTask::StateTracking) {
    item.answer = final_value;
    item.answer_token = vocab.addr(final_value);
  } else {
    item.answer = item.bits[static_cast<size_t>(final_value)];
    item.answer_token = vocab.bit(static_cast<int>(item.answer));
  }
  return item;
}

SynthItem synth_decode(SynthTask task, const std::vector<int32_t>& tokens, const SynthVocab& vocab, int variables) {
  SynthItem item;
  item.task = task;
  item.variables = variables;
  size_t pos = 0;
  auto take = [&](const char* what) {
    HLM_CHECK_INPUT(pos < tokens.size(), "synth decode: sequence ends where ", what, " was expected");
    return tokens[pos++];
  };
  auto expect = [&](int32_t id, const char* what) {
    const int32_t t = take(what);
    HLM_CHECK_INPUT(t == id, "synth decode: token ", pos - 1, " is ", t, ", expected ", what);
  };
  auto as_var = [&](int32_t t) {
    HLM_CHECK_INPUT(t >= SynthVocab::kVar0 && t < SynthVocab::kVar0 + variables, "synth decode: token ", t,
                    " is not a variable");
    return t - SynthVocab::kVar0;
  };
  auto as_addr = [&](int32_t t) {
    HLM_CHECK_INPUT(t >= SynthVocab::kAddr0 && t < vocab.size(), "synth decode: token ", t, " is not an address");
    return static_cast<int64_t>(t - SynthVocab::kAddr0);
  };
  if (synth_task_uses_bits(task)) {
    while (pos < tokens.size() && (tokens[pos] == SynthVocab::kBit0 || tokens[pos] == SynthVocab::kBit0 + 1))
      item.bits.push_back(tokens[pos++] - SynthVocab::kBit0);
    item.m = static_cast<int64_t>(item.bits.size());
  }
  if (task == SynthTask::Recall) {
    expect(SynthVocab::kQuery, "QUERY");
    item.query = as_addr(take("an address"));
  } else {
    expect(SynthVocab::kInit, "INIT");
    for (int v = 0; v < variables; ++v) {
      HLM_CHECK_INPUT(as_var(take("a variable")) == v, "synth decode: INIT lists variables out of order");
      item.init.push_back(as_addr(take("an address")));
    }
    expect(SynthVocab::kOps, "OPS");
    while (pos < tokens.size() && tokens[pos] != SynthVocab::kQuery) {
      if (!item.swaps.empty() && tokens[pos] == SynthVocab::kOps) ++pos;  // a swap delimiter
      const int x = as_var(take("a variable"));
      const int y = as_var(take("a variable"));
      item.swaps.emplace_back(x, y);
    }
    item.n = static_cast<int64_t>(item.swaps.size());
    expect(SynthVocab::kQuery, "QUERY");
    item.query = as_var(take("a variable"));
  }
  HLM_CHECK_INPUT(pos == tokens.size(), "synth decode: ", tokens.size() - pos, " trailing tokens");
  item.tokens = tokens;
  return item;
}

std::string synth_item_json(const SynthItem& item) {
  nlohmann::ordered_json j;
  j["task"] = synth_task_name(item.task);
  j["n"] = item.n;
  j["m"] = item.m;
  if (synth_task_uses_bits(item.task)) j["bits"] = item.bits;
  if (item.task != SynthTask::Recall) {
    j["init"] = item.init;
    if (item.variables != kSynthVariables) j["variables"] = item.variables;
    nlohmann::json swaps = nlohmann::json::array();
    for (const auto& [x, y] : item.swaps) swaps.push_back({x, y});
    j["swaps"] = swaps;
  } else {
    j["init"] = nlohmann::json::array();
    j["swaps"] = nlohmann::json::array();
  }
  j["query"] = item.query;
  j["answer"] = item.answer;
  j["answer_token"] = item.answer_token;
  if (item.task != SynthTask::Recall) j["moved"] = item.moved;
  j["tokens"] = item.tokens;
  return j.dump();
}

}  // namespace hlm
