// A long prefill's time from sampled chunks (infer/prefill_sampling.h): which chunks are run, and the interpolated
// sum — exact for a time linear in the chunk index and for a full sample, close for a smooth concave curve where the
// two ends alone are far under.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "infer/prefill_sampling.h"

namespace hlm {
namespace {

double exact_sum(int64_t chunks, const std::function<double(int64_t)>& t) {
  double s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += t(c);
  return s;
}

double sampled_sum(int64_t chunks, const std::vector<int64_t>& index, const std::function<double(int64_t)>& t) {
  std::vector<double> seconds;
  for (const int64_t c : index) seconds.push_back(t(c));
  return prefill_seconds_from_samples(chunks, index, seconds);
}

TEST(PrefillSampling, ChoosesTheEndsAndAnEvenSpreadBetween) {
  EXPECT_EQ(prefill_sample_chunks(448, 0), (std::vector<int64_t>{447}));  // the last chunk alone (memory runs)
  EXPECT_EQ(prefill_sample_chunks(1, 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(prefill_sample_chunks(1, 16), (std::vector<int64_t>{0}));
  EXPECT_EQ(prefill_sample_chunks(20, 16), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                                                  16, 17, 18, 19}));
  for (const int64_t chunks : {int64_t{21}, int64_t{32}, int64_t{112}, int64_t{448}, int64_t{4099}}) {
    for (const int samples : {1, 2, 7, 16}) {
      const std::vector<int64_t> index = prefill_sample_chunks(chunks, samples);
      ASSERT_GE(index.size(), 4u);
      EXPECT_LE(index.size(), size_t(samples) + 4);
      EXPECT_EQ(index[0], 0);
      EXPECT_EQ(index[1], 1);
      EXPECT_EQ(index[index.size() - 2], chunks - 2);
      EXPECT_EQ(index.back(), chunks - 1);
      const double spacing = double(chunks - 2) / double(samples + 1);
      for (size_t i = 1; i < index.size(); ++i) {
        EXPECT_GT(index[i], index[i - 1]) << chunks << " chunks, " << samples << " samples";
        EXPECT_LE(double(index[i] - index[i - 1]), std::ceil(spacing) + 1.0) << chunks << " chunks, " << i;
      }
    }
  }
}

TEST(PrefillSampling, LinearTimesAndFullSamplesSumExactly) {
  const auto linear = [](int64_t c) { return 0.25 + 0.003 * double(c); };
  for (const int64_t chunks : {int64_t{2}, int64_t{5}, int64_t{112}, int64_t{448}}) {
    for (const int samples : {1, 16}) {
      const std::vector<int64_t> index = prefill_sample_chunks(chunks, samples);
      EXPECT_NEAR(sampled_sum(chunks, index, linear), exact_sum(chunks, linear), 1e-9 * exact_sum(chunks, linear))
          << chunks << " chunks, " << samples << " samples";
    }
  }
  // Every chunk sampled: the sum itself, whatever the curve; a partial last chunk (its own time) included.
  const auto bumpy = [](int64_t c) { return c == 6 ? 0.1 : 1.0 + std::sin(double(c)); };
  std::vector<int64_t> all;
  for (int64_t c = 0; c < 7; ++c) all.push_back(c);
  EXPECT_DOUBLE_EQ(sampled_sum(7, all, bumpy), exact_sum(7, bumpy));
  EXPECT_EQ(prefill_sample_chunks(7, 3), all);
}

TEST(PrefillSampling, ASmoothConcaveCurveIsCloseWhereTheEndsAloneAreFarUnder) {
  // A chunk's time growing less than linearly with its context, as the attention's does (session 46).
  const int64_t chunks = 448;
  const auto concave = [](int64_t c) { return 0.3 + 0.4 * std::sqrt(double(c) + 1.0); };
  const double exact = exact_sum(chunks, concave);
  const double ends = sampled_sum(chunks, {0, chunks - 1}, concave);
  const double sixteen = sampled_sum(chunks, prefill_sample_chunks(chunks, 16), concave);
  EXPECT_LT(ends, 0.9 * exact);  // the two-end trapezoid is a lower bound, here > 10 % under
  EXPECT_LE(sixteen, exact);     // a chord under a concave curve: still a lower bound ...
  EXPECT_GT(sixteen, 0.995 * exact) << sixteen << " vs " << exact;  // ... but within 0.5 %
}

void expect_input_error(const std::function<void()>& f, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << what << ": " << e.what();
  }
}

TEST(PrefillSampling, BadInputIsAnInputError) {
  expect_input_error([] { prefill_sample_chunks(0, 4); }, "no chunks");
  expect_input_error([] { prefill_sample_chunks(10, -1); }, "negative samples");
  expect_input_error([] { prefill_seconds_from_samples(4, {0, 3}, {1.0}); }, "one time for two chunks");
  expect_input_error([] { prefill_seconds_from_samples(4, {1, 3}, {1.0, 1.0}); }, "the first chunk missing");
  expect_input_error([] { prefill_seconds_from_samples(4, {0, 2}, {1.0, 1.0}); }, "the last chunk missing");
  expect_input_error([] { prefill_seconds_from_samples(4, {0, 2, 2, 3}, {1, 1, 1, 1}); }, "not ascending");
  expect_input_error([] { prefill_seconds_from_samples(4, {}, {}); }, "nothing sampled");
}

}  // namespace
}  // namespace hlm
