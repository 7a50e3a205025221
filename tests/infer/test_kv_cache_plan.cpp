// Paged KV-cache bookkeeping (infer/kv_block_allocator.h) and the memory plan (infer/memory_plan.h): sequences of
// different lengths hold ceil(L / block_size) blocks each (less than one block of waste), reservations keep a running
// sequence from finding the pool empty, released blocks are reused, and plan sizes follow the model's shapes and
// Table 1's arithmetic (models/state_size.h) in fp32.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "infer/cpu_engine.h"
#include "infer/kv_block_allocator.h"
#include "infer/memory_plan.h"
#include "infer/state_report.h"
#include "infer_models.h"
#include "models/state_size.h"

using namespace hlm;

TEST(KvBlockAllocator, DifferentLengthsWasteLessThanOneBlockEach) {
  KvBlockAllocator a(/*num_blocks=*/20, /*block_size=*/4, /*max_sequences=*/3);
  const std::vector<int64_t> lengths{1, 9, 16};
  std::set<int64_t> slots_seen;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(a.reserve(s, lengths[s] + 4));
    std::vector<int64_t> slots(static_cast<size_t>(lengths[s]));
    // Append in uneven pieces: the table must not depend on how tokens arrive.
    int64_t done = 0;
    for (int64_t piece = 1; done < lengths[s]; ++piece) {
      const int64_t n = std::min(piece, lengths[s] - done);
      a.append(s, n, slots.data() + done);
      done += n;
    }
    EXPECT_EQ(a.length(s), lengths[s]);
    EXPECT_EQ(static_cast<int64_t>(a.block_table(s).size()), (lengths[s] + 3) / 4);
    for (int64_t p = 0; p < lengths[s]; ++p) {
      EXPECT_EQ(slots[p], int64_t{a.block_table(s)[p / 4]} * 4 + p % 4);
      EXPECT_TRUE(slots_seen.insert(slots[p]).second) << "token slot " << slots[p] << " given twice";
    }
  }
  EXPECT_EQ(a.blocks_in_use(), 1 + 3 + 4);
  const int64_t held = a.blocks_in_use() * 4, tokens = 1 + 9 + 16;
  EXPECT_LT(held - tokens, 3 * 4);  // < one block per sequence
}

TEST(KvBlockAllocator, ReservationsAndReuse) {
  KvBlockAllocator a(6, 4, 3);
  ASSERT_TRUE(a.reserve(0, 12));   // 3 blocks promised
  EXPECT_EQ(a.unpromised_blocks(), 3);
  EXPECT_FALSE(a.reserve(1, 13));  // 4 blocks: only 3 unpromised
  EXPECT_FALSE(a.active(1));
  ASSERT_TRUE(a.reserve(1, 12));
  EXPECT_FALSE(a.reserve(2, 1));   // pool fully promised although no block is taken yet
  EXPECT_EQ(a.free_blocks(), 6);
  std::vector<int64_t> slots(12);
  a.append(0, 5, slots.data());
  EXPECT_EQ(a.blocks_in_use(), 2);
  EXPECT_THROW(a.append(0, 8, slots.data()), Error);  // past its reservation of 12
  a.release(0);
  EXPECT_EQ(a.blocks_in_use(), 0);
  EXPECT_EQ(a.unpromised_blocks(), 3);
  ASSERT_TRUE(a.reserve(0, 8));
  a.append(0, 8, slots.data());
  EXPECT_EQ(a.blocks_in_use(), 2);
  a.release(0);
  a.release(1);
  EXPECT_EQ(a.unpromised_blocks(), 6);
  EXPECT_THROW(a.release(1), Error);
}

TEST(MemoryPlan, SizesFollowTheModelAndTableOne) {
  const ModelConfig c = parse_model_config(test::student_config_json(), "test");
  const MemoryPlan shape = memory_plan_shape(c, 16);
  EXPECT_EQ(shape.attention_layers, 2);
  EXPECT_EQ(shape.gdn_layers, 2);
  const StateSizes t1 = state_sizes(c, 16, 4);  // fp32
  EXPECT_EQ(shape.kv_bytes_per_block, 2 * t1.kv_elements_at_context * 4);
  EXPECT_EQ(shape.gdn_bytes_per_sequence, 2 * (t1.recurrent_state_elements + t1.conv_state_elements) * 4);
}

