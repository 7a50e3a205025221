// AdamW step (torch.optim.AdamW formula, see adamw.h) and the default weight-decay rule.
#include "train/adamw.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <unordered_set>

namespace hlm {

bool default_weight_decay(const std::string& hf_name) {
  std::string lower = hf_name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.find("norm") != std::string::npos) return false;
  if (lower.size() >= 4 && lower.compare(lower.size() - 4, 4, "bias") == 0) return false;
  const std::string last = hf_name.substr(hf_name.rfind('.') + 1);  // whole name when there is no '.'
  if (last == "A_log") return false;
  return true;
}

AdamW::AdamW(std::vector<AdamWGroup> groups, std::vector<AdamWParam> params, AdamWConfig config)
    : groups_(std::move(groups)), params_(std::move(params)), config_(config) {
  HLM_CHECK_INPUT(config_.beta1 >= 0.0 && config_.beta1 < 1.0 && config_.beta2 >= 0.0 && config_.beta2 < 1.0,
                  "AdamW betas must lie in [0, 1), got (", config_.beta1, ", ", config_.beta2, ")");
  HLM_CHECK_INPUT(config_.eps >= 0.0, "AdamW eps must be non-negative, got ", config_.eps);
  std::unordered_set<std::string> names;
  for (const auto& p : params_) {
    HLM_CHECK_INPUT(names.insert(p.name).second, "parameter '", p.name, "' is listed twice");
    HLM_CHECK_INPUT(p.group >= 0 && p.group < static_cast<int>(groups_.size()), "parameter '", p.name,
                    "' has group ", p.group, " but there are ", groups_.size(), " groups");
    HLM_CHECK_INPUT(p.param.defined() && p.grad.defined(), "parameter '", p.name, "' lacks a tensor or gradient");
    HLM_CHECK_INPUT(p.param.dtype() == DType::F32 && p.grad.dtype() == DType::F32 && p.param.is_contiguous() &&
                        p.grad.is_contiguous(),
                    "parameter '", p.name, "' and its gradient must be contiguous f32");
    HLM_CHECK_INPUT(p.param.shape() == p.grad.shape(), "parameter '", p.name, "' has shape ", p.param.shape().str(),
                    " but its gradient ", p.grad.shape().str());
    exp_avg_.push_back(Tensor::zeros(p.param.shape()));
    exp_avg_sq_.push_back(Tensor::zeros(p.param.shape()));
  }
}

void AdamW::step() {
  ++step_;
  const double beta1 = config_.beta1, beta2 = config_.beta2, eps = config_.eps;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step_));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step_)));
  for (size_t i = 0; i < params_.size(); ++i) {
    const AdamWGroup& group = groups_[static_cast<size_t>(params_[i].group)];
    const double decay = 1.0 - group.lr * group.weight_decay;
    const double step_size = group.lr / bias_correction1;
    float* p = params_[i].param.f32();
    const float* g = params_[i].grad.f32();
    float* m = exp_avg_[i].f32();
    float* v = exp_avg_sq_[i].f32();
    const int64_t n = params_[i].param.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t j = 0; j < n; ++j) {
      const double gj = g[j];
      const double mj = beta1 * m[j] + (1.0 - beta1) * gj;
      const double vj = beta2 * v[j] + (1.0 - beta2) * gj * gj;
      m[j] = static_cast<float>(mj);
      v[j] = static_cast<float>(vj);
      // Uses the stored (fp32-rounded) moments, as PyTorch does with its fp32 state.
      const double denom = std::sqrt(static_cast<double>(v[j])) / bias_correction2_sqrt + eps;
      p[j] = static_cast<float>(static_cast<double>(p[j]) * decay - step_size * static_cast<double>(m[j]) / denom);
    }
  }
}

std::vector<Tensor> AdamW::grads() const {
  std::vector<Tensor> out;
  out.reserve(params_.size());
  for (const auto& p : params_) out.push_back(p.grad);
  return out;
}

void AdamW::set_state(size_t i, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  HLM_CHECK_INPUT(i < params_.size(), "optimizer state index ", i, " out of range");
  HLM_CHECK_INPUT(exp_avg.shape() == exp_avg_[i].shape() && exp_avg_sq.shape() == exp_avg_sq_[i].shape(),
                  "optimizer state for '", params_[i].name, "' has the wrong shape");
  const Tensor m = exp_avg.to(DType::F32), v = exp_avg_sq.to(DType::F32);
  std::memcpy(exp_avg_[i].f32(), m.f32(), exp_avg_[i].nbytes());
  std::memcpy(exp_avg_sq_[i].f32(), v.f32(), exp_avg_sq_[i].nbytes());
}

void AdamW::set_step_count(int64_t step) {
  HLM_CHECK_INPUT(step >= 0, "negative optimizer step count ", step);
  step_ = step;
}

}  // namespace hlm
