// Measured inference-state bytes per layer beside the Olmo Hybrid Table 1 arithmetic (models/state_size.h) for the
// same content, in fp32 (4 bytes per element, the engine's storage): a full-attention layer's arithmetic is
// 2·Hkv·D elements per held token (Table 1's KV row), a GDN layer's is Hv·dk·dv + conv state per running sequence.
// The measured attention bytes exceed the arithmetic by the paging granularity (whole blocks, < one block per
// sequence); GDN bytes match exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infer/inference_engine.h"

namespace hlm {

struct StateReportRow {
  int layer;
  LayerKind kind;
  int64_t measured_bytes;    // from the engine's buffers
  int64_t table1_bytes;      // arithmetic for the same tokens / sequences
  int64_t reserved_bytes;    // the layer's whole pool in the plan
};

std::vector<StateReportRow> state_report(const ModelConfig& config, const StateUsage& usage);
// A fixed-width text table (one row per layer and a total).
std::string state_report_text(const std::vector<StateReportRow>& rows, const StateUsage& usage);
nlohmann::json state_report_json(const std::vector<StateReportRow>& rows, const StateUsage& usage);

}  // namespace hlm
