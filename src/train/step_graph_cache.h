// Which training steps run as a replayed CUDA graph: the host-side bookkeeping of the GPU trainer's captured steps
// (train/cuda/cuda_train_device.h, `hybridlm synth --cuda-graphs`), kept free of CUDA so the CPU tests cover it.
//
// A captured step is only valid for the shape it was captured with: the host sizes every launch from the packed
// batch's token count, sequence count and longest sequence (grids, workspaces, the attention tiles), so these three
// are the key (the GPU trainer rounds the longest sequence up to a multiple of 64, the bound its kernels are given).
// Policy, per step:
//   - a key seen for the first time runs eagerly (most shapes of a run appear once or twice early and never again:
//     capturing them would cost more than it saves);
//   - the second time it is captured, then replayed (the capture itself queues no work: the step's work is the
//     first replay);
//   - a key whose capture failed runs eagerly from then on;
//   - at most `capacity` graphs are kept; the least recently used is dropped first.
// Non-goals: graph updates (cudaGraphExecUpdate) across keys.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace hlm {

struct StepGraphKey {
  int64_t tokens = 0;     // T of the packed batch
  int64_t sequences = 0;  // N
  int64_t longest = 0;    // the longest sequence (or the bound the caller rounds it up to)
  bool operator==(const StepGraphKey&) const = default;
};

enum class StepGraphAction { Eager, Capture, Replay };

struct StepGraphStats {
  int64_t eager_steps = 0, captures = 0, replays = 0, failures = 0, evictions = 0;
};

// Entry: what the caller keeps per captured key (the graph and its input buffers on the device).
template <typename Entry>
class StepGraphCache {
 public:
  explicit StepGraphCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

  // What to do for a step of this key. Replay: entry(key) holds the graph. Capture: the caller captures, then calls
  // captured(key, entry) or failed(key); it may run the step eagerly when the capture fails.
  StepGraphAction decide(const StepGraphKey& key) {
    ++clock_;
    for (Slot& s : slots_)
      if (s.key == key) {
        s.last_used = clock_;
        return StepGraphAction::Replay;
      }
    if (contains(failed_, key) || !contains(seen_, key)) {
      if (!contains(seen_, key)) seen_.push_back(key);
      return StepGraphAction::Eager;
    }
    return StepGraphAction::Capture;
  }
  // The entry of a Replay key (nullptr when there is none).
  Entry* entry(const StepGraphKey& key) {
    for (Slot& s : slots_)
      if (s.key == key) return s.entry.get();
    return nullptr;
  }
  // Keeps the captured entry; drops the least recently used one when full.
  Entry& captured(const StepGraphKey& key, std::unique_ptr<Entry> e) {
    if (slots_.size() >= capacity_) {
      const auto lru = std::min_element(slots_.begin(), slots_.end(),
                                        [](const Slot& a, const Slot& b) { return a.last_used < b.last_used; });
      slots_.erase(lru);
      ++stats_.evictions;
    }
    ++stats_.captures;
    slots_.push_back({key, std::move(e), clock_});
    return *slots_.back().entry;
  }
  void failed(const StepGraphKey& key) {
    ++stats_.failures;
    if (!contains(failed_, key)) failed_.push_back(key);
  }
  // Drops every entry (e.g. when something a graph reads moved); seen and failed keys stay.
  void clear() { slots_.clear(); }
  void count_eager() { ++stats_.eager_steps; }
  void count_replay() { ++stats_.replays; }
  size_t size() const { return slots_.size(); }
  const StepGraphStats& stats() const { return stats_; }

 private:
  struct Slot {
    StepGraphKey key;
    std::unique_ptr<Entry> entry;
    uint64_t last_used = 0;
  };
  static bool contains(const std::vector<StepGraphKey>& keys, const StepGraphKey& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  }
  size_t capacity_;
  uint64_t clock_ = 0;
  std::vector<Slot> slots_;
  std::vector<StepGraphKey> seen_, failed_;
  StepGraphStats stats_;
};

// `requested` unless the environment says HLM_CUDA_GRAPHS=0 or off (the decode graphs' switch, infer/cuda); any
// other value than on / off / 1 / 0 is an input error (core/env_switch.h).
bool step_graphs_enabled(bool requested);

}  // namespace hlm
