// Shared sequence bookkeeping of the inference engines (contracts in sequence_slots.h).
#include "infer/sequence_slots.h"

#include <algorithm>

#include "core/error.h"

namespace hlm {

int64_t StateUsage::bytes_in_use() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.bytes_in_use;
  return n;
}

int64_t StateUsage::bytes_reserved() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.bytes_reserved;
  return n;
}

SequenceSlots::SequenceSlots(const MemoryPlan& plan)
    : plan_(plan),
      blocks_(plan.num_blocks, plan.block_size, plan.max_sequences),
      used_(static_cast<size_t>(plan.max_sequences), false) {}

int SequenceSlots::open(int64_t max_tokens) {
  HLM_CHECK_INPUT(max_tokens > 0, "a sequence needs room for at least one token");
  const auto free_slot = std::find(used_.begin(), used_.end(), false);
  if (free_slot == used_.end()) return -1;
  const int slot = static_cast<int>(free_slot - used_.begin());
  if (!blocks_.reserve(slot, max_tokens)) return -1;
  used_[static_cast<size_t>(slot)] = true;
  return slot;
}

void SequenceSlots::close(int slot) {
  check(slot);
  blocks_.release(slot);
  used_[static_cast<size_t>(slot)] = false;
}

int64_t SequenceSlots::length(int slot) const {
  check(slot);
  return blocks_.length(slot);
}

void SequenceSlots::check(int slot) const {
  HLM_CHECK(slot >= 0 && slot < plan_.max_sequences && used_[static_cast<size_t>(slot)], "sequence slot ", slot,
            " is not running");
}

std::vector<int64_t> SequenceSlots::advance(int slot, int64_t n) {
  check(slot);
  HLM_CHECK_INPUT(n >= 1, "advance: ", n, " positions (at least 1)");
  HLM_CHECK_INPUT(blocks_.length(slot) + n <= blocks_.reserved_tokens(slot), "advance: slot ", slot, " holds ",
                  blocks_.length(slot), " of its ", blocks_.reserved_tokens(slot), " reserved tokens; ", n,
                  " more do not fit");
  std::vector<int64_t> cache_slots(static_cast<size_t>(n));
  blocks_.append(slot, n, cache_slots.data());
  return cache_slots;
}

StepPlan SequenceSlots::plan_step(std::span<const int> slots, const TokenBatch& tokens, int64_t vocab_size) {
  tokens.validate();
  const auto N = static_cast<int64_t>(slots.size());
  HLM_CHECK(tokens.num_sequences() == N, "step: ", tokens.num_sequences(), " token sequences for ", N, " slots");
  HLM_CHECK(N > 0, "step: no sequences");
  for (const int32_t id : tokens.ids)
    HLM_CHECK_INPUT(id >= 0 && id < vocab_size, "token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
  for (int64_t n = 0; n < N; ++n) {
    check(slots[n]);
    const int64_t len = tokens.cu_seqlens[n + 1] - tokens.cu_seqlens[n];
    HLM_CHECK(len > 0, "step: sequence ", n, " has no new tokens");
    HLM_CHECK(std::count(slots.begin(), slots.end(), slots[n]) == 1, "step: slot ", slots[n], " given twice");
    HLM_CHECK(blocks_.length(slots[n]) + len <= blocks_.reserved_tokens(slots[n]), "step: slot ", slots[n],
              " would grow past its reservation");
  }
  StepPlan p;
  p.tokens = tokens.total_tokens();
  p.sequences = N;
  p.positions.resize(static_cast<size_t>(p.tokens));
  p.cache_slots.resize(static_cast<size_t>(p.tokens));
  p.context.resize(static_cast<size_t>(N));
  p.last_rows.resize(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t begin = tokens.cu_seqlens[n], len = tokens.cu_seqlens[n + 1] - begin;
    const int64_t start = blocks_.length(slots[n]);
    for (int64_t i = 0; i < len; ++i) p.positions[begin + i] = static_cast<int32_t>(start + i);
    blocks_.append(slots[n], len, p.cache_slots.data() + begin);
    p.context[n] = start + len;
    p.last_rows[n] = static_cast<int32_t>(begin + len - 1);
    p.max_len = std::max(p.max_len, len);
    p.max_context = std::max(p.max_context, p.context[n]);
    p.max_blocks = std::max<int64_t>(p.max_blocks, static_cast<int64_t>(blocks_.block_table(slots[n]).size()));
  }
  p.tables.assign(static_cast<size_t>(N * p.max_blocks), -1);
  for (int64_t n = 0; n < N; ++n) {
    const auto& t = blocks_.block_table(slots[n]);
    std::copy(t.begin(), t.end(), p.tables.begin() + n * p.max_blocks);
  }
  return p;
}

StateUsage SequenceSlots::usage(std::span<const LayerKind> kinds, std::span<const int64_t> reserved_bytes) const {
  HLM_CHECK(kinds.size() == reserved_bytes.size(), "state usage: ", kinds.size(), " layers, ", reserved_bytes.size(),
            " pool sizes");
  StateUsage u;
  u.kv_blocks_in_use = blocks_.blocks_in_use();
  for (int slot = 0; slot < static_cast<int>(used_.size()); ++slot)
    if (used_[static_cast<size_t>(slot)]) {
      ++u.running_sequences;
      u.tokens_held += blocks_.length(slot);
    }
  for (size_t i = 0; i < kinds.size(); ++i) {
    LayerStateBytes b{kinds[i]};
    b.bytes_reserved = reserved_bytes[i];
    if (kinds[i] == LayerKind::FullAttention)
      b.bytes_in_use = plan_.num_blocks > 0 ? b.bytes_reserved / plan_.num_blocks * u.kv_blocks_in_use : 0;
    else
      b.bytes_in_use = b.bytes_reserved / plan_.max_sequences * u.running_sequences;
    u.layers.push_back(b);
  }
  return u;
}

}  // namespace hlm
