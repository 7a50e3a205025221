// kernel_trace.cpp: libhlm_kernel_trace.so, a CUPTI Activity-API tracer loaded with LD_PRELOAD into any CUDA program
// (docs/profiling.md). A constructor enables the CONCURRENT_KERNEL, MEMCPY and MEMSET activity kinds; CUPTI hands
// filled buffers to buffer_completed (on its own thread), which stores the records in a TraceLog (trace_summary.h).
//   HLM_TRACE_RANGE=all (default): everything counts; the report is written at exit, best effort (the CUDA runtime may
//     already be torn down then, so records still in CUPTI's buffers can be lost).
//   HLM_TRACE_RANGE=profiler: only activity that starts between cudaProfilerStart() and the next cudaProfilerStop()
//     counts (runtime-API callbacks take cuptiGetTimestamp() at each); every cudaProfilerStop force-flushes CUPTI and
//     rewrites the report, which then covers all ranges closed so far.
//   HLM_TRACE_GRID=1: a kernel's rows are split by launch shape ("name [gx x gy x gz]"), so one kernel run at several
//     sizes (the four GEMVs of a decoder layer) gets a row per size.
// Not a goal: per-stream or per-device breakdowns, API (host) times, NVTX. Links against libcupti only.
#include <cupti.h>  // defines: cuptiActivity*, cuptiSubscribe, cuptiGetTimestamp, CUpti_ActivityKernel10, ...

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "trace_summary.h"

namespace {

using hlm::trace::ActivityKind;
using hlm::trace::Interval;
using hlm::trace::RangeMode;

constexpr size_t kBufferBytes = 8u << 20;  // per CUPTI buffer; CUPTI asks for more as they fill
constexpr size_t kBufferAlign = 8;         // CUPTI requires 8-byte aligned activity buffers

struct TracerState {
  std::mutex mu;
  hlm::trace::TraceLog log;
  std::vector<Interval> ranges;  // closed profiler ranges
  bool range_open = false;
  uint64_t range_open_start = 0;
  RangeMode mode = RangeMode::all;
  std::string out_path;  // empty: stderr
  std::string tsv_path;  // empty: no TSV
  bool by_grid = false;  // HLM_TRACE_GRID=1: kernel rows keyed by name and grid shape
  size_t top_n = 0;      // 0: all rows
  uint64_t dropped = 0;
  bool enabled = false;
  bool reported = false;  // a report was written (profiler mode: at some cudaProfilerStop)
  // CUPTI asked for a buffer, i.e. this process used CUDA. A process that never did (a wrapper such as `timeout`
  // inheriting LD_PRELOAD) writes no report, so it cannot overwrite its child's report at HLM_TRACE_OUT.
  std::atomic<bool> cuda_seen{false};
  uint32_t memset_id = 0;
  CUpti_SubscriberHandle subscriber = nullptr;
};

// Leaked on purpose: CUPTI's thread and exit handlers may run after static destructors.
TracerState& state() {
  static TracerState* s = new TracerState;
  return *s;
}

void warn(const char* what, CUptiResult res) {
  const char* msg = nullptr;
  cuptiGetResultString(res, &msg);
  std::fprintf(stderr, "hlm_kernel_trace: %s failed: %s\n", what, msg ? msg : "?");
}

// Whether a record that starts at t can still count. Profiler mode drops records outside every range as they arrive,
// so memory stays bounded by the profiled region; a future range cannot hold them (it starts after now).
bool record_may_count(const TracerState& st, uint64_t t) {
  if (st.mode == RangeMode::all) return true;
  if (st.range_open && t >= st.range_open_start) return true;
  for (const Interval& r : st.ranges) {
    if (t >= r.start_ns && t <= r.end_ns) return true;
  }
  return false;
}

void at_exit();

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI asks for the first buffer once CUDA is initialized, i.e. after the CUDA runtime registered its own exit
  // handlers; an atexit handler registered now runs BEFORE them (handlers run in reverse order), while the runtime is
  // still alive. The one registered by the constructor stays as a fallback; at_exit runs once.
  static std::once_flag late_exit_hook;
  std::call_once(late_exit_hook, [] { std::atexit(at_exit); });
  state().cuda_seen = true;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t size, size_t valid_size) {
  TracerState& st = state();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_size, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          if (!record_may_count(st, k->start)) break;
          std::string name = k->name ? k->name : "<unnamed kernel>";
          if (st.by_grid)  // one row per launch shape: the same kernel at different sizes (GEMVs of a layer) apart
            name += " [" + std::to_string(k->gridX) + "x" + std::to_string(k->gridY) + "x" + std::to_string(k->gridZ) +
                    "]";
          st.log.add(ActivityKind::kernel, st.log.intern(name), k->start, k->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          if (!record_may_count(st, m->start)) break;
          st.log.add(ActivityKind::memcpy, st.log.intern(hlm::trace::memcpy_kind_name(m->copyKind)), m->start,
                     m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          if (!record_may_count(st, m->start)) break;
          st.log.add(ActivityKind::memset, st.memset_id, m->start, m->end);
          break;
        }
        default: break;
      }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS) st.dropped += dropped;
  }
  std::free(buffer);
}