TEST(MemoryPlan, Bf16KvCacheHalvesTheKvBytesOnly) {
  const ModelConfig c = parse_model_config(test::student_config_json(), "test");
  const MemoryPlan f32 = memory_plan_shape(c, 16), b16 = memory_plan_shape(c, 16, 2);
  EXPECT_EQ(f32.kv_element_bytes, 4);
  EXPECT_EQ(b16.kv_element_bytes, 2);
  EXPECT_EQ(2 * b16.kv_bytes_per_block, f32.kv_bytes_per_block);
  EXPECT_EQ(b16.gdn_bytes_per_sequence, f32.gdn_bytes_per_sequence);  // GDN state stays fp32 (gdn.md)
  MemoryRequest r;
  r.max_sequences = 2;
  r.kv_blocks = 10;
  r.kv_element_bytes = 2;
  const MemoryPlan p = memory_plan_build(c, r);
  EXPECT_EQ(p.kv_element_bytes, 2);
  EXPECT_EQ(p.kv_pool_bytes(), 10 * b16.kv_bytes_per_block);
  // The CPU engine keeps an fp32 cache: a bf16 plan is refused with a message naming --precision.
  Model model = Model::create(c, 3);
  try {
    make_cpu_engine(model, p);
    ADD_FAILURE() << "a bf16 plan was accepted by the CPU engine";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision bf16"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, BudgetCutsSequencesThenBlocks) {
  const ModelConfig c = parse_model_config(test::student_config_json(), "test");
  const MemoryPlan shape = memory_plan_shape(c, 16);
  MemoryRequest r;
  r.max_sequences = 4;
  r.kv_blocks = 40;
  EXPECT_EQ(memory_plan_build(c, r).num_blocks, 40);  // no budget: what was asked
  // Room for 2 slots with one block each but not for 3: slots cut to 2, the rest of the budget goes to blocks.
  const int64_t one = shape.sequence_bytes(1);
  r.budget_bytes = 3 * one - 1;
  const MemoryPlan p = memory_plan_build(c, r);
  EXPECT_EQ(p.max_sequences, 2);
  EXPECT_EQ(p.num_blocks, (3 * one - 1 - 2 * shape.gdn_bytes_per_sequence) / shape.kv_bytes_per_block);
  EXPECT_GE(p.num_blocks, 2);
  EXPECT_LE(p.total_bytes(), *r.budget_bytes);
  EXPECT_GT(p.total_bytes() + shape.kv_bytes_per_block, *r.budget_bytes);  // no whole block left unused
  r.budget_bytes = shape.sequence_bytes(1) - 1;
  EXPECT_THROW(memory_plan_build(c, r), Error);
}

// Granite-4.0-H's Mamba-2 layers (the granitemoehybrid_tiny golden: layers M A M M A, nh 8, P 16, N 12, G 2, conv 4):
// per sequence and layer a conv state of the last K−1 = 3 xBC inputs over Cd = nh·P + 2·G·N = 176 channels and an SSM
// state of nh·P·N = 1,536 floats, fp32: (176·3 + 1,536)·4 = 8,256 bytes; 3 layers, 24,768 bytes per sequence. The
// plan, Table 1's arithmetic (models/state_size.h) and the CPU engine's own buffers all give these numbers.
TEST(MemoryPlan, Mamba2StateIsTheConvAndSsmArithmetic) {
  const ModelConfig c = load_model_config(std::filesystem::path(HLM_GOLDEN_DIR) / "granitemoehybrid_tiny");
  constexpr int64_t kLayerBytes = (176 * 3 + 8 * 16 * 12) * 4;
  static_assert(kLayerBytes == 8256);
  const MemoryPlan shape = memory_plan_shape(c, 16);
  EXPECT_EQ(shape.attention_layers, 2);
  EXPECT_EQ(shape.gdn_layers, 3);  // the recurrent layers: here all Mamba-2
  EXPECT_EQ(shape.gdn_bytes_per_sequence, 3 * kLayerBytes);
  EXPECT_EQ(shape.kv_bytes_per_block, 2 * 2 * 16 * 2 * 16 * 4);  // 2 layers · K+V · 16 tokens · Hkv 2 · D 16 · fp32
  const StateSizes t1 = state_sizes(c, 1, 4);
  EXPECT_EQ(t1.mamba_layers, 3);
  EXPECT_EQ((t1.mamba_conv_state_elements + t1.mamba_ssm_state_elements) * 4, kLayerBytes);
  const MemoryPlan b16 = memory_plan_shape(c, 16, 2);  // a bf16 KV cache leaves the fp32 Mamba-2 state as it is
  EXPECT_EQ(b16.gdn_bytes_per_sequence, 3 * kLayerBytes);

  // The engine's buffers: each Mamba-2 layer reserves its state for every slot and uses it for running sequences.
  Model model = Model::load(std::filesystem::path(HLM_GOLDEN_DIR) / "granitemoehybrid_tiny");
  MemoryRequest r;
  r.max_sequences = 3;
  r.kv_blocks = 4;
  auto engine = make_cpu_engine(model, memory_plan_build(c, r));
  EXPECT_EQ(engine->plan().total_bytes(), 4 * shape.kv_bytes_per_block + 3 * 3 * kLayerBytes);
  const int a = engine->open_sequence(9), b = engine->open_sequence(5);
  TokenBatch batch;
  batch.add_sequence({1, 2, 3, 4, 5, 6, 7});
  batch.add_sequence({9, 8});
  const std::vector<int> slots{a, b};
  engine->step(slots, batch);
  const StateUsage u = engine->state_usage();
  ASSERT_EQ(u.layers.size(), 5u);
  int64_t mamba_in_use = 0;
  for (const LayerStateBytes& l : u.layers) {
    if (l.kind != LayerKind::Mamba2) continue;
    EXPECT_EQ(l.bytes_reserved, 3 * kLayerBytes);
    EXPECT_EQ(l.bytes_in_use, 2 * kLayerBytes);
    mamba_in_use += l.bytes_in_use;
  }
  EXPECT_EQ(mamba_in_use, 3 * 2 * kLayerBytes);
  for (const StateReportRow& row : state_report(c, u))  // generate --state-report: measured = arithmetic
    if (row.kind == LayerKind::Mamba2) EXPECT_EQ(row.measured_bytes, row.table1_bytes);
}
