// The CPU inference engine against one full forward (Model::forward, all logits) over the same tokens, for every
// architecture: a prompt prefilled in one chunk, in several chunks or token by token, then decoded token by token,
// gives at every step the logits of the full forward's row at that position; decoding several sequences of different
// lengths together gives each one's logits alone.
//
// Tolerance: 2e-4 · (1 + max |logit|) on each row. Both paths store fp32 and use the same ops; attention over the cache
// repeats the full attention's operation order exactly (tests/infer/test_attention_cache.cpp) and the GDN state is the
// recurrent form's own (double accumulation, rounded to fp32 between calls); a Mamba-2 layer runs the chunked SSD form
// in prefill steps and the recurrent form in decode steps, both summing in double with the fp32 state carried between
// steps, against the full forward's one chunked pass (fp32 rounding, ~1e-7). What differs most is the row count of the
// projections' OpenBLAS sgemm calls (1 row in decode, T rows in the full forward), which changes their fp32 summation
// blocking: ~1e-6 relative per projection, through a few layers and the LM head. Measured worst case is printed.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "infer/cpu_engine.h"
#include "infer_models.h"

using namespace hlm;
using namespace hlm::test;

namespace {

constexpr double kRelTol = 2e-4;

// Max |a - b| over a row, relative to 1 + max |b|.
double row_error(const float* a, const float* b, int64_t V) {
  double diff = 0.0, scale = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    diff = std::max(diff, std::abs(double(a[v]) - double(b[v])));
    scale = std::max(scale, std::abs(double(b[v])));
  }
  return diff / (1.0 + scale);
}

Tensor full_logits(Model& model, const std::vector<int32_t>& ids) {
  TokenBatch b;
  b.add_sequence(ids);
  return model.forward(b, {.all_logits = true});
}

MemoryPlan plan_for(const Model& model, int64_t sequences, int64_t tokens_each, int64_t block_size = 4) {
  MemoryRequest r;
  r.max_sequences = sequences;
  r.block_size = block_size;
  r.kv_blocks = sequences * ((tokens_each + block_size - 1) / block_size);
  return memory_plan_build(model.config(), r);
}

// Prefills `ids` [0, prompt) in chunks of `chunk`, checks the logits after each chunk, then decodes the rest one
// token at a time (teacher-forced), checking every step. Returns the worst relative error.
double prefill_then_decode(Model& model, const std::vector<int32_t>& ids, int64_t prompt, int64_t chunk) {
  const Tensor expect = full_logits(model, ids);
  const int64_t V = model.config().vocab_size, L = static_cast<int64_t>(ids.size());
  auto engine = make_cpu_engine(model, plan_for(model, 1, L));
  const int slot = engine->open_sequence(L);
  EXPECT_GE(slot, 0);
  double worst = 0.0;
  for (int64_t begin = 0; begin < L;) {
    const int64_t end = begin < prompt ? std::min(prompt, begin + chunk) : begin + 1;
    TokenBatch b;
    b.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
    const int slots[1] = {slot};
    const Tensor got = engine->step(slots, b);
    EXPECT_EQ(engine->sequence_length(slot), end);
    const double e = row_error(got.f32(), expect.f32() + (end - 1) * V, V);
    EXPECT_LE(e, kRelTol) << "after " << end << " tokens (chunk " << chunk << ")";
    worst = std::max(worst, e);
    begin = end;
  }
  return worst;
}

class EngineParity : public ::testing::TestWithParam<InferModelCase> {};

}  // namespace

TEST_P(EngineParity, PrefillInOneChunkThenDecode) {
  Model model = GetParam().make();
  const std::vector<int32_t> ids = random_ids(29, model.config().vocab_size, 1);
  const double worst = prefill_then_decode(model, ids, 17, 1000);
  std::printf("[%s] one chunk + decode: worst relative logit error %.3g\n", GetParam().name.c_str(), worst);
}

TEST_P(EngineParity, PrefillInSeveralChunksThenDecode) {
  Model model = GetParam().make();
  const std::vector<int32_t> ids = random_ids(29, model.config().vocab_size, 2);
  double worst = 0.0;
  for (const int64_t chunk : {5, 8}) worst = std::max(worst, prefill_then_decode(model, ids, 21, chunk));
  std::printf("[%s] chunks of 5 and 8 + decode: worst relative logit error %.3g\n", GetParam().name.c_str(), worst);
}

TEST_P(EngineParity, TokenByToken) {
  Model model = GetParam().make();
  const std::vector<int32_t> ids = random_ids(20, model.config().vocab_size, 3);
  const double worst = prefill_then_decode(model, ids, 20, 1);
  std::printf("[%s] token by token: worst relative logit error %.3g\n", GetParam().name.c_str(), worst);
}

