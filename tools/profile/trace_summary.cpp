// trace_summary.cpp: aggregation, interval union, name shortening and report formatting of the kernel tracer
// (trace_summary.h). Pure C++; no CUDA or CUPTI.
#include "trace_summary.h"

#include <cxxabi.h>  // defines: abi::__cxa_demangle

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <utility>

namespace hlm::trace {

uint64_t interval_union_ns(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  uint64_t total = 0;
  bool open = false;
  uint64_t cur_start = 0, cur_end = 0;  // the merged interval being grown
  for (const Interval& iv : intervals) {
    if (iv.end_ns <= iv.start_ns) continue;
    if (open && iv.start_ns <= cur_end) {
      cur_end = std::max(cur_end, iv.end_ns);
      continue;
    }
    if (open) total += cur_end - cur_start;
    cur_start = iv.start_ns;
    cur_end = iv.end_ns;
    open = true;
  }
  if (open) total += cur_end - cur_start;
  return total;
}

bool range_mode_parse(std::string_view text, RangeMode* out) {
  if (text.empty() || text == "all") {
    *out = RangeMode::all;
    return true;
  }
  if (text == "profiler") {
    *out = RangeMode::profiler;
    return true;
  }
  return false;
}

const char* range_mode_name(RangeMode mode) { return mode == RangeMode::all ? "all" : "profiler"; }

uint32_t TraceLog::intern(std::string_view name) {
  auto it = ids_.find(std::string(name));
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  ids_.emplace(names_.back(), id);
  return id;
}

void TraceLog::add(ActivityKind kind, uint32_t name_id, uint64_t start_ns, uint64_t end_ns) {
  records_.push_back(Record{start_ns, end_ns, name_id, kind});
}

namespace {

// Index of the range whose [start, end] holds t, or -1. Ranges are few (one per profiled step), so a scan is fine.
long range_find(const std::vector<Interval>& ranges, uint64_t t) {
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (t >= ranges[i].start_ns && t <= ranges[i].end_ns) return static_cast<long>(i);
  }
  return -1;
}

void rows_sort(std::vector<Row>& rows) {
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.name < b.name;
  });
}

// Replaces every template argument list nested inside another one by "<...>".
std::string nested_templates_collapse(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  int depth = 0;
  for (char c : s) {
    if (c == '<') {
      ++depth;
      if (depth == 1) out += c;
      else if (depth == 2) out += "<...>";
    } else if (c == '>' && depth > 0) {
      if (depth == 1) out += c;
      --depth;
    } else if (depth < 2) {
      out += c;
    }
  }
  return out;
}

}  // namespace

