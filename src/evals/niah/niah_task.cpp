#include "evals/niah/niah_task.h"

#include "core/error.h"

namespace hlm {

const NiahTaskSpec& niah_task_from_name(std::string_view name) {
  std::string_view bare = name;
  if (bare.starts_with("niah_")) bare.remove_prefix(5);
  for (const NiahTaskSpec& t : kNiahTasks)
    if (t.name == bare) return t;
  throw_input_error("unknown NIAH task '", name, "' (tasks: ", niah_task_names(), ")");
}

const NiahTaskSpec& niah_task_spec(NiahTask task) {
  for (const NiahTaskSpec& t : kNiahTasks)
    if (t.task == task) return t;
  throw_internal_error("NIAH task enum value ", static_cast<int>(task), " has no table row");
}

std::string niah_task_names() {
  std::string out;
  for (const NiahTaskSpec& t : kNiahTasks) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

}  // namespace hlm
