// Chunks of packed variable-length sequences, for chunked scans (ops/mamba2_ssd, ops/simple_gla).
// Sequences are given by cu_seqlens cu[0..n_seqs] (token offsets); each sequence is cut into ceil(len / Q) chunks
// of Q tokens (the last one shorter), numbered sequence by sequence. A launch covers varlen_chunk_slots(...) slots,
// an upper bound on the chunk count (a chunk per Q tokens plus one partial chunk per sequence); slots past the last
// chunk are spare and do nothing.
#pragma once
#include <cstdint>

namespace hlm {

inline int64_t varlen_chunk_slots(int64_t total_tokens, int64_t Q, int64_t n_seqs) {
  return (total_tokens + Q - 1) / Q + n_seqs;
}

// Chunk slot `slot` → its sequence, first token and length. false: a spare slot past the last chunk.
__device__ inline bool varlen_locate_chunk(int64_t slot, const int64_t* cu, int64_t n_seqs, int64_t Q, int64_t& seq,
                                           int64_t& start, int64_t& len) {
  int64_t first = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t b = cu[s], e = cu[s + 1], n = (e - b + Q - 1) / Q;
    if (slot < first + n) {
      seq = s;
      start = b + (slot - first) * Q;
      len = min(Q, e - start);
      return true;
    }
    first += n;
  }
  return false;
}

}  // namespace hlm