Summary summarize(const TraceLog& log, RangeMode mode, const std::vector<Interval>& ranges) {
  Summary s;
  s.mode = mode;
  std::vector<Interval> busy;
  busy.reserve(log.records().size());
  // Aggregate by name id (kernels) or by kind + name (memory rows share the id space; names differ anyway).
  std::unordered_map<uint32_t, Row> by_id;
  std::vector<std::pair<Interval, uint32_t>> counted;  // clipped interval and name id, for the exposed times
  counted.reserve(log.records().size());
  uint64_t first = UINT64_MAX, last = 0;
  for (const Record& r : log.records()) {
    Interval iv{r.start_ns, r.end_ns};
    if (mode == RangeMode::profiler) {
      const long ri = range_find(ranges, r.start_ns);
      if (ri < 0) continue;
      iv.end_ns = std::min(iv.end_ns, ranges[static_cast<size_t>(ri)].end_ns);
    }
    const uint64_t dur = r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0;
    busy.push_back(iv);
    counted.emplace_back(iv, r.name_id);
    first = std::min(first, r.start_ns);
    last = std::max(last, r.end_ns);
    Row& row = by_id[r.name_id];
    if (row.calls == 0) {
      row.kind = r.kind;
      row.min_ns = dur;
      row.max_ns = dur;
    }
    row.calls += 1;
    row.total_ns += dur;
    row.min_ns = std::min(row.min_ns, dur);
    row.max_ns = std::max(row.max_ns, dur);
    if (r.kind == ActivityKind::kernel) {
      s.kernel_count += 1;
      s.kernel_ns += dur;
    }
  }
  if (mode == RangeMode::profiler) {
    s.range_count = ranges.size();
    for (const Interval& r : ranges) s.span_ns += r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0;
  } else if (first <= last) {
    s.range_count = 1;
    s.span_ns = last - first;
  }
  s.busy_ns = interval_union_ns(std::move(busy));
  // Exposed time: the records in order of their (clipped) end; each adds the part of its interval that no record
  // ended before it covers. `covered` is the union so far, as disjoint segments start -> end.
  std::stable_sort(counted.begin(), counted.end(),
                   [](const auto& a, const auto& b) { return a.first.end_ns < b.first.end_ns; });
  std::map<uint64_t, uint64_t> covered;
  for (const auto& [iv, id] : counted) {
    if (iv.end_ns <= iv.start_ns) continue;
    auto it = covered.upper_bound(iv.start_ns);
    if (it != covered.begin() && std::prev(it)->second >= iv.start_ns) --it;  // a segment reaching into (or up to) it
    uint64_t lo = iv.start_ns, hi = iv.end_ns, overlap = 0;
    while (it != covered.end() && it->first <= iv.end_ns) {  // overlapping or touching segments merge into one
      const uint64_t a = std::max(it->first, iv.start_ns), b = std::min(it->second, iv.end_ns);
      if (b > a) overlap += b - a;
      lo = std::min(lo, it->first);
      hi = std::max(hi, it->second);
      it = covered.erase(it);
    }
    covered.emplace(lo, hi);
    by_id[id].exposed_ns += (iv.end_ns - iv.start_ns) - overlap;
  }
  for (auto& [id, row] : by_id) {
    const std::string& raw = log.names()[id];
    row.name = row.kind == ActivityKind::kernel ? kernel_name_shorten(raw) : raw;
    (row.kind == ActivityKind::kernel ? s.kernels : s.memops).push_back(std::move(row));
  }
  rows_sort(s.kernels);
  rows_sort(s.memops);
  return s;
}

std::string kernel_name_shorten(std::string_view raw, size_t max_chars) {
  std::string name(raw);
  if (name.size() > 2 && name[0] == '_' && name[1] == 'Z') {
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> dem(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                    &std::free);
    if (status == 0 && dem) name = dem.get();
  }
  // "(anonymous namespace)" holds parentheses; rename it first so the parameter-list search below sees only real ones.
  for (size_t p; (p = name.find("(anonymous namespace)")) != std::string::npos;) name.replace(p, 21, "(anon)");
  // Cut the trailing parameter list: the ")" at the end and its matching "(" (scanning backwards).
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      else if (name[i] == '(' && --depth == 0) {
        if (i > 0) name.resize(i);
        break;
      }
    }
  }
  // Function templates demangle with their return type first ("void ns::kernel<...>"); kernels return void.
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  name = nested_templates_collapse(name);
  if (name.size() > max_chars && max_chars > 3) {
    name.resize(max_chars - 3);
    name += "...";
  }
  return name;
}

const char* memcpy_kind_name(uint32_t copy_kind) {
  switch (copy_kind) {
    case 1: return "[memcpy HtoD]";
    case 2: return "[memcpy DtoH]";
    case 3: return "[memcpy HtoA]";
    case 4: return "[memcpy AtoH]";
    case 5: return "[memcpy AtoA]";
    case 6: return "[memcpy AtoD]";
    case 7: return "[memcpy DtoA]";
    case 8: return "[memcpy DtoD]";
    case 9: return "[memcpy HtoH]";
    case 10: return "[memcpy PtoP]";
    default: return "[memcpy other]";
  }
}

