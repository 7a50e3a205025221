// TrainConfig defaults, checks, derived plan and the printed description (trainer.h).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/data_stream.h"
#include "models/model_train.h"
#include "train/lm_head_chunking_text.h"
#include "train/lr_schedule.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace hlm {

const char* train_job_name(TrainJob job) { return job == TrainJob::Pretrain ? "pretrain" : "distill"; }

TrainConfig train_config_defaults(TrainJob job) {
  TrainConfig c;
  c.job = job;
  if (job == TrainJob::Pretrain) c.lr_rec = c.lr_rest = 1e-3;
  return c;
}

TrainPlan train_plan(const TrainConfig& c) {
  TrainPlan p;
  p.tokens_per_step = c.batch_rows * c.seq_len;
  p.total_steps = p.tokens_per_step > 0 ? lr_schedule_total_steps(c.tokens, p.tokens_per_step) : 0;
  p.warmup_steps = c.warmup_steps >= 0 ? c.warmup_steps : lr_schedule_warmup_steps(p.total_steps, c.warmup_fraction);
  p.accumulation = c.micro_batch_rows > 0 ? c.batch_rows / c.micro_batch_rows : 0;
  return p;
}

void train_config_validate(const TrainConfig& c) {
  HLM_CHECK_INPUT(c.tokens > 0, "--tokens must be positive, got ", c.tokens);
  HLM_CHECK_INPUT(c.seq_len >= 2, "--seq-len must be at least 2, got ", c.seq_len);
  HLM_CHECK_INPUT(c.batch_rows >= 1, "--batch must be positive, got ", c.batch_rows);
  HLM_CHECK_INPUT(c.micro_batch_rows >= 1, "--micro-batch must be positive, got ", c.micro_batch_rows);
  HLM_CHECK_INPUT(c.batch_rows % c.micro_batch_rows == 0, "--batch ", c.batch_rows,
                  " is not a multiple of --micro-batch ", c.micro_batch_rows);
  HLM_CHECK_INPUT(c.tokens >= c.batch_rows * c.seq_len, "--tokens ", c.tokens, " is less than one step of B x n = ",
                  c.batch_rows, " x ", c.seq_len, " = ", c.batch_rows * c.seq_len, " tokens");
  const int64_t S = train_plan(c).total_steps;
  const auto finite_positive = [](double v) { return std::isfinite(v) && v > 0.0; };
  HLM_CHECK_INPUT(finite_positive(c.lr_rec) && finite_positive(c.lr_rest), "learning rates must be positive, got ",
                  c.lr_rec, " and ", c.lr_rest);
  HLM_CHECK_INPUT(std::isfinite(c.min_lr) && c.min_lr >= 0.0 && c.min_lr <= std::min(c.lr_rec, c.lr_rest),
                  "--min-lr ", c.min_lr, " must lie in [0, the peak learning rates]");
  HLM_CHECK_INPUT(c.warmup_fraction >= 0.0 && c.warmup_fraction <= 1.0, "--warmup-fraction must lie in [0, 1], got ",
                  c.warmup_fraction);
  HLM_CHECK_INPUT(c.warmup_steps >= -1 && c.warmup_steps <= S, "--warmup-steps ", c.warmup_steps,
                  " must lie in [0, S = ", S, "] (or -1: from --warmup-fraction)");
  HLM_CHECK_INPUT(c.start_factor > 0.0 && c.start_factor <= 1.0, "--start-factor must lie in (0, 1], got ",
                  c.start_factor);
  HLM_CHECK_INPUT(std::isfinite(c.weight_decay) && c.weight_decay >= 0.0, "--weight-decay must be non-negative");
  HLM_CHECK_INPUT(c.beta1 >= 0.0 && c.beta1 < 1.0 && c.beta2 >= 0.0 && c.beta2 < 1.0,
                  "--beta1 and --beta2 must lie in [0, 1)");
  HLM_CHECK_INPUT(finite_positive(c.adam_eps), "--adam-eps must be positive");
  HLM_CHECK_INPUT(finite_positive(c.clip), "--clip must be positive");
  HLM_CHECK_INPUT(finite_positive(c.tau), "--tau must be positive");
  HLM_CHECK_INPUT(c.held_out_docs >= 1, "--held-out-docs must be positive");
  HLM_CHECK_INPUT(c.eval_tokens >= c.seq_len, "--eval-tokens ", c.eval_tokens,
                  " must hold at least one row of --seq-len ", c.seq_len, " tokens");
  HLM_CHECK_INPUT(c.anchor_share >= 0.0 && c.anchor_share <= 1.0, "--anchor-share must lie in [0, 1]");
  HLM_CHECK_INPUT(c.passes >= 1, "--passes must be at least 1, got ", c.passes);
  HLM_CHECK_INPUT(c.eval_every_tokens >= 0, "--eval-every must be non-negative");
  HLM_CHECK_INPUT(c.checkpoint_every_steps >= 0, "--checkpoint-every must be non-negative");
  HLM_CHECK_INPUT(c.log_every_steps >= 1, "--log-every must be positive");
  HLM_CHECK_INPUT(c.stop_after_steps >= 0, "--stop-after-steps must be non-negative");
  HLM_CHECK_INPUT(c.max_bad_steps >= 1, "--max-bad-steps must be positive");
  recompute_from_name(c.recompute);  // input error on an unknown mode
  data_packing_from_name(c.packing, "--packing");
  if (c.memory_plan != "auto") memory_plan_named(c.memory_plan);  // input error listing the plans
  HLM_CHECK_INPUT(c.device == "cpu" || c.device == "cuda", "--device: '", c.device, "' is not a device (cpu or cuda)");
  HLM_CHECK_INPUT(c.precision == "fp32" || c.precision == "bf16", "--precision: '", c.precision,
                  "' is not a precision (fp32 or bf16)");
  HLM_CHECK_INPUT(c.precision == "fp32" || c.device == "cuda",
                  "--precision bf16 needs --device cuda (the CPU trainer computes in fp32)");
  if (c.loss_chunking != "default") {
    parse_lm_head_chunking(c.loss_chunking);  // input error naming the forms
    HLM_CHECK_INPUT(c.device == "cuda", "--loss-chunking ", c.loss_chunking,
                    " needs --device cuda (the CPU trainer's loss keeps its own chunking)");
  }
  HLM_CHECK_INPUT(!c.out.empty(), "--out is required");
  HLM_CHECK_INPUT(!c.data.empty(), "--data is required");
  if (c.job == TrainJob::Pretrain) {
    HLM_CHECK_INPUT(!c.model_config.empty(), "--model-config is required");
  } else {
    HLM_CHECK_INPUT(!c.teacher.empty() && !c.student.empty(), "--teacher and --student are required");
  }
}

