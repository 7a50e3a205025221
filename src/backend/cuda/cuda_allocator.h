// Caching device allocator: cudaMalloc'ed blocks are kept on per-size-class free lists when freed and handed out
// again, so steady-state training/inference steps do no cudaMalloc/cudaFree (both synchronize the device).
// Never managed memory (see the device README: oversubscribed managed memory can hang the GPU).
//
// Small requests (under kLargeBytes = 1 MiB) go to size classes: rounded up to a multiple of 512 B and of a quarter
// of their power of two (classes 2^k, 1.25·2^k, 1.5·2^k, 1.75·2^k above 2 KiB), so at most 25% (or 511 B) of a block
// is unused, and a freed block serves every later request of the same class; these blocks are never split or merged.
// Large requests (>= 1 MiB, rounded up to 512 B) are cut best-fit out of segments (core/best_fit_ranges.h): a segment
// is one cudaMalloc of the request rounded up to 2 MiB; a free block at least 1 MiB larger than the request is split,
// and freed blocks merge with free neighbours. So a training step whose phases ask for different large sizes (forward
// activations, backward gradients, optimizer scratch) reuses the same device memory instead of holding one cached
// block per size, which ran a step near the device's capacity into out-of-memory retries (each releasing every cached
// block, then cudaMalloc'ing again). release_cached() returns idle class blocks and entirely free segments.
//
// Stream semantics: there is one stream per context (cuda_context.h). A block freed after work was queued on that
// stream may be handed out again at once: work queued later on the same stream runs after the earlier work, so reuse
// is safe. Using a block from another stream needs that stream to be synchronized before the free.
//
// Out of memory: the allocator frees every cached block and free segment and retries once, then throws hlm::Error with
// its stats (num_oom_retries counts the retries: a steady-state step should have none).
// Thread-safe (one mutex). Device: the device that is current when allocate() first calls cudaMalloc; a context sets
// its device before use.
//
// Private pools (CUDA graphs, backend/cuda/cuda_graph.h): a graph replays kernels on the addresses it was captured
// with, so a block a captured kernel touches must not be handed to anything else while the graph lives. Between
// begin_pool(id) and end_pool(), every allocate() is served from pool `id` (its own free lists, else cudaMalloc) and
// every deallocate() puts the block on pool `id`'s free lists, whoever allocated it (a general block freed inside
// the capture may still be read by a captured kernel). A pool's blocks freed later go back to that pool, never to the
// general lists, and are handed out only while that pool is active again. release_pool(id) ends the pool: its idle
// blocks join the general free lists and its live blocks become general blocks (freed to the general lists). Within
// one capture, reusing a pool block freed earlier in the same capture is safe for the same reason as on the stream:
// the captured work is one chain on one stream, replayed in order. One active pool at a time. While a pool is
// active an out-of-memory throws at once (no release of the cache: cudaFree inside a stream capture is not allowed),
// unless the pool was made for a second stream's work (create_pool(false)).
// release_cached() frees general idle blocks only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/best_fit_ranges.h"

namespace hlm {

struct CudaAllocatorStats {
  size_t bytes_in_use = 0;         // sum of the size classes of live blocks
  size_t bytes_requested = 0;      // sum of the requested sizes of live blocks (<= bytes_in_use)
  size_t bytes_reserved = 0;       // sum of all blocks held from the driver (live + cached)
  size_t peak_bytes_in_use = 0;
  size_t peak_bytes_reserved = 0;
  uint64_t num_allocs = 0;         // allocate() calls with bytes > 0
  uint64_t num_cache_hits = 0;     // ... served from a free list
  uint64_t num_device_mallocs = 0; // cudaMalloc calls that succeeded
  uint64_t num_device_frees = 0;   // cudaFree calls (release_cached, out-of-memory retry)
  uint64_t num_oom_retries = 0;    // cudaMalloc failures answered by releasing the cache and retrying
  uint64_t num_large_allocs = 0;   // allocate() calls served by the segments (large, outside private pools)
  size_t segment_bytes = 0;        // bytes of the segments (part of bytes_reserved)
  size_t segment_free_bytes = 0;   // ... of it in free blocks
};

class CudaAllocator {
 public:
  CudaAllocator() = default;
  ~CudaAllocator();  // frees cached blocks; live blocks are left to the driver (process exit)
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  // A device block of at least `bytes` (256-byte aligned, as cudaMalloc gives); nullptr for bytes == 0.
  void* allocate(size_t bytes);
  // Returns a block from allocate() to its free list; nullptr is a no-op; an unknown pointer is an internal error.
  void deallocate(void* ptr);
  // cudaFree's every cached (idle) block.
  void release_cached();
  CudaAllocatorStats stats() const;
  // Starts the peaks afresh from the current figures (a benchmark measuring one phase, e.g. after the weights).
  void reset_peaks();

  // The class a request of `bytes` is rounded to (>= bytes; 0 for 0).
  static size_t size_class(size_t bytes);
  static constexpr size_t kLargeBytes = size_t{1} << 20;    // requests from here on are cut from segments
  static constexpr size_t kSegmentRound = size_t{2} << 20;  // a new segment: the request rounded up to this

  // Private pools (header comment). create_pool returns a new id (> 0); begin_pool needs no other pool active.
  // for_capture = false: a pool for a second stream's work (cuda_context.h, CudaSideStream), whose blocks must not be
  // handed to the main stream's requests while its kernels may still use them; unlike a capture's pool it may
  // release the general cache and retry when cudaMalloc runs out of memory.
  uint64_t create_pool(bool for_capture = true);
  void begin_pool(uint64_t id);
  void end_pool();
  void release_pool(uint64_t id);
  // Bytes of the blocks a pool holds (live and idle; for the memory reports).
  size_t pool_bytes(uint64_t id) const;

 private:
  using FreeLists = std::unordered_map<size_t, std::vector<void*>>;  // size class -> idle blocks
  struct Live {
    size_t cls = 0, requested = 0;
    uint64_t pool = 0;  // 0: general
  };
  struct Pool {
    FreeLists free_lists;
    size_t bytes = 0;      // size classes of every block the pool holds
    bool capture = true;   // create_pool's for_capture
  };
  void release_cached_locked();
  void* allocate_large_locked(size_t bytes);
  void free_general_locked(void* ptr, size_t bytes);  // a general block back to its segment or class list
  // cudaMalloc with the stats; on out-of-memory releases the cache and retries once when may_release, else throws.
  void device_malloc_locked(void** ptr, size_t bytes, bool may_release);
  mutable std::mutex mutex_;
  FreeLists free_lists_;                       // general idle blocks
  BestFitRanges segments_{kLargeBytes};        // general large blocks: split when the rest is >= 1 MiB
  std::unordered_map<void*, Live> live_;
  std::unordered_map<uint64_t, Pool> pools_;
  uint64_t next_pool_ = 1, active_pool_ = 0;
  CudaAllocatorStats stats_;
};

// A move-only owner of one allocator block.
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(CudaAllocator& allocator, size_t bytes)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes)), bytes_(bytes) {}
  ~CudaBuffer() { reset(); }
  CudaBuffer(CudaBuffer&& o) noexcept : allocator_(o.allocator_), ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = o.allocator_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  void reset() {
    if (ptr_ != nullptr) allocator_->deallocate(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

 private:
  CudaAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace hlm
