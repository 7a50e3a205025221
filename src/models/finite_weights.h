// Loaded weights must be finite: a NaN or infinity in a downloaded or damaged checkpoint would otherwise surface
// much later as a NaN loss or silent garbage. Model::load checks every tensor after converting it to f32 and
// refuses the first non-finite one with an input error naming the directory, the tensor and the element. The
// process-wide switch below (the CLI's `--allow-nonfinite-weights`) turns the error into a warning.
#pragma once
#include <string>

#include "core/tensor.h"

namespace hlm {

void set_allow_nonfinite_weights(bool allow);
bool allow_nonfinite_weights();

// `value` must be an f32 tensor. Input error (or, when allowed, a warning on stderr) naming `source` and `name`.
void check_finite_weights(const Tensor& value, const std::string& source, const std::string& name);

}  // namespace hlm
