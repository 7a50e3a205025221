// The communicators' collectives: SingleCommunicator in process, MpiCommunicator under `mpirun -np 3` (the test
// starts this binary again as three ranks running DISABLED_MpiRanks.*, which ctest never runs by itself). Every
// reduction must equal the rank-order sum ((x0 + x1) + x2) bit for bit on every rank (communicator.h), and chunks
// must split n = 3q + r elements as chunk_begin says.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "dist/communicator.h"
#include "dist/dist_launch.h"

using namespace hlm;

namespace {

// A value whose rank-order fp32 sum differs from other orders for most i (mixed magnitudes).
float value(int rank, size_t i) {
  const float big = (i % 3 == 0) ? 1e8f : 1.0f;
  return big * static_cast<float>((rank + 1) * 0.1 + static_cast<double>(i) * 1e-3) * (rank % 2 ? -1.0f : 1.0f);
}

}  // namespace

TEST(Communicator, ChunksCoverTheBufferInOrder) {
  for (const int world : {1, 2, 3, 5}) {
    for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{10}, size_t{12}}) {
      EXPECT_EQ(chunk_begin(n, world, 0), 0u);
      EXPECT_EQ(chunk_begin(n, world, world), n);
      for (int r = 0; r < world; ++r) {
        const size_t s = chunk_size(n, world, r);
        EXPECT_TRUE(s == n / world || s == n / world + 1) << n << " over " << world;
        if (r > 0) EXPECT_LE(s, chunk_size(n, world, r - 1));  // the first n % W chunks are the longer ones
      }
    }
  }
}

TEST(Communicator, SingleProcessCollectivesAreCopies) {
  SingleCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  std::vector<float> a = {1.5f, -2.0f, 3.0f}, b(3, 0.0f);
  c.all_reduce_sum(a.data(), a.size());
  EXPECT_EQ(a, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  c.reduce_scatter_sum(a.data(), b.data(), a.size());
  EXPECT_EQ(b, a);
  std::fill(b.begin(), b.end(), 0.0f);
  c.all_gather(a.data(), b.data(), a.size());
  EXPECT_EQ(b, a);
  int x = 7;
  c.broadcast(&x, sizeof x, 0);
  EXPECT_EQ(x, 7);
}

TEST(Communicator, NotLaunchedMeansOneProcess) {
  // ctest starts this test without a launcher (unless someone runs ctest itself under mpirun).
  if (launch_info_from_env().launched) GTEST_SKIP() << "running under a launcher";
  const std::unique_ptr<Communicator> c = make_host_communicator();
  EXPECT_STREQ(c->backend(), "single");
  EXPECT_EQ(c->size(), 1);
}

TEST(Communicator, MpiCollectivesOnThreeRanks) {
  if (!test::mpirun_usable()) GTEST_SKIP() << "this build has no MPI or mpirun is not installed";
  char self[PATH_MAX] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  const test::RunResult r =
      test::run_shell(test::mpirun_prefix() + "-np 3 " + self +
                      " --gtest_color=no --gtest_also_run_disabled_tests --gtest_filter=DISABLED_MpiRanks.*");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out << r.err;
}

// Runs on every rank of `mpirun -np 3` (above).
TEST(DISABLED_MpiRanks, Collectives) {
  const std::unique_ptr<Communicator> c = make_host_communicator();
  ASSERT_STREQ(c->backend(), "mpi");
  const int W = c->size(), me = c->rank();
  ASSERT_EQ(W, 3);
  EXPECT_EQ(c->local_size(), 3);  // one node
  EXPECT_EQ(c->local_rank(), me);
  const size_t n = 3 * 5 + 2;  // chunks of 6, 6, 5
  std::vector<float> mine(n), expected(n);
  for (size_t i = 0; i < n; ++i) {
    mine[i] = value(me, i);
    float sum = value(0, i);
    for (int r = 1; r < W; ++r) sum += value(r, i);  // rank order, fp32
    expected[i] = sum;
  }
  std::vector<float> reduced = mine;
  c->all_reduce_sum(reduced.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(reduced[i], expected[i]) << "all_reduce element " << i;

  std::vector<double> d = {static_cast<double>(me) + 0.25, 1e16, -1e16 + me};
  c->all_reduce_sum(d.data(), d.size());
  EXPECT_EQ(d[0], ((0.25 + 1.25) + 2.25));
  EXPECT_EQ(d[1], (1e16 + 1e16) + 1e16);
  EXPECT_EQ(d[2], ((-1e16 + 0.0) + (-1e16 + 1)) + (-1e16 + 2));

  std::vector<float> chunk(chunk_size(n, W, me));
  c->reduce_scatter_sum(mine.data(), chunk.data(), n);
  for (size_t k = 0; k < chunk.size(); ++k)
    EXPECT_EQ(chunk[k], expected[chunk_begin(n, W, me) + k]) << "reduce_scatter element " << k;

  std::vector<float> gathered(n, 0.0f);
  c->all_gather(chunk.data(), gathered.data(), n);
  EXPECT_EQ(gathered, expected);
  std::vector<float> in_place(n, -1.0f);  // send aliasing recv + chunk_begin
  std::copy(chunk.begin(), chunk.end(), in_place.begin() + static_cast<std::ptrdiff_t>(chunk_begin(n, W, me)));
  c->all_gather(in_place.data() + chunk_begin(n, W, me), in_place.data(), n);
  EXPECT_EQ(in_place, expected);

  char text[16] = {};
  if (me == 2) std::strcpy(text, "from rank two");
  c->broadcast(text, sizeof text, 2);
  EXPECT_STREQ(text, "from rank two");
  c->barrier();
}
