// The three synthetic expressivity tasks of Olmo Hybrid (spec: ../shared/docs/evals.md §1.2): item generators,
// deterministic by (seed, task, n, m, split, index) through the counter-based RNG (core/rng.h), and the token encoding.
//
// Tasks (V = 5 pointer variables a..e; a swap line exchanges the values of two variables):
//   state_tracking (n):        5 pointers start at a uniformly random permutation of 0..4; n swaps; query variable q;
//                              answer = final value of q, in 0..4 (the S5 word problem; 5 classes, chance 20%).
//   recall (m):                m uniform bits; literal query index i uniform in [0, m); answer = bits[i].
//   state_based_recall (n, m): m uniform bits; 5 pointers = distinct values drawn without replacement from [0, m)
//                              (m ≥ 5); n swaps; query variable q; answer = bits[final value of q]. `moved` records
//                              final(q) ≠ init(q) (on un-moved items the shortcut "bits[init q]" is right).
// Swaps: ordered pairs (x, y), x ≠ y, uniform over the 20 pairs; with `no_undo` a swap never repeats the previous
// swap's unordered pair (Rawat et al.'s variant). Query variable q uniform over the 5 variables.
// `variables` (SynthGenOptions, 2..5, default 5) uses only the first V variables everywhere above (V start values,
// swaps among them, query among them): V = 2 turns state tracking into parity of n (Grazzi et al.'s cheap probe of
// negative eigenvalues), V = 5 is the paper's setting.
//
// Token encoding (SynthVocab; ids fixed by max_address so that longer arrays can be evaluated later):
//   PAD 0, INIT 1, OPS 2, QUERY 3, bit 0 → 4, bit 1 → 5, variable v (0 = a .. 4 = e) → 6 + v,
//   address i (0 ≤ i < max_address) → 11 + i.                      vocab size = 11 + max_address.
// Input sequence (`tokens`; the answer is NOT part of it, the model predicts it from the last position):
//   state_tracking:      INIT (var addr)×V OPS (var var)×n QUERY var          length 2n + 2V + 4 (V = 5: 2n + 14)
//   recall:              bit×m QUERY addr                                     length m + 2
//   state_based_recall:  bit×m INIT (var addr)×V OPS (var var)×n QUERY var    length m + 2n + 2V + 4
// With `swap_delimiter` (SynthGenOptions) every swap pair is preceded by OPS, not only the first: the program part
// becomes INIT (var addr)×V (OPS var var)×n QUERY var (a lone OPS when n = 0), length 3n + 2V + 3 (n ≥ 1), like the
// paper's one-swap-per-line program. Without it, which adjacent variable tokens form a pair is only known by counting
// from OPS (a parity), so a model must first learn that count before it can even read the swaps.
// Answer token: a bit token for the two recall tasks, the address token of the final pointer value (addr 0..4) for
// state tracking. Loss and accuracy are taken only at the last input position (whose next token is the answer).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hlm {

enum class SynthTask { StateTracking, Recall, StateBasedRecall };

inline constexpr int kSynthVariables = 5;

// "state_tracking" | "recall" | "state_based_recall"; input error naming `what` otherwise.
SynthTask synth_task_from_name(std::string_view name, std::string_view what = "task");
const char* synth_task_name(SynthTask task);
// Whether the task's difficulty is the swap count n (state tracking, state-based recall) or the array size m (recall).
bool synth_task_uses_swaps(SynthTask task);
bool synth_task_uses_bits(SynthTask task);

struct SynthVocab {
  int64_t max_address = 0;  // M_max: address tokens exist for 0..M_max−1

  static constexpr int32_t kPad = 0, kInit = 1, kOps = 2, kQuery = 3, kBit0 = 4, kVar0 = 6, kAddr0 = 11;
  int64_t size() const { return kAddr0 + max_address; }
  int32_t bit(int b) const { return kBit0 + b; }
  int32_t var(int v) const { return kVar0 + v; }
  int32_t addr(int64_t i) const;  // input error when i ≥ max_address
};

struct SynthItem {
  SynthTask task = SynthTask::StateTracking;
  int64_t n = 0, m = 0;                          // swaps; bits (0 for state tracking)
  std::vector<int> bits;                         // m values in {0, 1} (empty for state tracking)
  int variables = kSynthVariables;               // V: pointers in use (a.. the V-th)
  std::vector<int64_t> init;                     // start values of the V pointers (empty for recall)
  std::vector<std::pair<int, int>> swaps;        // variable-index pairs
  int64_t query = 0;                             // variable index (recall: the literal index)
  int64_t answer = 0;                            // bit (recall tasks) or pointer value (state tracking)
  bool moved = false;                            // final(q) ≠ init(q) (state tracking and state-based recall)
  std::vector<int32_t> tokens;                   // encoded input
  int32_t answer_token = 0;
};

// Which sample an item belongs to: train and eval items come from different RNG streams (fresh held-out items).
enum class SynthSplit : uint64_t { Train = 1, Eval = 2 };

struct SynthItemKey {
  uint64_t seed = 0;
  SynthSplit split = SynthSplit::Train;
  uint64_t index = 0;  // item number within (task, n, m, split)
};

struct SynthGenOptions {
  bool no_undo = false;            // forbid repeating the previous swap's pair
  int variables = kSynthVariables; // V in 2..5
  bool swap_delimiter = false;     // OPS before every swap pair (encoding above)
};

// One item. n ≥ 0; m ≥ 1 for recall, m ≥ V for state-based recall; every address used must be < vocab.max_address.
// Input errors name the offending value.
SynthItem synth_generate(SynthTask task, int64_t n, int64_t m, const SynthItemKey& key, const SynthVocab& vocab,
                         const SynthGenOptions& options = {});

// Decodes `tokens` back into bits / init / swaps / query (inverse of the encoding, with or without swap delimiters;
// input error on malformed input). The answer fields are left zero. Used by tests.
SynthItem synth_decode(SynthTask task, const std::vector<int32_t>& tokens, const SynthVocab& vocab,
                       int variables = kSynthVariables);

// Input length in tokens for (task, n, m).
int64_t synth_sequence_length(SynthTask task, int64_t n, int64_t m, int variables = kSynthVariables,
                              bool swap_delimiter = false);

// The item as one JSON object (fields: task, n, m, bits (absent for state tracking), init, swaps, query, answer,
// answer_token, moved (absent for recall), tokens), one line.
std::string synth_item_json(const SynthItem& item);

}  // namespace hlm
