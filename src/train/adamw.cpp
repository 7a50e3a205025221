// AdamW step (torch.optim.AdamW formula, see adamw.h) and the default weight-decay rule.
#include "train/adamw.h"

#include "core/dtype.h"

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

AdamW::AdamW(std::vector<AdamWGroup> groups, std::vector<AdamWParam> params, AdamWConfig config, bool with_state)
    : groups_(std::move(groups)), params_(std::move(params)), config_(config), with_state_(with_state) {
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
    if (!with_state_) continue;
    if (config_.state == AdamWStateFormat::Q8) {
      const auto n = static_cast<size_t>(p.param.numel()), blocks = static_cast<size_t>(q8_blocks(p.param.numel()));
      AdamWQ8State q;
      q.q_m.assign(n, q8_codebook_signed().zero);
      q.q_v.assign(n, q8_codebook_unsigned().zero);
      q.absmax_m.assign(blocks, 0.0f);
      q.absmax_v.assign(blocks, 0.0f);
      q8_.push_back(std::move(q));
    } else {
      exp_avg_.push_back(Tensor::zeros(p.param.shape()));
      exp_avg_sq_.push_back(Tensor::zeros(p.param.shape()));
    }
  }
  if (config_.master == MasterFormat::Bf16Sr)  // bf16 master weights: start from the nearest bf16 values
    for (auto& p : params_) {
      float* x = p.param.f32();
      for (int64_t j = 0; j < p.param.numel(); ++j) x[j] = bf16_to_f32(f32_to_bf16(x[j]));
    }
}

void AdamW::step_lowmem() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const AdamWGroup& group = groups_[static_cast<size_t>(params_[i].group)];
    const AdamWLowmemStep s =
        adamw_lowmem_step(group.lr, group.weight_decay, config_.beta1, config_.beta2, config_.eps, step_,
                          adamw_sr_base(config_.sr_seed, step_, params_[i].name));
    AdamWLowmemTensor t;
    const int64_t n = params_[i].param.numel();
    std::vector<uint16_t> bf16;
    if (config_.master == MasterFormat::Bf16Sr) {
      bf16.resize(static_cast<size_t>(n));
      const float* x = params_[i].param.f32();
      for (int64_t j = 0; j < n; ++j) bf16[static_cast<size_t>(j)] = f32_to_bf16(x[j]);  // exact: bf16 values
      t.param_bf16 = bf16.data();
    } else {
      t.param_f32 = params_[i].param.f32();
    }
    if (config_.state == AdamWStateFormat::Q8) {
      t.q_m = q8_[i].q_m.data();
      t.q_v = q8_[i].q_v.data();
      t.absmax_m = q8_[i].absmax_m.data();
      t.absmax_v = q8_[i].absmax_v.data();
    } else {
      t.exp_avg = exp_avg_[i].f32();
      t.exp_avg_sq = exp_avg_sq_[i].f32();
    }
    t.grad = params_[i].grad.f32();
    t.n = n;
    adamw_lowmem_step_ref(t, nullptr, s);
    if (!bf16.empty()) {
      float* x = params_[i].param.f32();
      for (int64_t j = 0; j < n; ++j) x[j] = bf16_to_f32(bf16[static_cast<size_t>(j)]);
    }
  }
}

void AdamW::check_state(const char* what) const {
  HLM_CHECK(with_state_, "AdamW::", what, ": this optimizer was built without state");
}

void AdamW::step() {
  check_state("step");
  ++step_;
  moments_initial_ = false;
  if (config_.state != AdamWStateFormat::F32 || config_.master != MasterFormat::F32) return step_lowmem();
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

Tensor AdamW::exp_avg(size_t i) const {
  check_state("exp_avg");
  if (config_.state == AdamWStateFormat::F32) return exp_avg_[i];
  Tensor m = Tensor::zeros(params_[i].param.shape());
  q8_dequantize(q8_codebook_signed(), q8_[i].q_m.data(), q8_[i].absmax_m.data(), m.numel(), m.f32());
  return m;
}

Tensor AdamW::exp_avg_sq(size_t i) const {
  check_state("exp_avg_sq");
  if (config_.state == AdamWStateFormat::F32) return exp_avg_sq_[i];
  Tensor v = Tensor::zeros(params_[i].param.shape());
  q8_dequantize(q8_codebook_unsigned(), q8_[i].q_v.data(), q8_[i].absmax_v.data(), v.numel(), v.f32());
  return v;
}

const AdamWQ8State& AdamW::q8_state(size_t i) const {
  HLM_CHECK(config_.state == AdamWStateFormat::Q8 && i < q8_.size(), "AdamW::q8_state: not an 8-bit state");
  return q8_[i];
}

void AdamW::set_q8_state(size_t i, AdamWQ8State state) {
  HLM_CHECK(config_.state == AdamWStateFormat::Q8 && i < q8_.size(), "AdamW::set_q8_state: not an 8-bit state");
  const auto n = static_cast<size_t>(params_[i].param.numel()), blocks = static_cast<size_t>(q8_blocks(params_[i].param.numel()));
  HLM_CHECK_INPUT(state.q_m.size() == n && state.q_v.size() == n && state.absmax_m.size() == blocks &&
                      state.absmax_v.size() == blocks,
                  "8-bit optimizer state for '", params_[i].name, "' has the wrong size");
  q8_[i] = std::move(state);
  moments_initial_ = false;
}

void AdamW::set_state(size_t i, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  check_state("set_state");
  moments_initial_ = false;
  HLM_CHECK_INPUT(i < params_.size(), "optimizer state index ", i, " out of range");
  HLM_CHECK_INPUT(exp_avg.shape() == params_[i].param.shape() && exp_avg_sq.shape() == params_[i].param.shape(),
                  "optimizer state for '", params_[i].name, "' has the wrong shape");
  const Tensor m = exp_avg.to(DType::F32).contiguous(), v = exp_avg_sq.to(DType::F32).contiguous();
  if (config_.state == AdamWStateFormat::Q8) {
    q8_quantize(q8_codebook_signed(), m.f32(), m.numel(), q8_[i].q_m.data(), q8_[i].absmax_m.data());
    q8_quantize(q8_codebook_unsigned(), v.f32(), v.numel(), q8_[i].q_v.data(), q8_[i].absmax_v.data());
    return;
  }
  std::memcpy(exp_avg_[i].f32(), m.f32(), exp_avg_[i].nbytes());
  std::memcpy(exp_avg_sq_[i].f32(), v.f32(), exp_avg_sq_[i].nbytes());
}

void AdamW::set_step_count(int64_t step) {
  HLM_CHECK_INPUT(step >= 0, "negative optimizer step count ", step);
  step_ = step;
}

}  // namespace hlm
