// Whether a JSON value converts to a C++ type without nlohmann's silent casts: an integer field takes only JSON
// integers inside its range (1e300 or -1 for an unsigned field would be undefined behaviour or a wrapped value), a
// floating field any number, a string field a string, a bool a bool, a vector an array whose elements all fit.
// Config parsers check this before get_to() so that a wrong value is an input error naming the key.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace hlm {

template <typename T>
struct JsonFits {
  static bool check(const nlohmann::json& v) {
    if constexpr (std::is_same_v<T, bool>) {
      return v.is_boolean();
    } else if constexpr (std::is_integral_v<T>) {
      if (v.is_number_unsigned())
        return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      if (v.is_number_integer()) {
        const int64_t x = v.get<int64_t>();
        return std::is_signed_v<T> ? x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                         x <= static_cast<int64_t>(std::numeric_limits<T>::max())
                                   : x >= 0;
      }
      return false;
    } else if constexpr (std::is_floating_point_v<T>) {
      return v.is_number();
    } else if constexpr (std::is_same_v<T, std::string>) {
      return v.is_string();
    } else {
      static_assert(sizeof(T) == 0, "JsonFits: add this type");
      return false;
    }
  }
};

template <typename U>
struct JsonFits<std::vector<U>> {
  static bool check(const nlohmann::json& v) {
    if (!v.is_array()) return false;
    for (const nlohmann::json& e : v)
      if (!JsonFits<U>::check(e)) return false;
    return true;
  }
};

template <typename T>
bool json_fits(const nlohmann::json& v) {
  return JsonFits<T>::check(v);
}

}  // namespace hlm
