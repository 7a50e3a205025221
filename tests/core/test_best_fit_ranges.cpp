// BestFitRanges (core/best_fit_ranges.h): best fit, splitting at split_min, merging of free neighbours within a
// segment only, whole free segments released, bad frees refused. Addresses are made-up integers.
#include <gtest/gtest.h>

#include <random>

#include "core/best_fit_ranges.h"
#include "core/error.h"

using hlm::BestFitRanges;

namespace {

constexpr size_t MiB = size_t{1} << 20;

TEST(BestFitRanges, TakesTheSmallestFreeBlockThatFits) {
  BestFitRanges r(MiB);
  r.add_segment(100 * MiB, 8 * MiB);
  r.add_segment(200 * MiB, 3 * MiB);
  r.add_segment(300 * MiB, 5 * MiB);
  const auto t = r.take(4 * MiB);  // 5 MiB is the best fit (3 is too small, 8 is larger)
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->addr, 300 * MiB);
  EXPECT_EQ(t->bytes, 4 * MiB);  // the rest (1 MiB) reaches split_min: cut
  EXPECT_EQ(r.free_bytes(), 12 * MiB);
  const auto u = r.take(3 * MiB);  // exact fit: the 3-MiB segment
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->addr, 200 * MiB);
  EXPECT_EQ(r.largest_free(), 8 * MiB);
  EXPECT_FALSE(r.take(9 * MiB).has_value());
  EXPECT_EQ(r.segment_bytes(), 16 * MiB);
}

TEST(BestFitRanges, RestUnderSplitMinStaysWithTheBlock) {
  BestFitRanges r(MiB);
  r.add_segment(0x10000000, 4 * MiB);
  const auto t = r.take(3 * MiB + 512);  // the rest is 1 MiB - 512: not cut
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->bytes, 4 * MiB);
  EXPECT_EQ(r.free_bytes(), 0u);
  EXPECT_EQ(r.give_back(t->addr), 4 * MiB);
  EXPECT_EQ(r.free_bytes(), 4 * MiB);
}

TEST(BestFitRanges, FreedNeighboursMergeWithinASegmentOnly) {
  BestFitRanges r(MiB);
  // Two segments that touch: blocks at their border must not merge across it.
  r.add_segment(0, 4 * MiB);
  r.add_segment(4 * MiB, 4 * MiB);
  const auto a = r.take(2 * MiB), b = r.take(2 * MiB), c = r.take(2 * MiB), d = r.take(2 * MiB);
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(r.free_bytes(), 0u);
  EXPECT_EQ(a->addr, 0u);
  EXPECT_EQ(b->addr, 2 * MiB);
  EXPECT_EQ(c->addr, 4 * MiB);
  EXPECT_EQ(d->addr, 6 * MiB);
  r.give_back(b->addr);
  r.give_back(c->addr);  // b and c are adjacent addresses but in different segments
  EXPECT_EQ(r.largest_free(), 2 * MiB);
  EXPECT_FALSE(r.take(3 * MiB).has_value());
  r.give_back(a->addr);  // a + b: the whole first segment
  EXPECT_EQ(r.largest_free(), 4 * MiB);
  const auto released = r.release_free_segments();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].first, 0u);
  EXPECT_EQ(released[0].second, 4 * MiB);
  EXPECT_EQ(r.segments(), 1u);
  EXPECT_EQ(r.free_bytes(), 2 * MiB);  // c's block in the second segment
  r.give_back(d->addr);                // c + d merge (d's previous neighbour)
  EXPECT_EQ(r.largest_free(), 4 * MiB);
  EXPECT_EQ(r.release_free_segments().size(), 1u);
  EXPECT_EQ(r.segments(), 0u);
  EXPECT_EQ(r.segment_bytes(), 0u);
  EXPECT_EQ(r.free_bytes(), 0u);
}

TEST(BestFitRanges, BadFreesAndOverlapsAreRefused) {
  BestFitRanges r(MiB);
  r.add_segment(16 * MiB, 4 * MiB);
  EXPECT_THROW(r.add_segment(18 * MiB, 4 * MiB), hlm::Error);  // overlaps from inside
  EXPECT_THROW(r.add_segment(14 * MiB, 4 * MiB), hlm::Error);  // overlaps from below
  EXPECT_THROW(r.add_segment(1, 0), hlm::Error);
  const auto t = r.take(MiB);
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(r.is_taken(t->addr));
  EXPECT_FALSE(r.is_taken(t->addr + 512));
  EXPECT_THROW(r.give_back(t->addr + 512), hlm::Error);  // not a block start
  r.give_back(t->addr);
  EXPECT_FALSE(r.is_taken(t->addr));
  EXPECT_THROW(r.give_back(t->addr), hlm::Error);  // freed twice
  EXPECT_THROW(r.take(0), hlm::Error);
}

// Random takes and frees against a byte map: taken blocks never overlap, stay inside their segment, free_bytes is
// the segments minus the taken bytes, and after everything is freed each segment is one free block again.
TEST(BestFitRanges, RandomWorkloadKeepsTheBookkeepingExact) {
  BestFitRanges r(MiB);
  const size_t seg = 16 * MiB;
  for (uintptr_t s = 0; s < 4; ++s) r.add_segment(s * seg, seg);
  std::vector<uint8_t> used(4 * seg / 512, 0);  // one flag per 512-byte unit
  std::vector<BestFitRanges::Taken> live;
  std::mt19937_64 rng(7);
  size_t taken_bytes = 0;
  for (int i = 0; i < 4000; ++i) {
    if (!live.empty() && (rng() % 3 == 0 || live.size() > 40)) {
      const size_t k = rng() % live.size();
      EXPECT_EQ(r.give_back(live[k].addr), live[k].bytes);
      for (size_t u = live[k].addr / 512; u < (live[k].addr + live[k].bytes) / 512; ++u) used[u] = 0;
      taken_bytes -= live[k].bytes;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const size_t want = (1 + rng() % (6 * 2048)) * 512;  // 512 B .. 6 MiB
      const auto t = r.take(want);
      if (!t) continue;
      ASSERT_GE(t->bytes, want);
      ASSERT_LT(t->bytes - want, MiB);
      ASSERT_EQ(t->addr / seg, (t->addr + t->bytes - 1) / seg) << "a block crosses a segment border";
      for (size_t u = t->addr / 512; u < (t->addr + t->bytes) / 512; ++u) {
        ASSERT_EQ(used[u], 0) << "blocks overlap";
        used[u] = 1;
      }
      taken_bytes += t->bytes;
      live.push_back(*t);
    }
    ASSERT_EQ(r.free_bytes() + taken_bytes, 4 * seg);
  }
  for (const auto& t : live) r.give_back(t.addr);
  EXPECT_EQ(r.largest_free(), seg);
  EXPECT_EQ(r.release_free_segments().size(), 4u);
  EXPECT_EQ(r.free_bytes(), 0u);
}

}  // namespace