std::string train_config_describe(const TrainConfig& c) {
  const TrainPlan p = train_plan(c);
  std::string out;
  char line[512];
  const auto add = [&](const char* key, const std::string& value) {
    std::snprintf(line, sizeof line, "%-12s %s\n", key, value.c_str());
    out += line;
  };
  if (c.job == TrainJob::Pretrain) {
    add("job", "pretrain (cross-entropy on next tokens, model from scratch)");
    add("model", c.model_config + " (init seed " + std::to_string(c.init_seed) + ")");
  } else {
    add("job", str_cat("distill (forward KL only, tau ", c.tau, "; teacher frozen)"));
    add("teacher", c.teacher);
    add("student", c.student);
  }
  add("data", c.data + " (tokenizer " + c.tokenizer + ", data seed " + std::to_string(c.data_seed) +
                  str_cat(", anchor share ", c.anchor_share, ", packing ", c.packing, ")"));
  if (c.passes > 1)
    add("passes", str_cat("up to ", c.passes, " passes over the training documents (reshuffled by data seed and pass)"));
  add("out", c.out);
  if (!c.resume.empty()) add("resume", c.resume);
  add("budget", str_cat("N = ", c.tokens, " tokens: S = ", p.total_steps, " steps of B x n = ", c.batch_rows, " x ",
                        c.seq_len, " = ", p.tokens_per_step, " tokens"));
  add("micro-batch", str_cat("b = ", c.micro_batch_rows, " rows, ", p.accumulation, " accumulation steps"));
  if (c.job == TrainJob::Pretrain) {
    add("lr", str_cat("peak ", c.lr_rest));
  } else {
    add("lr", str_cat("rec ", c.lr_rec, " (.linear_attn. parameters), rest ", c.lr_rest));
  }
  add("schedule", str_cat("warmup ", p.warmup_steps, " steps from x", c.start_factor, ", cosine to ", c.min_lr,
                          " at step ", p.total_steps, " (Eq. 3)"));
  add("adamw", str_cat("betas (", c.beta1, ", ", c.beta2, "), eps ", c.adam_eps, ", weight decay ", c.weight_decay,
                       " (none on norms, biases, A_log)"));
  add("clip", str_cat("global gradient norm ", c.clip));
  add("held-out", str_cat(c.held_out_docs, " validation + ", c.held_out_docs, " test documents per language; ",
                          c.eval_tokens, " validation / ", 2 * c.eval_tokens, " test tokens per language"));
  add("cadence", str_cat("validation every ", c.eval_every_tokens, " tokens; checkpoint every ",
                         c.checkpoint_every_steps, " steps; progress every ", c.log_every_steps, " steps"));
  if (c.stop_after_steps > 0) add("stop", str_cat("after step ", c.stop_after_steps, " (with a checkpoint)"));
  add("non-finite", str_cat("skip the update; stop after ", c.max_bad_steps, " in a row"));
  add("activations", c.recompute == "none" ? "kept for the backward (--recompute none)"
                                           : "recomputed inside each layer in the backward (--recompute layer)");
  add("device", c.device == "cuda" ? "cuda (steps on GPU 0, fp32; validation and test on the CPU)" : "cpu");
  add("precision", c.precision == "bf16" ? "bf16 products (tensor cores, fp32 results), fp32 master weights"
                                         : "fp32");
  if (c.loss_chunking != "default") {
    const LmHeadChunking k = parse_lm_head_chunking(c.loss_chunking);
    add("loss tiles", str_cat(k.row_block, " logits rows by ",
                              c.loss_chunking.ends_with("xfull") ? std::string("the whole vocabulary")
                                                                 : str_cat(k.vocab_chunk, " vocabulary columns"),
                              " (--loss-chunking ", c.loss_chunking, ")"));
  }
  return out;
}

}  // namespace hlm
