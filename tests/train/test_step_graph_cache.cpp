// The host bookkeeping of the GPU trainer's captured steps (train/step_graph_cache.h): which steps run eagerly, which
// are captured and which replay, the failed keys, the least-recently-used eviction, and the HLM_CUDA_GRAPHS switch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "train/step_graph_cache.h"

using namespace hlm;

namespace {

struct FakeGraph {
  int id = 0;
};

const StepGraphKey kA{4096, 65, 110}, kB{4224, 66, 110}, kC{4096, 66, 110}, kD{4096, 65, 107};

TEST(StepGraphCache, FirstSightingEagerSecondCapturesThenReplays) {
  StepGraphCache<FakeGraph> cache(4);
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Eager);
  EXPECT_EQ(cache.decide(kB), StepGraphAction::Eager);
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Capture);
  EXPECT_EQ(cache.entry(kA), nullptr);
  cache.captured(kA, std::make_unique<FakeGraph>(FakeGraph{1}));
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Replay);
  ASSERT_NE(cache.entry(kA), nullptr);
  EXPECT_EQ(cache.entry(kA)->id, 1);
  // Keys differ in any one field: C (sequences) and D (longest sequence) are new shapes.
  EXPECT_EQ(cache.decide(kC), StepGraphAction::Eager);
  EXPECT_EQ(cache.decide(kD), StepGraphAction::Eager);
  EXPECT_EQ(cache.stats().captures, 1);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(StepGraphCache, AFailedCaptureStaysEager) {
  StepGraphCache<FakeGraph> cache(4);
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Eager);
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Capture);
  cache.failed(kA);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(cache.decide(kA), StepGraphAction::Eager);
  EXPECT_EQ(cache.stats().failures, 1);
  EXPECT_EQ(cache.size(), 0u);
  // Other keys are not affected.
  EXPECT_EQ(cache.decide(kB), StepGraphAction::Eager);
  EXPECT_EQ(cache.decide(kB), StepGraphAction::Capture);
}

TEST(StepGraphCache, EvictsTheLeastRecentlyUsed) {
  StepGraphCache<FakeGraph> cache(2);
  for (const StepGraphKey& k : {kA, kB, kC}) {
    EXPECT_EQ(cache.decide(k), StepGraphAction::Eager);
  }
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Capture);
  cache.captured(kA, std::make_unique<FakeGraph>(FakeGraph{1}));
  EXPECT_EQ(cache.decide(kB), StepGraphAction::Capture);
  cache.captured(kB, std::make_unique<FakeGraph>(FakeGraph{2}));
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Replay);  // A is now more recent than B
  EXPECT_EQ(cache.decide(kC), StepGraphAction::Capture);
  cache.captured(kC, std::make_unique<FakeGraph>(FakeGraph{3}));  // full: B goes
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.entry(kB), nullptr);
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Replay);
  EXPECT_EQ(cache.decide(kC), StepGraphAction::Replay);
  EXPECT_EQ(cache.decide(kB), StepGraphAction::Capture);  // seen before: captured again
}

TEST(StepGraphCache, ClearDropsGraphsButRemembersKeys) {
  StepGraphCache<FakeGraph> cache(4);
  cache.decide(kA);
  cache.decide(kA);
  cache.captured(kA, std::make_unique<FakeGraph>());
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.decide(kA), StepGraphAction::Capture);
}

TEST(StepGraphCache, CountsWhatTheCallerReports) {
  StepGraphCache<FakeGraph> cache(1);
  cache.count_eager();
  cache.count_replay();
  cache.count_replay();
  EXPECT_EQ(cache.stats().eager_steps, 1);
  EXPECT_EQ(cache.stats().replays, 2);
}

TEST(StepGraphCache, EnvironmentSwitch) {
  const char* old = std::getenv("HLM_CUDA_GRAPHS");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("HLM_CUDA_GRAPHS");
  EXPECT_TRUE(step_graphs_enabled(true));
  EXPECT_FALSE(step_graphs_enabled(false));
  setenv("HLM_CUDA_GRAPHS", "off", 1);
  EXPECT_FALSE(step_graphs_enabled(true));
  setenv("HLM_CUDA_GRAPHS", "0", 1);
  EXPECT_FALSE(step_graphs_enabled(true));
  setenv("HLM_CUDA_GRAPHS", "on", 1);
  EXPECT_TRUE(step_graphs_enabled(true));
  EXPECT_FALSE(step_graphs_enabled(false));  // the environment only turns graphs off
  setenv("HLM_CUDA_GRAPHS", "of", 1);        // a typo is refused, not read as the default
  EXPECT_THROW((void)step_graphs_enabled(true), Error);
  if (old != nullptr)
    setenv("HLM_CUDA_GRAPHS", saved.c_str(), 1);
  else
    unsetenv("HLM_CUDA_GRAPHS");
}

}  // namespace
