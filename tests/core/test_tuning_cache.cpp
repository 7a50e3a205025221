// TuningCache (core/tuning_cache.h): a choice recorded by one table is found by a fresh table on the same file (a
// later process); the first line for a key wins, also when two tables (two processes) recorded the same key; scopes
// are kept apart; malformed lines are skipped with one warning and the good ones still found; tabs and line breaks in
// fields cannot split a line; concurrent records from threads leave whole lines; a file that cannot be written is a
// warning and the choice is still kept in memory; the folder is created.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tuning_cache.h"
#include "support/run_binary.h"

using namespace hlm;
using hlm::test::ScratchDir;

namespace {

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace

TEST(TuningCache, RecordedChoiceIsFoundByALaterTable) {
  ScratchDir dir("tuning");
  const std::string path = (dir.path() / "sub" / "folder" / "gemm.tsv").string();  // folders created on record
  {
    TuningCache first(path);
    EXPECT_FALSE(first.find("gemm H200", "m=8192 n=2560 k=9728").has_value());
    first.record("gemm H200", "m=8192 n=2560 k=9728", 3, "#0 0.15 ms #3 0.13 ms");
    EXPECT_EQ(first.find("gemm H200", "m=8192 n=2560 k=9728"), 3);
  }
  TuningCache later(path);
  EXPECT_EQ(later.find("gemm H200", "m=8192 n=2560 k=9728"), 3);
  EXPECT_FALSE(later.find("gemm H100", "m=8192 n=2560 k=9728").has_value());  // another scope
  EXPECT_FALSE(later.find("gemm H200", "m=8192 n=2560 k=2560").has_value());  // another key
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "hlm-tuning-1\tgemm H200\tm=8192 n=2560 k=9728\t3\t#0 0.15 ms #3 0.13 ms");
}

TEST(TuningCache, FirstLineWinsAcrossTablesAndRecordsDoNotReplaceIt) {
  ScratchDir dir("tuning");
  const std::string path = (dir.path() / "gemm.tsv").string();
  // Two processes that loaded the file before either wrote: both record the same key, with different choices.
  TuningCache a(path), b(path);
  EXPECT_FALSE(a.find("s", "k").has_value());
  EXPECT_FALSE(b.find("s", "k").has_value());
  a.record("s", "k", 1, "");
  b.record("s", "k", 5, "");
  EXPECT_EQ(a.find("s", "k"), 1);  // each keeps its own for the rest of its run
  EXPECT_EQ(b.find("s", "k"), 5);
  EXPECT_EQ(lines_of(path).size(), 2u);
  TuningCache c(path);  // every later process takes the first line's
  EXPECT_EQ(c.find("s", "k"), 1);
  c.record("s", "k", 7, "");  // known: nothing appended, the first stays
  EXPECT_EQ(c.find("s", "k"), 1);
  EXPECT_EQ(lines_of(path).size(), 2u);
}

TEST(TuningCache, MalformedLinesAreSkippedAndTheRestFound) {
  ScratchDir dir("tuning");
  const std::filesystem::path path = dir.path() / "gemm.tsv";
  {
    std::ofstream out(path);
    out << "hlm-tuning-1\ts\tgood\t4\tnote\n"
        << "not a tuning line\n"
        << "hlm-tuning-1\ts\tnegative\t-1\n"
        << "hlm-tuning-1\ts\tletters\t4x\n"
        << "hlm-tuning-1\ts\tshort\n"
        << "hlm-tuning-2\ts\tfuture\t1\n"
        << "\n"
        << "hlm-tuning-1\ts\tno note\t0\n";
  }
  TuningCache t(path.string());
  testing::internal::CaptureStderr();
  EXPECT_EQ(t.find("s", "good"), 4);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("5 malformed line(s) skipped, the first at line 2"), std::string::npos) << err;
  EXPECT_EQ(t.find("s", "no note"), 0);
  for (const char* bad : {"negative", "letters", "short", "future"}) EXPECT_FALSE(t.find("s", bad).has_value()) << bad;
}

TEST(TuningCache, TabsAndLineBreaksInFieldsCannotSplitALine) {
  ScratchDir dir("tuning");
  const std::string path = (dir.path() / "gemm.tsv").string();
  TuningCache t(path);
  t.record("scope\twith tab", "key\nwith break", 2, "note\twith\ttabs\r\n");
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "hlm-tuning-1\tscope with tab\tkey with break\t2\tnote with tabs  ");
  EXPECT_EQ(TuningCache(path).find("scope\twith tab", "key\nwith break"), 2);  // the same spelling finds it
}

TEST(TuningCache, ConcurrentRecordsLeaveWholeLines) {
  ScratchDir dir("tuning");
  const std::string path = (dir.path() / "gemm.tsv").string();
  TuningCache t(path);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&t, i] {
      for (int j = 0; j < 50; ++j)
        t.record("s", "key " + std::to_string(i) + " " + std::to_string(j), i * 100 + j, std::string(200, 'x'));
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(lines_of(path).size(), 400u);
  TuningCache later(path);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 50; ++j)
      EXPECT_EQ(later.find("s", "key " + std::to_string(i) + " " + std::to_string(j)), i * 100 + j);
}

TEST(TuningCache, UnwritableFileIsAWarningAndTheChoiceStaysInMemory) {
  ScratchDir dir("tuning");
  const std::filesystem::path file = dir.path() / "a file";
  std::ofstream(file) << "not a folder\n";
  TuningCache t((file / "gemm.tsv").string());  // its folder would be a regular file
  testing::internal::CaptureStderr();
  t.record("s", "k", 6, "");
  t.record("s", "k2", 7, "");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: tuning cache"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning", err.find("warning") + 1), std::string::npos) << "one warning only: " << err;
  EXPECT_EQ(t.find("s", "k"), 6);
  EXPECT_EQ(t.find("s", "k2"), 7);
  EXPECT_THROW(t.record("s", "k3", -1, ""), Error);
}

TEST(TuningCache, GemmTableFollowsTheEnvironmentOrTheTestPath) {
  ::unsetenv("HLM_MATMUL_AUTOTUNE_CACHE");
  set_gemm_tuning_cache_path(std::nullopt);
  EXPECT_EQ(gemm_tuning_cache(), nullptr);  // unset: choices per process only
  ::setenv("HLM_MATMUL_AUTOTUNE_CACHE", "/tmp/hlm-tuning-from-env.tsv", 1);
  set_gemm_tuning_cache_path(std::nullopt);
  ASSERT_NE(gemm_tuning_cache(), nullptr);
  EXPECT_EQ(gemm_tuning_cache()->path(), "/tmp/hlm-tuning-from-env.tsv");
  set_gemm_tuning_cache_path("/tmp/hlm-tuning-for-a-test.tsv");
  EXPECT_EQ(gemm_tuning_cache()->path(), "/tmp/hlm-tuning-for-a-test.tsv");
  ::setenv("HLM_MATMUL_AUTOTUNE_CACHE", "", 1);  // empty: as unset
  set_gemm_tuning_cache_path(std::nullopt);
  EXPECT_EQ(gemm_tuning_cache(), nullptr);
  ::unsetenv("HLM_MATMUL_AUTOTUNE_CACHE");
}