TEST_P(EngineParity, ChunkingDoesNotChangeTheLastLogits) {
  // One chunk, several chunks and token by token agree with each other (the same bound as against the forward).
  Model model = GetParam().make();
  const std::vector<int32_t> ids = random_ids(23, model.config().vocab_size, 4);
  const int64_t V = model.config().vocab_size, L = 23;
  std::vector<Tensor> last;
  for (const int64_t chunk : {23, 6, 1}) {
    auto engine = make_cpu_engine(model, plan_for(model, 1, L));
    const int slot = engine->open_sequence(L);
    Tensor logits;
    for (int64_t begin = 0; begin < L; begin += chunk) {
      TokenBatch b;
      b.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + std::min(L, begin + chunk)));
      const int slots[1] = {slot};
      logits = engine->step(slots, b);
    }
    last.push_back(logits);
  }
  const double e6 = row_error(last[1].f32(), last[0].f32(), V), e1 = row_error(last[2].f32(), last[0].f32(), V);
  EXPECT_LE(e6, kRelTol);
  EXPECT_LE(e1, kRelTol);
  std::printf("[%s] last logits, chunks of 6 / token by token vs one chunk: %.3g / %.3g\n", GetParam().name.c_str(),
              e6, e1);
}

TEST_P(EngineParity, BatchedDecodeOfDifferentLengthsEqualsEachAlone) {
  Model model = GetParam().make();
  const int64_t V = model.config().vocab_size;
  const std::vector<int64_t> prompts{3, 11, 6}, totals{12, 19, 9};
  std::vector<std::vector<int32_t>> ids;
  std::vector<Tensor> expect;
  for (size_t s = 0; s < prompts.size(); ++s) {
    ids.push_back(random_ids(totals[s], V, 10 + s));
    expect.push_back(full_logits(model, ids[s]));
  }
  auto engine = make_cpu_engine(model, plan_for(model, 3, 19));
  std::vector<int> slots;
  for (size_t s = 0; s < prompts.size(); ++s) {  // prefill each alone
    slots.push_back(engine->open_sequence(totals[s]));
    ASSERT_GE(slots.back(), 0);
    TokenBatch b;
    b.add_sequence(std::vector<int32_t>(ids[s].begin(), ids[s].begin() + prompts[s]));
    const int one[1] = {slots.back()};
    const Tensor got = engine->step(one, b);
    EXPECT_LE(row_error(got.f32(), expect[s].f32() + (prompts[s] - 1) * V, V), kRelTol);
  }
  // Decode together; a sequence leaves the batch when it reaches its total (the batch shrinks).
  std::vector<int64_t> pos = prompts;
  while (true) {
    TokenBatch b;
    std::vector<int> step_slots;
    std::vector<size_t> which;
    for (size_t s = 0; s < prompts.size(); ++s)
      if (pos[s] < totals[s]) {
        b.add_sequence({ids[s][pos[s]]});
        step_slots.push_back(slots[s]);
        which.push_back(s);
      }
    if (which.empty()) break;
    const Tensor got = engine->step(step_slots, b);
    for (size_t i = 0; i < which.size(); ++i) {
      const size_t s = which[i];
      EXPECT_LE(row_error(got.f32() + static_cast<int64_t>(i) * V, expect[s].f32() + pos[s] * V, V), kRelTol)
          << "sequence " << s << " at position " << pos[s];
      if (++pos[s] == totals[s]) engine->close_sequence(slots[s]);
    }
  }
  EXPECT_EQ(engine->state_usage().kv_blocks_in_use, 0);
  EXPECT_EQ(engine->state_usage().bytes_in_use(), 0);
}

TEST_P(EngineParity, ReusedSlotStartsFromZeroState) {
  // A slot freed by one sequence and taken by the next must not leak the previous GDN state or KV blocks.
  Model model = GetParam().make();
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> a = random_ids(13, V, 20), b = random_ids(9, V, 21);
  const Tensor expect = full_logits(model, b);
  auto engine = make_cpu_engine(model, plan_for(model, 1, 13));
  for (const auto* ids : {&a, &b}) {
    const int slot = engine->open_sequence(static_cast<int64_t>(ids->size()));
    ASSERT_EQ(slot, 0);
    TokenBatch batch;
    batch.add_sequence(*ids);
    const int one[1] = {slot};
    const Tensor got = engine->step(one, batch);
    if (ids == &b) {
      EXPECT_LE(row_error(got.f32(), expect.f32() + 8 * V, V), kRelTol);
    }
    engine->close_sequence(slot);
  }
}

