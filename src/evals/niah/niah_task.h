// The five OneRULER needle-in-a-haystack tasks (../shared/docs/evals.md §2): how many needle keys the haystack holds,
// how many 7-digit values each key gets, how many keys the question names, and whether the queried key is present.
//   single:     1 key, 1 value,  1 query  -> the 1 number
//   multikey:   4 keys, 1 value, 1 query  -> the queried key's number (3 distractor needles)
//   multivalue: 1 key, 4 values, 1 query  -> all 4 numbers
//   multiquery: 2 keys, 1 value, 2 queries -> both numbers
//   none:       4 keys, 1 value, 1 query of a noun that is not a key -> the language's "none" word
#pragma once
#include <array>
#include <string>
#include <string_view>

namespace hlm {

enum class NiahTask { Single, Multikey, Multivalue, Multiquery, None };

struct NiahTaskSpec {
  NiahTask task;
  std::string_view name;    // "single", ...; OneRULER's yaml name is "niah_" + name
  int keys;                 // needle keys in the haystack
  int values_per_key;       // needles (7-digit values) per key
  int queries;              // keys named by the question
  bool query_present;       // false for "none": the queried noun is not among the keys
};

inline constexpr std::array<NiahTaskSpec, 5> kNiahTasks{{
    {NiahTask::Single, "single", 1, 1, 1, true},
    {NiahTask::Multikey, "multikey", 4, 1, 1, true},
    {NiahTask::Multivalue, "multivalue", 1, 4, 1, true},
    {NiahTask::Multiquery, "multiquery", 2, 1, 2, true},
    {NiahTask::None, "none", 4, 1, 1, false},
}};

// "single" or "niah_single" etc.; an input error listing the five names otherwise.
const NiahTaskSpec& niah_task_from_name(std::string_view name);
const NiahTaskSpec& niah_task_spec(NiahTask task);
// "single, multikey, multivalue, multiquery, none" (for help texts and errors).
std::string niah_task_names();

}  // namespace hlm
