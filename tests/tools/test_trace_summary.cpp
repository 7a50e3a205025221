// Tests of the kernel tracer's pure half (tools/profile/trace_summary.h): interval union, profiler-range filtering,
// per-name aggregation and sorting, kernel-name shortening, report and TSV text. Runs on CPU; no CUDA or CUPTI.
#include "trace_summary.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using hlm::trace::ActivityKind;
using hlm::trace::Interval;
using hlm::trace::RangeMode;
using hlm::trace::interval_union_ns;
using hlm::trace::kernel_name_shorten;

TEST(TraceIntervalUnion, EmptyIsZero) { EXPECT_EQ(interval_union_ns({}), 0u); }

TEST(TraceIntervalUnion, DisjointIntervalsAdd) {
  EXPECT_EQ(interval_union_ns({{100, 150}, {0, 10}, {20, 30}}), 10u + 10u + 50u);
}

TEST(TraceIntervalUnion, OverlappingIntervalsCountOnce) {
  // [0,10) and [5,20) -> [0,20); [30,40) and [35,50) and [45,60) chain -> [30,60).
  EXPECT_EQ(interval_union_ns({{5, 20}, {0, 10}, {45, 60}, {30, 40}, {35, 50}}), 20u + 30u);
}

TEST(TraceIntervalUnion, NestedIntervalsCountOnce) {
  // A long kernel with two short ones inside it (other streams) and one sharing its end.
  EXPECT_EQ(interval_union_ns({{0, 100}, {10, 20}, {50, 60}, {90, 100}}), 100u);
}

TEST(TraceIntervalUnion, TouchingAndEmptyIntervals) {
  // Touching intervals merge without a gap; empty and inverted ones (unfinished records) add nothing.
  EXPECT_EQ(interval_union_ns({{0, 10}, {10, 20}, {30, 30}, {50, 40}}), 20u);
}

TEST(TraceRangeMode, Parse) {
  RangeMode m = RangeMode::profiler;
  EXPECT_TRUE(hlm::trace::range_mode_parse("", &m));
  EXPECT_EQ(m, RangeMode::all);
  EXPECT_TRUE(hlm::trace::range_mode_parse("profiler", &m));
  EXPECT_EQ(m, RangeMode::profiler);
  EXPECT_TRUE(hlm::trace::range_mode_parse("all", &m));
  EXPECT_EQ(m, RangeMode::all);
  EXPECT_FALSE(hlm::trace::range_mode_parse("cuda", &m));
}

