// Reading JSON config files that embed trainer settings (the study's and the NIAH experiment's): typed optional keys,
// unknown-key refusal, and a trainer section merged over a job's defaults.
// Contracts: every failure is an input error naming `where` and the key; nothing is read from disk here.
#pragma once
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/json_fits.h"
#include "train/trainer.h"

namespace hlm {

// Reads `j[key]` into `out` when present; a wrong type or an out-of-range number is an input error naming the key.
template <typename T>
void read_config_key(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  if (!j.contains(key)) return;
  HLM_CHECK_INPUT(json_fits<T>(j.at(key)), where, ".", key, ": wrong type or out of range");
  j.at(key).get_to(out);
}

// `j` must be an object whose keys are all in `known`; otherwise an input error listing the known keys.
void check_config_keys(const nlohmann::json& j, const std::set<std::string>& known, const std::string& where);

// The trainer settings of `section` over `base` (a job's defaults). "lr" is pretrain's single peak rate (both
// lr_rec and lr_rest); the keys in `owned` are set by the caller and refused with "set by <owner>, not allowed here";
// any key the trainer config does not have is refused.
TrainConfig train_config_section(const TrainConfig& base, const nlohmann::json& section,
                                 const std::set<std::string>& owned, const std::string& owner,
                                 const std::string& where);

// `c` as a section again: the trainer config's JSON without its format/version/job and without the `owned` keys.
nlohmann::json train_config_section_to_json(const TrainConfig& c, const std::set<std::string>& owned);

}  // namespace hlm
