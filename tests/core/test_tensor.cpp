// Tensor views, copies and conversions; the activation arena; the counter-based RNG.
#include <gtest/gtest.h>

#include <cstdio>
#include <omp.h>

#include <set>

#include "core/arena.h"
#include "core/env_switch.h"
#include "core/rng.h"
#include "core/tensor.h"

using namespace hlm;

TEST(Tensor, ZerosIsContiguousAndAligned) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  EXPECT_EQ(t.stride(0), 12);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t.f32()[i], 0.0f);
}

TEST(Tensor, SliceSelectAndContiguousCopy) {
  Tensor t = Tensor::zeros({3, 4});
  for (int i = 0; i < 12; ++i) t.f32()[i] = static_cast<float>(i);
  Tensor col = t.select(1, 2);  // [3], stride 4
  EXPECT_EQ(col.shape(), Shape({3}));
  EXPECT_FALSE(col.is_contiguous());
  Tensor c = col.contiguous();
  EXPECT_EQ(c.f32()[0], 2.0f);
  EXPECT_EQ(c.f32()[2], 10.0f);
  Tensor rows = t.slice(0, 1, 3);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.f32()[0], 4.0f);
  EXPECT_THROW(t.slice(0, 2, 4), Error);
  EXPECT_THROW(col.reshape({3, 1}), Error);
  EXPECT_EQ(t.reshape({2, 6}).dim(1), 6);
  EXPECT_THROW(t.reshape({5, 2}), Error);
}

TEST(Tensor, ConvertsBetweenFloatTypes) {
  Tensor t = Tensor::zeros({4});
  float vals[4] = {1.0f, -2.5f, 3.140625f, 65504.0f};
  std::copy(vals, vals + 4, t.f32());
  Tensor b = t.to(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  Tensor back = b.to(DType::F32);
  EXPECT_EQ(back.f32()[0], 1.0f);
  EXPECT_EQ(back.f32()[2], 3.140625f);
  Tensor h = b.to(DType::F16).to(DType::F32);
  EXPECT_EQ(h.f32()[1], -2.5f);
}

TEST(Arena, MarkReleaseReusesMemory) {
  Arena arena(1024);
  void* a = arena.allocate(100);
  const Arena::Mark m = arena.mark();
  void* b = arena.allocate(2000);  // larger than a block: its own block
  EXPECT_NE(a, b);
  arena.release(m);
  EXPECT_EQ(arena.bytes_in_use(), 128u);
  void* c = arena.allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 64, 0u);
  arena.reset();
  EXPECT_EQ(arena.bytes_in_use(), 0u);
  EXPECT_EQ(arena.allocate(100), a);  // first block reused
  EXPECT_GE(arena.high_water(), 2048u);
}

// tensor() pieces are zero-filled even where a released piece left other values; allocate() promises nothing, and
// under HLM_ARENA_POISON=on (read once per process: ctest's arena_poison_* entries run whole test programs with it)
// every piece it hands out holds 0xFF bytes, fresh block or reused.
TEST(Arena, TensorsAreZeroedAndPoisonFillsRawPieces) {
  const bool poison = env_switch("HLM_ARENA_POISON", false);  // the arena's own parser
  Arena arena(4096);
  const Arena::Mark m = arena.mark();
  auto* raw = static_cast<unsigned char*>(arena.allocate(256));
  if (poison) {
    for (int i = 0; i < 256; ++i) ASSERT_EQ(raw[i], 0xFF) << i;
  }
  for (int i = 0; i < 256; ++i) raw[i] = 0x5A;
  arena.release(m);
  const Tensor t = arena.tensor({64});  // the same bytes again
  ASSERT_EQ(static_cast<const void*>(t.f32()), static_cast<const void*>(raw));
  for (int i = 0; i < 64; ++i) EXPECT_EQ(t.f32()[i], 0.0f) << i;
  arena.release(m);
  auto* again = static_cast<unsigned char*>(arena.allocate(256));
  ASSERT_EQ(again, raw);
  if (poison) {
    for (int i = 0; i < 256; ++i) ASSERT_EQ(again[i], 0xFF) << "reused piece, byte " << i;
  }
  auto* fresh = static_cast<unsigned char*>(arena.allocate(8192));  // a block of its own
  if (poison) {
    for (int i = 0; i < 8192; ++i) ASSERT_EQ(fresh[i], 0xFF) << "fresh block, byte " << i;
  }
  std::printf("[check] arena poison %s\n", poison ? "on: raw pieces held 0xFF" : "off");
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123 known-answer test for philox4x32_10: counter 0, key 0.
  const auto w = philox4x32(0, 0, 0);
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[1], 0xe169c58du);
  EXPECT_EQ(w[2], 0xbc57ac4cu);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
}

TEST(Rng, IndependentOfThreadCount) {
  std::vector<float> one(200000), many(200000);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  rng_fill_normal(one.data(), one.size(), 0.0f, 1.0f, 7, 3);
  omp_set_num_threads(4);
  rng_fill_normal(many.data(), many.size(), 0.0f, 1.0f, 7, 3);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, many);
  double mean = 0, var = 0;
  for (float x : one) mean += x;
  mean /= one.size();
  for (float x : one) var += (x - mean) * (x - mean);
  var /= one.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_NE(rng_uniform(7, 3, 0), rng_uniform(7, 4, 0));  // streams differ
}