// Three kernels and a copy; times in ns.
hlm::trace::TraceLog log_make() {
  hlm::trace::TraceLog log;
  const uint32_t a = log.intern("kernel_a");
  const uint32_t b = log.intern("kernel_b");
  const uint32_t c = log.intern("kernel_c");
  const uint32_t h2d = log.intern(hlm::trace::memcpy_kind_name(1));
  log.add(ActivityKind::memcpy, h2d, 0, 1'000);           // before range 1
  log.add(ActivityKind::kernel, a, 10'000, 14'000);       // range 1
  log.add(ActivityKind::kernel, b, 12'000, 13'000);       // range 1, nested in a (other stream)
  log.add(ActivityKind::kernel, a, 16'000, 22'000);       // range 1, runs past its end (20'000)
  log.add(ActivityKind::kernel, c, 25'000, 26'000);       // between the ranges
  log.add(ActivityKind::kernel, b, 30'000, 32'000);       // range 2
  log.add(ActivityKind::memcpy, h2d, 33'000, 33'500);     // range 2
  log.add(ActivityKind::kernel, a, 50'000, 51'000);       // after range 2
  return log;
}

TEST(TraceSummarize, AllModeCountsEverything) {
  const auto log = log_make();
  const auto s = hlm::trace::summarize(log, RangeMode::all, {{10'000, 20'000}});  // ranges are ignored
  EXPECT_EQ(s.range_count, 1u);
  EXPECT_EQ(s.span_ns, 51'000u);  // first start (0) to last end (51'000)
  EXPECT_EQ(s.kernel_count, 6u);
  EXPECT_EQ(s.kernel_ns, 4'000u + 1'000u + 6'000u + 1'000u + 2'000u + 1'000u);
  // Union: [0,1000) [10000,14000) [16000,22000) [25000,26000) [30000,32000) [33000,33500) [50000,51000).
  EXPECT_EQ(s.busy_ns, 1'000u + 4'000u + 6'000u + 1'000u + 2'000u + 500u + 1'000u);
  EXPECT_EQ(s.idle_ns(), s.span_ns - s.busy_ns);
  ASSERT_EQ(s.kernels.size(), 3u);
  EXPECT_EQ(s.kernels[0].name, "kernel_a");  // sorted by total time: a 11000, b 3000, c 1000
  EXPECT_EQ(s.kernels[0].calls, 3u);
  EXPECT_EQ(s.kernels[0].total_ns, 11'000u);
  EXPECT_EQ(s.kernels[0].min_ns, 1'000u);
  EXPECT_EQ(s.kernels[0].max_ns, 6'000u);
  EXPECT_EQ(s.kernels[1].name, "kernel_b");
  EXPECT_EQ(s.kernels[2].name, "kernel_c");
  ASSERT_EQ(s.memops.size(), 1u);
  EXPECT_EQ(s.memops[0].name, "[memcpy HtoD]");
  EXPECT_EQ(s.memops[0].calls, 2u);
  EXPECT_EQ(s.memops[0].total_ns, 1'500u);
}

TEST(TraceSummarize, ProfilerModeKeepsWhatStartsInRanges) {
  const auto log = log_make();
  const std::vector<Interval> ranges = {{10'000, 20'000}, {30'000, 34'000}};
  const auto s = hlm::trace::summarize(log, RangeMode::profiler, ranges);
  EXPECT_EQ(s.range_count, 2u);
  EXPECT_EQ(s.span_ns, 10'000u + 4'000u);  // ranges add up
  EXPECT_EQ(s.kernel_count, 4u);           // a, b, a in range 1; b in range 2
  EXPECT_EQ(s.kernel_ns, 4'000u + 1'000u + 6'000u + 2'000u);  // kernel times are not clipped
  // Busy is clipped to the ranges: [10000,14000) + [16000,20000) + [30000,32000) + [33000,33500).
  EXPECT_EQ(s.busy_ns, 4'000u + 4'000u + 2'000u + 500u);
  EXPECT_EQ(s.idle_ns(), 14'000u - 10'500u);
  ASSERT_EQ(s.kernels.size(), 2u);  // kernel_c ran between the ranges
  EXPECT_EQ(s.kernels[0].name, "kernel_a");
  EXPECT_EQ(s.kernels[0].calls, 2u);
  EXPECT_EQ(s.kernels[1].name, "kernel_b");
  EXPECT_EQ(s.kernels[1].calls, 2u);
  EXPECT_EQ(s.kernels[1].total_ns, 3'000u);
  ASSERT_EQ(s.memops.size(), 1u);
  EXPECT_EQ(s.memops[0].calls, 1u);  // the copy before range 1 does not count
}

TEST(TraceSummarize, ProfilerModeWithoutRangesIsEmpty) {
  const auto s = hlm::trace::summarize(log_make(), RangeMode::profiler, {});
  EXPECT_EQ(s.range_count, 0u);
  EXPECT_EQ(s.span_ns, 0u);
  EXPECT_EQ(s.kernel_count, 0u);
  EXPECT_TRUE(s.kernels.empty());
}

// Exposed time on one stream with dependent launches: each kernel starts before its predecessor ends (it waits)
// and is charged only for what it adds after that end; a record nested in a longer one that ends first takes its own
// span; the exposed times add up to the busy time (the union), in both modes.
TEST(TraceSummarize, ExposedTimeIsWhatEachRecordAddsToTheUnion) {
  hlm::trace::TraceLog log;
  const uint32_t gemv = log.intern("gemv"), norm = log.intern("norm"), side = log.intern("side");
  log.add(ActivityKind::kernel, gemv, 0, 10'000);
  log.add(ActivityKind::kernel, norm, 2'000, 13'000);   // waits for gemv, then 3 us
  log.add(ActivityKind::kernel, gemv, 12'000, 20'000);  // waits for norm, then 7 us (1 of them side's)
  log.add(ActivityKind::kernel, side, 15'000, 16'000);  // nested in the second gemv, ends first: its 1 us
  log.add(ActivityKind::kernel, gemv, 30'000, 31'000);  // after a gap: its whole 1 us
  const auto s = hlm::trace::summarize(log, RangeMode::all, {});
  EXPECT_EQ(s.busy_ns, 20'000u + 1'000u);
  uint64_t sum = 0;
  for (const auto& r : s.kernels) {
    sum += r.exposed_ns;
    if (r.name == "gemv") {
      EXPECT_EQ(r.exposed_ns, 10'000u + 6'000u + 1'000u);
    } else if (r.name == "norm") {
      EXPECT_EQ(r.exposed_ns, 3'000u);
    } else {
      EXPECT_EQ(r.exposed_ns, 1'000u);
    }
  }
  EXPECT_EQ(sum, s.busy_ns);
  for (const RangeMode mode : {RangeMode::all, RangeMode::profiler}) {  // the shared log: clipped in profiler mode
    const auto t = hlm::trace::summarize(log_make(), mode, {{10'000, 20'000}, {30'000, 34'000}});
    uint64_t total = 0;
    for (const auto& r : t.kernels) total += r.exposed_ns;
    for (const auto& r : t.memops) total += r.exposed_ns;
    EXPECT_EQ(total, t.busy_ns) << hlm::trace::range_mode_name(mode);
  }
}

TEST(TraceSummarize, TiesSortByName) {
  hlm::trace::TraceLog log;
  log.add(ActivityKind::kernel, log.intern("zeta"), 0, 10);
  log.add(ActivityKind::kernel, log.intern("alpha"), 20, 30);
  const auto s = hlm::trace::summarize(log, RangeMode::all, {});
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.kernels[0].name, "alpha");
  EXPECT_EQ(s.kernels[1].name, "zeta");
}

TEST(TraceKernelName, TemplatedKernelInAnonymousNamespace) {
  // void hlm::cuda::(anonymous namespace)::rmsnorm_fwd_kernel<__nv_bfloat16, 256>(__nv_bfloat16 const*, float
  // const*, __nv_bfloat16*, int, float)
  EXPECT_EQ(kernel_name_shorten("_ZN3hlm4cuda12_GLOBAL__N_118rmsnorm_fwd_kernelI13__nv_bfloat16Li256EEEvPKT_PKfPS4_if"),
            "hlm::cuda::(anon)::rmsnorm_fwd_kernel<__nv_bfloat16, 256>");
}

TEST(TraceKernelName, PlainFunctionDropsParameters) {
  EXPECT_EQ(kernel_name_shorten("_ZN3hlm3ops17adamw_step_kernelEPfPKfl"), "hlm::ops::adamw_step_kernel");
}

TEST(TraceKernelName, NestedTemplateArgumentsCollapse) {
  // void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>,
  // cute::tuple<float, long> > >(cutlass::gemm::kernel::GemmUniversal<...>::Params)
  EXPECT_EQ(kernel_name_shorten("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiEEENS5_"
                                "IJflEEEEEEEvNT_6ParamsE"),
            "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...> >");
}

TEST(TraceKernelName, UnmangledNamesStay) {
  // cuBLAS nvjet kernels and extern "C" kernels arrive unmangled.
  EXPECT_EQ(kernel_name_shorten("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT"), "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT");
  EXPECT_EQ(kernel_name_shorten("_Zbroken"), "_Zbroken");  // not demanglable: kept as is
}

TEST(TraceKernelName, LongNamesAreCut) {
  const std::string name = kernel_name_shorten(std::string(400, 'k'), 150);
  EXPECT_EQ(name.size(), 150u);
  EXPECT_EQ(name.substr(147), "...");
}

TEST(TraceReport, HeaderRowsAndTop) {
  const auto s = hlm::trace::summarize(log_make(), RangeMode::all, {});
  const std::string text = hlm::trace::report_format(s, "bench_x", 2, 0);
  EXPECT_NE(text.find("== hlm_kernel_trace: bench_x =="), std::string::npos);
  EXPECT_NE(text.find("range mode      all (1 range)"), std::string::npos);
  EXPECT_NE(text.find("span            0.051 ms"), std::string::npos);
  EXPECT_NE(text.find("kernels         6 launches, 0.015 ms"), std::string::npos);
  EXPECT_NE(text.find("kernel_a"), std::string::npos);
  EXPECT_NE(text.find("kernel_b"), std::string::npos);
  EXPECT_EQ(text.find("kernel_c"), std::string::npos);  // cut by top_n = 2
  EXPECT_NE(text.find("(1 more kernels, HLM_TRACE_TOP=2)"), std::string::npos);
  EXPECT_NE(text.find("[memcpy HtoD]"), std::string::npos);
  EXPECT_EQ(text.find("dropped"), std::string::npos);
  EXPECT_NE(hlm::trace::report_format(s, "p", 0, 7).find("dropped records 7"), std::string::npos);
}

TEST(TraceReport, Tsv) {
  const auto s = hlm::trace::summarize(log_make(), RangeMode::all, {});
  const std::string tsv = hlm::trace::tsv_format(s);
  EXPECT_EQ(tsv.substr(0, tsv.find('\n')), "name\tcalls\ttotal_us\tmean_us\tmin_us\tmax_us\texposed_us");
  // kernel_a's exposed 10 us: 3 of [10, 14) (kernel_b, nested, ends first and takes [12, 13)), 6 and 1.
  EXPECT_NE(tsv.find("kernel_a\t3\t11.000\t3.667\t1.000\t6.000\t10.000\n"), std::string::npos);
  EXPECT_NE(tsv.find("[memcpy HtoD]\t2\t1.500\t0.750\t0.500\t1.000\t1.500\n"), std::string::npos);
}

}  // namespace
