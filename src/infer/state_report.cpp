#include "infer/state_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "models/state_size.h"

namespace hlm {

std::vector<StateReportRow> state_report(const ModelConfig& c, const StateUsage& u) {
  constexpr int64_t kF32 = 4;
  const StateSizes per_token = state_sizes(c, 1, kF32);
  std::vector<StateReportRow> rows;
  for (size_t i = 0; i < u.layers.size(); ++i) {
    const LayerStateBytes& l = u.layers[i];
    const int64_t recurrent = l.kind == LayerKind::Mamba2
                                  ? per_token.mamba_ssm_state_elements + per_token.mamba_conv_state_elements
                              : l.kind == LayerKind::Lightning
                                  ? per_token.lightning_state_elements
                                  : per_token.recurrent_state_elements + per_token.conv_state_elements;
    const int64_t table1 = l.kind == LayerKind::FullAttention
                               ? per_token.kv_elements_per_token * u.tokens_held * kF32
                               : recurrent * u.running_sequences * kF32;
    rows.push_back({static_cast<int>(i), l.kind, l.bytes_in_use, table1, l.bytes_reserved});
  }
  return rows;
}

namespace {
const char* kind_name(LayerKind k) {
  return k == LayerKind::FullAttention ? "full_attention"
         : k == LayerKind::Mamba2      ? "mamba2"
         : k == LayerKind::Lightning   ? "lightning"
                                       : "linear_attention";
}
}  // namespace

std::string state_report_text(const std::vector<StateReportRow>& rows, const StateUsage& u) {
  std::string out;
  char line[200];
  std::snprintf(line, sizeof line, "state: %lld sequences, %lld tokens held, %lld KV blocks in use\n",
                static_cast<long long>(u.running_sequences), static_cast<long long>(u.tokens_held),
                static_cast<long long>(u.kv_blocks_in_use));
  out += line;
  std::snprintf(line, sizeof line, "%5s  %-16s  %14s  %14s  %14s\n", "layer", "kind", "measured B", "Table1 fp32 B",
                "pool B");
  out += line;
  int64_t m = 0, t = 0, r = 0;
  for (const StateReportRow& row : rows) {
    std::snprintf(line, sizeof line, "%5d  %-16s  %14lld  %14lld  %14lld\n", row.layer, kind_name(row.kind),
                  static_cast<long long>(row.measured_bytes), static_cast<long long>(row.table1_bytes),
                  static_cast<long long>(row.reserved_bytes));
    out += line;
    m += row.measured_bytes;
    t += row.table1_bytes;
    r += row.reserved_bytes;
  }
  std::snprintf(line, sizeof line, "%5s  %-16s  %14lld  %14lld  %14lld\n", "all", "", static_cast<long long>(m),
                static_cast<long long>(t), static_cast<long long>(r));
  out += line;
  return out;
}

nlohmann::json state_report_json(const std::vector<StateReportRow>& rows, const StateUsage& u) {
  nlohmann::json layers = nlohmann::json::array();
  for (const StateReportRow& row : rows)
    layers.push_back({{"layer", row.layer},
                      {"kind", kind_name(row.kind)},
                      {"measured_bytes", row.measured_bytes},
                      {"table1_fp32_bytes", row.table1_bytes},
                      {"pool_bytes", row.reserved_bytes}});
  return {{"sequences", u.running_sequences}, {"tokens_held", u.tokens_held},
          {"kv_blocks_in_use", u.kv_blocks_in_use}, {"bytes_in_use", u.bytes_in_use()},
          {"bytes_reserved", u.bytes_reserved()}, {"layers", layers}};
}

}  // namespace hlm
