// Named capture points (the seed paper's names), hooked by analysis, dumps and golden tests:
//   attn_in.i    residual stream entering layer i                         [T, hidden]
//   attn_delta.i token-mixer output before its residual add (before Granite's residual_multiplier)
//   attn_out.i   residual stream after the mixer's residual add
//   mlp_delta.i  MLP output before its residual add (before residual_multiplier)
//   final_hidden output of the final norm;  logits  [T, vocab] (after logits_scaling)
// A Capture receives views valid only during the call: copy what you keep.
#pragma once
#include <array>
#include <functional>
#include <string_view>

#include "core/tensor.h"

namespace hlm {

enum class CapturePoint { AttnIn, AttnDelta, AttnOut, MlpDelta, FinalHidden, Logits };

struct CapturePointInfo {
  CapturePoint point;
  std::string_view name;
  bool per_layer;
};

inline constexpr std::array<CapturePointInfo, 6> kCapturePointTable{{
    {CapturePoint::AttnIn, "attn_in", true},
    {CapturePoint::AttnDelta, "attn_delta", true},
    {CapturePoint::AttnOut, "attn_out", true},
    {CapturePoint::MlpDelta, "mlp_delta", true},
    {CapturePoint::FinalHidden, "final_hidden", false},
    {CapturePoint::Logits, "logits", false},
}};
static_assert(kCapturePointTable.size() == static_cast<size_t>(CapturePoint::Logits) + 1);

constexpr const CapturePointInfo& capture_point_info(CapturePoint p) {
  return kCapturePointTable[static_cast<size_t>(p)];
}

// Returns nullptr for an unknown name.
inline const CapturePointInfo* capture_point_by_name(std::string_view name) {
  for (const auto& row : kCapturePointTable)
    if (row.name == name) return &row;
  return nullptr;
}

// layer is -1 for points that are not per layer.
using Capture = std::function<void(CapturePoint point, int layer, const Tensor& value)>;

}  // namespace hlm