TEST_P(EngineParity, AdvanceUncomputedRunsTheNextChunkAtTheSkippedPositions) {
  // advance_uncomputed (bench_generate --search-context's last-chunk measurement) takes the blocks a real prefill of
  // n tokens would take, writes nothing, and puts the next chunk at positions n, n+1, .... Checked on a reused slot:
  // a sequence that prefilled P (n = 11 tokens, not a whole number of blocks) and C is closed; the next one takes the
  // same blocks in the same order, advances n and steps C. With only full-attention layers its K/V rows are then P's,
  // so C's logits must equal the first sequence's bit for bit — a wrong position (RoPE), block or context length
  // would change them. Recurrent layers start the new sequence from zero state (not P's), so there only the
  // bookkeeping and finite logits are checked.
  Model model = GetParam().make();
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size, n = 11;
  const std::vector<int32_t> p = random_ids(n, V, 30), chunk = random_ids(6, V, 31);
  const int64_t L = n + static_cast<int64_t>(chunk.size());
  auto engine = make_cpu_engine(model, plan_for(model, 1, L));
  int slot = engine->open_sequence(L);
  ASSERT_EQ(slot, 0);
  step_one(*engine, slot, p);
  const Tensor expect = step_one(*engine, slot, chunk);
  engine->close_sequence(slot);

  slot = engine->open_sequence(L);
  ASSERT_EQ(slot, 0);
  EXPECT_THROW(engine->advance_uncomputed(slot, 0, SkippedRows::kAsTheyAre), Error);
  EXPECT_THROW(engine->advance_uncomputed(slot, L + 1, SkippedRows::kAsTheyAre), Error);  // past the reservation
  EXPECT_EQ(engine->sequence_length(slot), 0);
  engine->advance_uncomputed(slot, n, SkippedRows::kAsTheyAre);
  EXPECT_EQ(engine->sequence_length(slot), n);
  EXPECT_EQ(engine->state_usage().kv_blocks_in_use, (n + 3) / 4);  // blocks of 4 tokens (plan_for)
  const Tensor got = step_one(*engine, slot, chunk);
  EXPECT_EQ(engine->sequence_length(slot), L);
  bool all_attention = true;
  for (const LayerKind k : c.layer_kinds) all_attention = all_attention && k == LayerKind::FullAttention;
  for (int64_t v = 0; v < V; ++v) ASSERT_TRUE(std::isfinite(got.f32()[v])) << v;
  if (all_attention) {
    int64_t differing = 0;
    for (int64_t v = 0; v < V; ++v) differing += got.f32()[v] != expect.f32()[v];
    EXPECT_EQ(differing, 0) << "of " << V << " logits";
  }
  engine->close_sequence(slot);
  EXPECT_THROW(engine->advance_uncomputed(slot, 1, SkippedRows::kAsTheyAre), Error);  // not running
}

TEST_P(EngineParity, AdvanceUncomputedWithRandomRowsWritesThemInEveryAttentionLayer) {
  // SkippedRows::kRandom (bench_generate's sampled chunks: operands of a real cache's order, not a fresh pool's
  // zeros) writes skipped_row_values into the skipped positions' K/V rows. On fresh engines the next chunk's logits
  // then differ from those over the untouched (zero) rows wherever the model has an attention layer, are the same on
  // two engines (a fixed hash), and the bookkeeping is advance's: the same length and blocks.
  Model model = GetParam().make();
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size, n = 4101;  // more than one block of written rows (kSkippedRowsBlock), not whole
  const std::vector<int32_t> chunk = random_ids(5, V, 32);
  const int64_t L = n + static_cast<int64_t>(chunk.size());
  const auto advanced_chunk = [&](SkippedRows rows, int64_t* blocks) {
    auto engine = make_cpu_engine(model, plan_for(model, 1, L));
    const int slot = engine->open_sequence(L);
    engine->advance_uncomputed(slot, n, rows);
    EXPECT_EQ(engine->sequence_length(slot), n);
    *blocks = engine->state_usage().kv_blocks_in_use;
    return step_one(*engine, slot, chunk);
  };
  int64_t blocks_zero = 0, blocks_random = 0, blocks_again = 0;
  const Tensor zero = advanced_chunk(SkippedRows::kAsTheyAre, &blocks_zero);
  const Tensor random = advanced_chunk(SkippedRows::kRandom, &blocks_random);
  const Tensor again = advanced_chunk(SkippedRows::kRandom, &blocks_again);
  EXPECT_EQ(blocks_zero, (n + 3) / 4);
  EXPECT_EQ(blocks_random, blocks_zero);
  EXPECT_EQ(blocks_again, blocks_zero);
  int64_t differ_from_zero = 0, differ_again = 0;
  for (int64_t v = 0; v < V; ++v) {
    ASSERT_TRUE(std::isfinite(random.f32()[v])) << v;
    differ_from_zero += random.f32()[v] != zero.f32()[v];
    differ_again += random.f32()[v] != again.f32()[v];
  }
  EXPECT_EQ(differ_again, 0) << "of " << V << " logits";
  if (has_attention_layer(c)) {
    EXPECT_GT(differ_from_zero, V / 2) << "of " << V << " logits";
  } else {
    EXPECT_EQ(differ_from_zero, 0) << "of " << V << " logits (no attention layer: nothing to write)";
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, EngineParity, ::testing::ValuesIn(infer_model_cases()),
                         [](const auto& info) { return info.param.name; });
