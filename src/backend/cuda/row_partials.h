// Plan of the fused parameter-gradient sum of the warp-per-row backward kernels (rmsnorm dweight, gated rmsnorm dw;
// device side: warp_rows.cuh). The rows are cut into `groups` row-groups of W · rows_per_warp consecutive rows (W =
// the op's warps per block), one block each; warp k of a group takes the group's rows k, k + W, ... and each lane
// accumulates, in that row order, one fma per row into its columns' registers; the block adds its W warp partials in
// warp order (shared memory) into one partial row [groups, dim]; a finish kernel then gives each column S slices
// (slice s adds partial rows s, s + S, ... in order) and a fixed halving tree over the slices. The plan is a pure
// function of (rows, dim, W), so results are bit-identical run to run and independent of the GPU model.
// rows_per_warp ≥ 2 keeps the partial rows' traffic (write + read of groups · dim floats) a small fraction of the
// backward pass's own; groups ≤ clamp(2^20 / dim, 1024, 4096) bounds the workspace (≤ 4096 · dim floats, ≤ 4 MiB for
// dim ≥ 256) and the finish pass, and leaves many blocks per SM for the hardware to balance.
// Plain C++ (host and nvcc), no CUDA headers.
#pragma once
#include <algorithm>
#include <cstdint>

namespace hlm {

struct RowPartialsPlan {
  int64_t rows_per_warp = 0;  // rows one warp sums into its lanes' partials, in row order
  int64_t groups = 0;         // blocks = partial rows; group g holds rows [g·W·rows_per_warp, (g + 1)·W·rows_per_warp)
};

// W = warp_rows: warps (rows in flight) per block.
constexpr RowPartialsPlan row_partials_plan(int64_t rows, int64_t dim, int64_t warp_rows) {
  if (rows <= 0 || dim <= 0) return {};
  const int64_t W = warp_rows;
  const int64_t max_groups = std::clamp<int64_t>((int64_t{1} << 20) / dim, 1024, 4096);
  const int64_t rows_per_warp = std::max<int64_t>(2, (rows + W * max_groups - 1) / (W * max_groups));
  return {rows_per_warp, (rows + W * rows_per_warp - 1) / (W * rows_per_warp)};
}

// Longest chain of fp32 roundings behind one column total of the plan, up to and including the finish tree (a final
// add into an accumulating output is the caller's +1); the term's own products are not counted, except the fma of
// the first row, which is counted as an add. Additions of an exact zero (a warp, slice or tree operand that received
// no rows) round nothing and are not counted: a lane's fmas (≤ min(rows_per_warp, ceil(rows / W))), the block's
// adds of its warps (min(W, rows) − 1), a finish slice's adds (ceil(groups / S) − 1), and the tree levels that add
// two non-empty operands (ceil(log2(min(groups, S)))). 0 when rows ≤ 0 or dim ≤ 0.
constexpr int64_t row_partials_chain(int64_t rows, int64_t dim, int64_t warp_rows, int64_t finish_slices) {
  if (rows <= 0 || dim <= 0) return 0;
  const int64_t W = warp_rows, S = finish_slices;
  const RowPartialsPlan plan = row_partials_plan(rows, dim, W);
  int64_t tree = 0;
  while ((int64_t{1} << tree) < std::min(plan.groups, S)) ++tree;
  return std::min(plan.rows_per_warp, (rows + W - 1) / W) + (std::min(W, rows) - 1) + ((plan.groups + S - 1) / S - 1) +
         tree;
}

}  // namespace hlm