namespace {

std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return {};
  if (static_cast<size_t>(n) < sizeof buf) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.resize(static_cast<size_t>(n));
  return big;
}

double ms(uint64_t ns) { return double(ns) / 1e6; }
double us(uint64_t ns) { return double(ns) / 1e3; }

std::string row_line(const Row& r, double share_denominator_ns) {
  const std::string share =
      share_denominator_ns > 0 ? strf("%6.1f%%", 100.0 * double(r.total_ns) / share_denominator_ns) : "      -";
  return strf("%11.3f  %s  %8llu  %10.2f  %10.2f  %10.2f  %10.3f  %s\n", ms(r.total_ns), share.c_str(),
              static_cast<unsigned long long>(r.calls), r.mean_us(), us(r.min_ns), us(r.max_ns), ms(r.exposed_ns),
              r.name.c_str());
}

}  // namespace

std::string report_format(const Summary& s, std::string_view program, size_t top_n, uint64_t dropped_records) {
  std::string out;
  out += strf("== hlm_kernel_trace: %.*s ==\n", static_cast<int>(program.size()), program.data());
  out += strf("range mode      %s (%zu range%s)\n", range_mode_name(s.mode), s.range_count,
              s.range_count == 1 ? "" : "s");
  out += strf("span            %.3f ms%s\n", ms(s.span_ns),
              s.mode == RangeMode::all ? " (first activity start to last activity end)" : " (sum of range spans)");
  out += strf("kernels         %llu launches, %.3f ms summed kernel time\n",
              static_cast<unsigned long long>(s.kernel_count), ms(s.kernel_ns));
  out += strf("GPU busy        %.3f ms (union of kernel, memcpy and memset intervals)\n", ms(s.busy_ns));
  out += strf("GPU idle        %.3f ms (%.1f%% of span)\n", ms(s.idle_ns()),
              s.span_ns ? 100.0 * double(s.idle_ns()) / double(s.span_ns) : 0.0);
  if (dropped_records) {
    out += strf("dropped records %llu (CUPTI buffers full: totals are too low)\n",
                static_cast<unsigned long long>(dropped_records));
  }
  out += "\n   total ms  share %     calls     mean us      min us      max us  exposed ms  name\n";
  const size_t shown = top_n > 0 ? std::min(top_n, s.kernels.size()) : s.kernels.size();
  for (size_t i = 0; i < shown; ++i) out += row_line(s.kernels[i], double(s.kernel_ns));
  if (shown < s.kernels.size()) {
    uint64_t rest_ns = 0, rest_calls = 0;
    for (size_t i = shown; i < s.kernels.size(); ++i) {
      rest_ns += s.kernels[i].total_ns;
      rest_calls += s.kernels[i].calls;
    }
    out += strf("%11.3f  %6.1f%%  %8llu  (%zu more kernels, HLM_TRACE_TOP=%zu)\n", ms(rest_ns),
                s.kernel_ns ? 100.0 * double(rest_ns) / double(s.kernel_ns) : 0.0,
                static_cast<unsigned long long>(rest_calls), s.kernels.size() - shown, top_n);
  }
  if (!s.memops.empty()) {
    out += "\n";
    for (const Row& r : s.memops) out += row_line(r, 0.0);
  }
  return out;
}

std::string tsv_format(const Summary& s) {
  std::string out = "name\tcalls\ttotal_us\tmean_us\tmin_us\tmax_us\texposed_us\n";
  auto emit = [&](const Row& r) {
    std::string name = r.name;
    std::replace(name.begin(), name.end(), '\t', ' ');
    out += strf("%s\t%llu\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", name.c_str(), static_cast<unsigned long long>(r.calls),
                us(r.total_ns), r.mean_us(), us(r.min_ns), us(r.max_ns), us(r.exposed_ns));
  };
  for (const Row& r : s.kernels) emit(r);
  for (const Row& r : s.memops) emit(r);
  return out;
}

}  // namespace hlm::trace
