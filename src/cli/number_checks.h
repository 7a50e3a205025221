// CLI11 checks for counts and seeds with plain messages: CLI11's own PositiveNumber / NonNegativeNumber say
// "--layers: Value 0 not in range 0.000000 to 1797693134862315708145...", which names neither the rule nor the value
// the user gave in words. These say "--layers: must be positive, got 0" (CLI11 puts the option's name in front).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace hlm {

// A value > 0 (strictly_positive) or ≥ 0; a value that is not a number is refused as such.
inline CLI::Validator number_at_least(bool strictly_positive) {
  const std::string rule = strictly_positive ? "positive" : "non-negative";
  return CLI::Validator(
      [strictly_positive, rule](std::string& text) -> std::string {
        double v = 0.0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          return "expected a number, got '" + text + "'";
        }
        if (used != text.size()) return "expected a number, got '" + text + "'";
        if (strictly_positive ? v > 0.0 : v >= 0.0) return "";
        return "must be " + rule + ", got " + text;
      },
      rule, rule);
}
inline CLI::Validator positive_number() { return number_at_least(true); }
inline CLI::Validator non_negative_number() { return number_at_least(false); }

}  // namespace hlm
