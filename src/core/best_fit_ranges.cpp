#include "core/best_fit_ranges.h"

#include "core/error.h"

namespace hlm {

void BestFitRanges::mark_free(Blocks::iterator it) {
  it->second.free = true;
  free_.emplace(it->second.bytes, it->first);
  free_bytes_ += it->second.bytes;
}

void BestFitRanges::unmark_free(Blocks::iterator it) {
  free_.erase({it->second.bytes, it->first});
  free_bytes_ -= it->second.bytes;
  it->second.free = false;
}

void BestFitRanges::add_segment(uintptr_t base, size_t bytes) {
  HLM_CHECK(bytes > 0, "BestFitRanges::add_segment: empty segment");
  auto next = segments_.lower_bound(base);
  HLM_CHECK(next == segments_.end() || next->first >= base + bytes, "BestFitRanges::add_segment: overlaps a segment");
  if (next != segments_.begin()) {
    auto prev = std::prev(next);
    HLM_CHECK(prev->first + prev->second <= base, "BestFitRanges::add_segment: overlaps a segment");
  }
  segments_.emplace(base, bytes);
  segment_bytes_ += bytes;
  mark_free(blocks_.emplace(base, Block{bytes, base, true}).first);
}

std::optional<BestFitRanges::Taken> BestFitRanges::take(size_t bytes) {
  HLM_CHECK(bytes > 0, "BestFitRanges::take: zero bytes");
  const auto fit = free_.lower_bound({bytes, 0});
  if (fit == free_.end()) return std::nullopt;
  auto it = blocks_.find(fit->second);
  unmark_free(it);
  Block& block = it->second;
  if (block.bytes - bytes >= split_min_) {  // cut the request from the front; the rest stays free
    const uintptr_t rest = it->first + bytes;
    auto rest_it = blocks_.emplace_hint(std::next(it), rest, Block{block.bytes - bytes, block.segment, true});
    block.bytes = bytes;
    mark_free(rest_it);
  }
  return Taken{it->first, block.bytes};
}

size_t BestFitRanges::give_back(uintptr_t addr) {
  auto it = blocks_.find(addr);
  HLM_CHECK(it != blocks_.end() && !it->second.free, "BestFitRanges::give_back: ", addr, " is not a taken block");
  const size_t bytes = it->second.bytes;
  // Merge with the next block, then the previous one, when free and in the same segment.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    unmark_free(next);
    it->second.bytes += next->second.bytes;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      unmark_free(prev);
      prev->second.bytes += it->second.bytes;
      blocks_.erase(it);
      it = prev;
    }
  }
  mark_free(it);
  return bytes;
}

bool BestFitRanges::is_taken(uintptr_t addr) const {
  const auto it = blocks_.find(addr);
  return it != blocks_.end() && !it->second.free;
}

std::vector<std::pair<uintptr_t, size_t>> BestFitRanges::release_free_segments() {
  std::vector<std::pair<uintptr_t, size_t>> released;
  for (auto seg = segments_.begin(); seg != segments_.end();) {
    auto it = blocks_.find(seg->first);
    if (it != blocks_.end() && it->second.free && it->second.bytes == seg->second) {
      unmark_free(it);
      blocks_.erase(it);
      released.emplace_back(seg->first, seg->second);
      segment_bytes_ -= seg->second;
      seg = segments_.erase(seg);
    } else {
      ++seg;
    }
  }
  return released;
}

}  // namespace hlm