void file_write(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "hlm_kernel_trace: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

// Flushes CUPTI's buffers (forced: also records of unfinished work) into the log, then writes report + TSV.
void report_write(bool flush) {
  TracerState& st = state();
  if (flush) {
    const CUptiResult res = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (res != CUPTI_SUCCESS) warn("cuptiActivityFlushAll", res);
  }
  std::lock_guard<std::mutex> lock(st.mu);
  const hlm::trace::Summary summary = hlm::trace::summarize(st.log, st.mode, st.ranges);
  const std::string text = hlm::trace::report_format(summary, program_invocation_name, st.top_n, st.dropped);
  if (st.out_path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  } else {
    file_write(st.out_path, text);
  }
  if (!st.tsv_path.empty()) file_write(st.tsv_path, hlm::trace::tsv_format(summary));
  st.reported = true;
}

void CUPTIAPI api_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  TracerState& st = state();
  if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000 && cb->callbackSite == CUPTI_API_EXIT) {
    uint64_t now = 0;
    cuptiGetTimestamp(&now);
    std::lock_guard<std::mutex> lock(st.mu);
    if (!st.range_open) {  // a second Start inside an open range keeps the first start
      st.range_open = true;
      st.range_open_start = now;
    }
  } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000) {
    if (cb->callbackSite == CUPTI_API_ENTER) {
      uint64_t now = 0;
      cuptiGetTimestamp(&now);
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.range_open) st.ranges.push_back(Interval{st.range_open_start, now});
      st.range_open = false;
    } else if (st.mode == RangeMode::profiler) {
      report_write(/*flush=*/true);
    }
  } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020 && cb->callbackSite == CUPTI_API_ENTER) {
    // The context dies with the reset; pull its records out first.
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
}

void at_exit() {
  TracerState& st = state();
  static std::once_flag once;
  bool first = false;
  std::call_once(once, [&] { first = true; });
  if (!first || !st.enabled || !st.cuda_seen) return;
  if (st.mode == RangeMode::profiler) {
    if (!st.reported) {
      std::fprintf(stderr, "hlm_kernel_trace: HLM_TRACE_RANGE=profiler but no cudaProfilerStart/Stop range closed; "
                           "writing an empty report\n");
      report_write(/*flush=*/false);
    }
    return;
  }
  report_write(/*flush=*/true);  // best effort: the CUDA runtime may already be gone
}

__attribute__((constructor)) void tracer_load() {
  TracerState& st = state();
  const char* range = std::getenv("HLM_TRACE_RANGE");
  if (!hlm::trace::range_mode_parse(range ? range : "", &st.mode)) {
    std::fprintf(stderr, "hlm_kernel_trace: HLM_TRACE_RANGE=%s is not all|profiler; using all\n", range);
    st.mode = RangeMode::all;
  }
  if (const char* out = std::getenv("HLM_TRACE_OUT")) st.out_path = out;
  if (const char* tsv = std::getenv("HLM_TRACE_TSV")) st.tsv_path = tsv;
  if (const char* grid = std::getenv("HLM_TRACE_GRID")) st.by_grid = std::string(grid) == "1";
  if (const char* top = std::getenv("HLM_TRACE_TOP")) st.top_n = std::strtoull(top, nullptr, 10);
  st.memset_id = st.log.intern("[memset]");

  CUptiResult res = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (res != CUPTI_SUCCESS) return warn("cuptiActivityRegisterCallbacks", res);
  for (CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    res = cuptiActivityEnable(kind);
    if (res != CUPTI_SUCCESS) return warn("cuptiActivityEnable", res);
  }
  res = cuptiSubscribe(&st.subscriber, api_callback, nullptr);
  if (res != CUPTI_SUCCESS) {
    warn("cuptiSubscribe (profiler ranges)", res);
  } else {
    for (CUpti_CallbackId cbid : {CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020}) {
      res = cuptiEnableCallback(1, st.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, cbid);
      if (res != CUPTI_SUCCESS) warn("cuptiEnableCallback", res);
    }
  }
  st.enabled = true;
  std::atexit(at_exit);
}

}  // namespace
