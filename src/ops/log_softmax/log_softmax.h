// Row-wise log-softmax over a (large) vocabulary: out[r, :] = x[r, :] - logsumexp(x[r, :]), max subtracted first,
// sum accumulated in double. Shapes: x, out [R, V] (out may alias x). A row containing NaN yields NaN.
#pragma once
#include <cstdint>

namespace hlm {

void log_softmax_forward(float* out, const float* x, int64_t R, int64_t V);
// logsumexp of each row: lse [R].
void logsumexp_forward(float* lse, const float* x, int64_t R, int64_t V);

}  // namespace hlm
