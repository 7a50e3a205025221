// The points a scaling fit reads: a CSV file with a header naming at least the columns arch, N, D, loss (any order;
// other columns are ignored), one run per line: N = non-embedding parameters, D = training tokens, loss = final
// validation loss in nats/token. Every value must be a finite positive number and arch non-empty.
// Input errors (exit 2) name the file, the line and the column: a missing file, a missing column, a short row, a
// value that is not a number, a non-positive or non-finite N/D/loss, no data rows.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "scaling/chinchilla_fit.h"

namespace hlm {

std::vector<ScalingPoint> read_scaling_points(const std::filesystem::path& path);
// The same from CSV text; `source` names it in error messages.
std::vector<ScalingPoint> parse_scaling_points(const std::string& text, const std::string& source);

// Architecture names in order of first appearance.
std::vector<std::string> scaling_architectures(const std::vector<ScalingPoint>& points);
// The points of one architecture, in file order.
std::vector<ScalingPoint> scaling_points_of(const std::vector<ScalingPoint>& points, const std::string& arch);

}  // namespace hlm
