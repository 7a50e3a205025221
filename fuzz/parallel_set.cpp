// Fuzz target: a parallel evaluation set through parallel_set_load. The first input byte picks plain JSONL
// (set.jsonl, even) or the zstd-compressed form (set.jsonl.zst, odd: the target compresses the rest); then the
// unit pairs of the first two languages, as the align stage asks for them.
#include <string>

#include "fuzz_target.h"
#include "data/parallel_set.h"

HLM_FUZZ_TARGET(parallel_set) {
  if (input.empty()) return;
  const bool zst = (static_cast<unsigned char>(input[0]) & 1) != 0;
  const std::string_view rest = input.substr(1);
  const std::filesystem::path path = zst ? hlm::fuzz::write_scratch("set.jsonl.zst", hlm::fuzz::zstd_compress(rest))
                                         : hlm::fuzz::write_scratch("set.jsonl", rest);
  const hlm::ParallelSet set = hlm::parallel_set_load(path);
  size_t total = set.units.size();
  if (set.langs.size() >= 2) total += set.pairs(set.langs[0], set.langs[1]).size();
  hlm::fuzz::keep(static_cast<uint64_t>(total));
}
