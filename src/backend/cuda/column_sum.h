// Plan of the deterministic column sum out[c] += Σ_r term(r, c) used for parameter gradients (rmsnorm dweight, matmul
// dbias). Two passes, no atomics: pass 1 gives each (chunk of rows_per_chunk rows, column) one thread that sums its
// rows in order into a partial [chunks, cols] (fp32); pass 2 gives each column one thread that sums its partials in
// chunk order and adds the total into out. The plan is a pure function of (rows, cols, scratch bytes), so results are
// bit-identical run to run and independent of the GPU model; with one chunk pass 1 is skipped.
//
// Error: every output is a sum of at most rows_per_chunk + chunks + 1 fp32 roundings in sequence (the test
// tolerances use column_sum_path_length).
// Plain C++ (host and nvcc), no CUDA headers.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace hlm {

inline constexpr int64_t kColumnSumRowsPerChunk = 32;  // rows one thread sums in pass 1 (at least)
inline constexpr int64_t kColumnSumMaxChunks = 1024;   // bounds the partial buffer and pass 2's serial sum

struct ColumnSumPlan {
  int64_t chunks = 1;
  int64_t rows_per_chunk = 0;
  size_t scratch_bytes = 0;  // partials: chunks · cols floats (0 when chunks == 1)
};

constexpr ColumnSumPlan column_sum_plan(int64_t rows, int64_t cols, size_t scratch_bytes_available) {
  ColumnSumPlan plan;
  plan.rows_per_chunk = rows;
  if (rows <= kColumnSumRowsPerChunk || cols <= 0) return plan;
  int64_t chunks = (rows + kColumnSumRowsPerChunk - 1) / kColumnSumRowsPerChunk;
  chunks = std::min(chunks, kColumnSumMaxChunks);
  chunks = std::min<int64_t>(chunks, static_cast<int64_t>(scratch_bytes_available / (sizeof(float) * cols)));
  if (chunks <= 1) return plan;
  plan.rows_per_chunk = (rows + chunks - 1) / chunks;
  plan.chunks = (rows + plan.rows_per_chunk - 1) / plan.rows_per_chunk;
  plan.scratch_bytes = static_cast<size_t>(plan.chunks * cols) * sizeof(float);
  return plan;
}

// Scratch bytes for the finest plan (as many chunks as the caps allow).
constexpr size_t column_sum_scratch_bytes(int64_t rows, int64_t cols) {
  return column_sum_plan(rows, cols, ~size_t{0} / 2).scratch_bytes;
}

// Longest chain of fp32 additions behind one output (pass 1 + pass 2 + the final add into out).
constexpr int64_t column_sum_path_length(const ColumnSumPlan& plan) {
  return plan.rows_per_chunk + (plan.chunks > 1 ? plan.chunks : 0) + 1;
}

}  // namespace hlm
