// trace_summary.h: the pure C++ half of the kernel-time tracer (libhlm_kernel_trace.so, docs/profiling.md).
// It stores GPU activity records (kernel / memcpy / memset: name, start, end in ns), filters them by profiler ranges,
// aggregates them per name, computes GPU busy time as the length of the UNION of all intervals (kernels on several
// streams overlap), and formats the text report and the TSV. No CUDA or CUPTI here, so tests/tools tests it on CPU;
// kernel_trace.cpp is the CUPTI glue that feeds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hlm::trace {

enum class ActivityKind : uint8_t { kernel, memcpy, memset };

// A half-open time interval [start_ns, end_ns) on the CUPTI clock (ns).
struct Interval {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// Length of the union of the intervals (overlapping and nested ones count once). Empty or inverted intervals add 0.
uint64_t interval_union_ns(std::vector<Interval> intervals);

// One activity record; name_id indexes TraceLog::names().
struct Record {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t name_id = 0;
  ActivityKind kind = ActivityKind::kernel;
};

// Which activity counts: everything (`all`) or what starts inside cudaProfilerStart/Stop ranges (`profiler`).
enum class RangeMode : uint8_t { all, profiler };

// Parses HLM_TRACE_RANGE ("" or "all" -> all, "profiler" -> profiler); false for anything else.
bool range_mode_parse(std::string_view text, RangeMode* out);
const char* range_mode_name(RangeMode mode);

// Records plus interned names. Not thread-safe: the caller locks.
class TraceLog {
 public:
  uint32_t intern(std::string_view name);
  void add(ActivityKind kind, uint32_t name_id, uint64_t start_ns, uint64_t end_ns);
  const std::vector<Record>& records() const { return records_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<Record> records_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> ids_;
};

// Per-name statistics; for kernels `name` is the shortened demangled name (kernel_name_shorten).
struct Row {
  std::string name;
  ActivityKind kind = ActivityKind::kernel;
  uint64_t calls = 0;
  uint64_t total_ns = 0;
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
  // The busy time this row's records add: each counted record, taken in order of its end, adds the part of its
  // (clipped) interval that no record ending before it covers; over all rows this sums to busy_ns. On one stream with
  // programmatic dependent launches (a kernel that starts early and waits for its predecessor) it is what the kernel
  // adds after its predecessor ended, not its start-to-end duration.
  uint64_t exposed_ns = 0;
  double mean_us() const { return calls ? double(total_ns) / double(calls) / 1e3 : 0.0; }
};

struct Summary {
  RangeMode mode = RangeMode::all;
  size_t range_count = 0;    // closed profiler ranges (all mode: 1 if anything was recorded, else 0)
  uint64_t span_ns = 0;      // sum of range spans; all mode: first start to last end
  uint64_t kernel_count = 0;
  uint64_t kernel_ns = 0;    // summed kernel durations (overlapping kernels both count)
  uint64_t busy_ns = 0;      // union of kernel/memcpy/memset intervals, clipped to the ranges
  std::vector<Row> kernels;  // sorted by total time, descending (ties: by name)
  std::vector<Row> memops;   // "[memcpy HtoD]", ..., "[memset]", sorted by total time
  uint64_t idle_ns() const { return span_ns > busy_ns ? span_ns - busy_ns : 0; }
};

// Aggregates the records. Profiler mode: only records whose start lies in one of `ranges` ([start, end], closed
// ranges only) count; their intervals are clipped to the range for busy time (kernel times are not clipped).
// All mode: every record counts and `ranges` is ignored. Kernels are keyed by their raw (mangled) name.
Summary summarize(const TraceLog& log, RangeMode mode, const std::vector<Interval>& ranges);

// Demangles (abi::__cxa_demangle; names that are not mangled, e.g. cuBLAS nvjet kernels, stay as they are) and
// shortens: drops a leading "void " return type and the "(...)" parameter list, writes "(anonymous namespace)" as
// "(anon)", keeps first-level template arguments but collapses nested ones to "<...>", and cuts to max_chars.
std::string kernel_name_shorten(std::string_view raw, size_t max_chars = 150);

// The memcpy row name for a CUPTI copy kind (CUpti_ActivityMemcpyKind values: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, ...).
const char* memcpy_kind_name(uint32_t copy_kind);

// The text report (docs/profiling.md): header, then kernel rows (at most top_n when top_n > 0), then memory rows.
std::string report_format(const Summary& s, std::string_view program, size_t top_n, uint64_t dropped_records);

// TSV: header line, then one line per kernel and memory row: name, calls, total_us, mean_us, min_us, max_us,
// exposed_us.
std::string tsv_format(const Summary& s);

}  // namespace hlm::trace
