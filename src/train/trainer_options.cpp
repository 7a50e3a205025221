// The TrainConfig table and what derives from it: JSON, resume rules, the command runner (trainer_options.h).
#include "train/trainer_options.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/communicator.h"
#include "train/checkpoint_io.h"
#include "train/json_fits.h"

namespace hlm {

namespace {

using json = nlohmann::json;
using C = TrainConfig;
constexpr unsigned P = kTrainJobPretrain, D = kTrainJobDistill, B = kTrainJobBoth;

// key, option, field, jobs, fixed, cli_only, required, help
const std::array kOptions{
    TrainOption{"model_config", "--model-config", &C::model_config, P, true, false, true,
                "HF-style config.json of the model to create from scratch"},
    TrainOption{"teacher", "--teacher", &C::teacher, D, true, false, true, "Frozen teacher model directory"},
    TrainOption{"student", "--student", &C::student, D, true, false, true,
                "Student model directory (from `hybridlm convert`)"},
    TrainOption{"data", "--data", &C::data, B, true, false, true, "Corpus directory (corpus.json + *.jsonl.zst)"},
    TrainOption{"tokenizer", "--tokenizer", &C::tokenizer, B, true, false, false,
                "Tokenizer: \"bytes\" or an HF tokenizer.json (its vocabulary must fit the model's)"},
    TrainOption{"out", "--out", &C::out, B, false, false, true,
                "Run directory (absent or empty; on resume also the checkpoint's own run directory)"},
    TrainOption{"resume", "--resume", &C::resume, B, false, false, false,
                "Continue from a checkpoint directory or a run directory's newest checkpoint"},
    TrainOption{"tokens", "--tokens", &C::tokens, B, true, false, true, "Training token budget N"},
    TrainOption{"seq_len", "--seq-len", &C::seq_len, B, true, false, false, "Tokens per packed row n"},
    TrainOption{"batch_rows", "--batch", &C::batch_rows, B, true, false, false, "Rows per optimisation step B"},
    TrainOption{"micro_batch_rows", "--micro-batch", &C::micro_batch_rows, B, true, false, false,
                "Rows per forward/backward b (B % b == 0; gradients accumulate over B/b micro-batches)"},
    TrainOption{"lr", "--lr", &C::lr_rest, P, true, true, false, "Peak learning rate (every parameter)"},
    TrainOption{"lr_rec", "--lr-rec", &C::lr_rec, D, true, false, false,
                "Peak learning rate of converted GDN layers (names containing .linear_attn.)"},
    TrainOption{"lr_rest", "--lr-rest", &C::lr_rest, D, true, false, false,
                "Peak learning rate of every other parameter"},
    TrainOption{"min_lr", "--min-lr", &C::min_lr, B, true, false, false, "Cosine floor eta_min"},
    TrainOption{"warmup_fraction", "--warmup-fraction", &C::warmup_fraction, B, true, false, false,
                "Warmup steps as a fraction of S (s_w = floor(fraction * S))"},
    TrainOption{"warmup_steps", "--warmup-steps", &C::warmup_steps, B, true, false, false,
                "Warmup steps s_w (overrides --warmup-fraction when >= 0)"},
    TrainOption{"start_factor", "--start-factor", &C::start_factor, B, true, false, false,
                "Warmup start factor epsilon"},
    TrainOption{"weight_decay", "--weight-decay", &C::weight_decay, B, true, false, false,
                "AdamW decoupled weight decay (not on norms, biases, A_log)"},
    TrainOption{"beta1", "--beta1", &C::beta1, B, true, false, false, "AdamW beta1"},
    TrainOption{"beta2", "--beta2", &C::beta2, B, true, false, false, "AdamW beta2"},
    TrainOption{"adam_eps", "--adam-eps", &C::adam_eps, B, true, false, false, "AdamW epsilon"},
    TrainOption{"clip", "--clip", &C::clip, B, true, false, false, "Global gradient-norm clip c"},
    TrainOption{"tau", "--tau", &C::tau, D, true, false, false, "Distillation temperature tau"},
    TrainOption{"data_seed", "--data-seed", &C::data_seed, B, true, false, false,
                "Data seed: training document order and language interleaving"},
    TrainOption{"init_seed", "--seed", &C::init_seed, P, true, false, false, "Weight initialisation seed"},
    TrainOption{"held_out_docs", "--held-out-docs", &C::held_out_docs, B, true, false, false,
                "Validation and test documents per language (never trained on)"},
    TrainOption{"eval_tokens", "--eval-tokens", &C::eval_tokens, B, true, false, false,
                "Validation tokens per language (test: twice as many)"},
    TrainOption{"anchor_share", "--anchor-share", &C::anchor_share, B, true, false, false,
                "Share of the budget for anchor-tier languages"},
    TrainOption{"packing", "--packing", &C::packing, B, true, false, false,
                "Packing of rows: reset (sequences end at document boundaries) or continuous (one sequence per row "
                "across documents, as HF-style packing); held-out rows are packed alike"},
    TrainOption{"passes", "--passes", &C::passes, B, true, false, false,
                "Passes over the training documents the stream may make (each later pass reshuffles them by the data "
                "seed and the pass; held-out documents never enter); S and the schedule do not change, passes only "
                "decide whether the data runs out (data_exhausted after the last)"},
    TrainOption{"eval_every_tokens", "--eval-every", &C::eval_every_tokens, B, false, false, false,
                "Validate every this many training tokens (0: only at start and end)"},
    TrainOption{"checkpoint_every_steps", "--checkpoint-every", &C::checkpoint_every_steps, B, false, false, false,
                "Checkpoint every this many steps (0: never; the newest is kept)"},
    TrainOption{"log_every_steps", "--log-every", &C::log_every_steps, B, false, false, false,
                "Progress line to stderr every this many steps"},
    TrainOption{"stop_after_steps", "--stop-after-steps", &C::stop_after_steps, B, false, false, false,
                "Stop after this step with a checkpoint, to resume later (0: run to the end)"},
    TrainOption{"max_bad_steps", "--max-bad-steps", &C::max_bad_steps, B, false, false, false,
                "Consecutive non-finite steps (skipped) that stop the run"},
    TrainOption{"recompute", "--recompute", &C::recompute, B, false, false, false,
                "Activation recomputation: layer (keep layer inputs, recompute inside layers) or none (keep all; "
                "more memory, ~1/4 less compute; identical results)"},
    TrainOption{"device", "--device", &C::device, B, false, false, false,
                "Where the steps run: cpu, or cuda (GPU 0; needs a build with the CUDA backend)"},
    TrainOption{"zero_stage", "--zero-stage", &C::zero_stage, B, false, false, false,
                "With several ranks (mpirun/srun, docs/distributed.md): 1 shards AdamW's moments over the ranks "
                "(ZeRO-1; on the GPU fp32 or 8-bit, with --precision bf16 also the linears' fp32 master weights, "
                "and lean's update; on the CPU fp32 plans only), 0 keeps a whole copy on every rank (the CPU "
                "trainer's adam8 and lean need it; the GPU trainer refuses it with lean)"},
    // Not an option: the number of ranks, from the launcher; fixed, so a resume on another number is refused.
    TrainOption{"world_size", "", &C::world_size, 0u, true, false, false, "Ranks of the run"},
    TrainOption{"precision", "--precision", &C::precision, B, false, false, false,
                "Products of the linears and the LM head: fp32, or bf16 (--device cuda: bf16 tensor cores with fp32 "
                "results, the MLPs' gate and up kept in bf16 (HLM_MLP_BF16_GATE_UP=off: fp32); master weights and "
                "optimizer state stay fp32, activations too unless only bf16 products read them)"},
    TrainOption{"memory_plan", "--memory-plan", &C::memory_plan, B, false, false, false,
                "Memory plan (docs/training.md): auto (the first that fits the device's free memory), fp32, "
                "teacher-bf16 (teacher held once in bf16), adam8 (+ 8-bit block-wise AdamW moments), lean (+ bf16 "
                "master weights with stochastic rounding; on the GPU with --precision bf16: the linears and their gradients "
                "held in bf16)"},
    TrainOption{"loss_chunking", "--loss-chunking", &C::loss_chunking, B, false, false, false,
                "LM-head loss tiles on the GPU (--device cuda): ROWSxCOLS (ROWS logits rows by COLS vocabulary "
                "columns at a time), ROWSxfull (one chunk over the vocabulary: the KL's six logits-sized products "
                "become four, for a workspace of ~ROWS x vocabulary x 10 bytes that the memory plan does not count), "
                "or default (4096x4096)"},
};

std::string value_text(const TrainConfig& c, const TrainField& field) {
  return std::visit([&](auto member) { return json(c.*member).dump(); }, field);
}

}  // namespace

std::span<const TrainOption> train_options() { return kOptions; }

unsigned train_job_bit(TrainJob job) { return job == TrainJob::Pretrain ? kTrainJobPretrain : kTrainJobDistill; }

json train_config_to_json(const TrainConfig& c) {
  json j = {{"format", "hybridlm-train-config"}, {"version", 1}, {"job", train_job_name(c.job)}};
  for (const TrainOption& o : kOptions) {
    if (o.cli_only) continue;
    std::visit([&](auto member) { j[o.key] = c.*member; }, o.field);
  }
  return j;
}

TrainConfig train_config_from_json(const json& j, const std::string& source) {
  // A non-string "format" or "job" is a wrong config, not a JSON type error.
  const auto text = [&](const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  HLM_CHECK_INPUT(j.is_object() && text("format") == "hybridlm-train-config", source,
                  ": not a hybridlm training config");
  const std::string job = text("job");
  HLM_CHECK_INPUT(job == "pretrain" || job == "distill", source, ": unknown job '", job, "'");
  TrainConfig c = train_config_defaults(job == "pretrain" ? TrainJob::Pretrain : TrainJob::Distill);
  for (const auto& item : j.items()) {  // not a structured binding: clang < 16 cannot capture one (the fuzz build)
    const std::string& key = item.key();
    const json& value = item.value();
    if (key == "format" || key == "version" || key == "job") continue;
    const auto it = std::find_if(kOptions.begin(), kOptions.end(),
                                 [&](const TrainOption& o) { return !o.cli_only && key == o.key; });
    HLM_CHECK_INPUT(it != kOptions.end(), source, ": unknown setting '", key, "'");
    std::visit(
        [&](auto member) {
          // Checked first: nlohmann would cast 1e300 into an integer field (undefined) or -1 into an unsigned one.
          using Field = std::remove_reference_t<decltype(c.*member)>;
          HLM_CHECK_INPUT(json_fits<Field>(value), source, ": '", key, "' has the wrong type or is out of range");
          value.get_to(c.*member);
        },
        it->field);
  }
  return c;
}

std::vector<std::string> train_config_fixed_differences(const TrainConfig& a, const TrainConfig& b) {
  std::vector<std::string> out;
  if (a.job != b.job) out.push_back(std::string("job: ") + train_job_name(a.job) + " vs " + train_job_name(b.job));
  for (const TrainOption& o : kOptions) {
    if (!o.fixed || o.cli_only) continue;
    const std::string va = value_text(a, o.field), vb = value_text(b, o.field);
    if (va != vb) out.push_back(std::string(o.key) + ": " + va + " vs " + vb);
  }
  return out;
}

TrainConfig train_config_resolve(TrainJob job, const TrainConfig& parsed, const std::vector<std::string>& given) {
  const auto was_given = [&](const TrainOption& o) {
    return std::find(given.begin(), given.end(), o.key) != given.end();
  };
  const unsigned bit = train_job_bit(job);
  HLM_CHECK_INPUT(std::find(given.begin(), given.end(), "out") != given.end(), "--out is required");
  if (parsed.resume.empty()) {
    for (const TrainOption& o : kOptions)
      HLM_CHECK_INPUT(!(o.jobs & bit) || !o.required || was_given(o), o.option, " is required (unless --resume)");
    TrainConfig c = parsed;
    c.job = job;
    if (job == TrainJob::Pretrain) c.lr_rec = c.lr_rest;
    return c;
  }
  const std::filesystem::path dir = checkpoint_find(parsed.resume);
  const CheckpointInfo info = checkpoint_read(dir);
  TrainConfig c = train_config_from_json(info.train_config, (dir / kCheckpointConfigFile).string());
  HLM_CHECK_INPUT(c.job == job, "--resume ", dir.string(), ": the checkpoint is from a ", train_job_name(c.job),
                  " run, not ", train_job_name(job));
  c.stop_after_steps = 0;  // a stop request belongs to the invocation that made it
  std::string conflicts;
  for (const TrainOption& o : kOptions) {
    if (!(o.jobs & bit) || !was_given(o)) continue;
    const std::string saved = value_text(c, o.field), now = value_text(parsed, o.field);
    if (o.fixed && saved != now) {
      conflicts += str_cat("\n  ", o.option, ": checkpoint ", saved, ", command line ", now);
    } else {
      std::visit([&](auto member) { c.*member = parsed.*member; }, o.field);
    }
  }
  HLM_CHECK_INPUT(conflicts.empty(), "--resume ", dir.string(),
                  ": these settings decide the training trajectory and must match the checkpoint (leave them out to "
                  "keep the checkpoint's values):",
                  conflicts);
  c.resume = dir.string();
  return c;
}

namespace {

int train_command_report(const TrainConfig& config, TrainDevice* device, Communicator& comm) {
  std::printf("%s", train_config_describe(config).c_str());
  std::fflush(stdout);
  const TrainResult r = train_run(config, {}, device, &comm);
  switch (r.status) {
    case TrainStatus::Diverged:
      std::fprintf(stderr, "hybridlm: error: %s\n", r.message.c_str());
      return 1;
    case TrainStatus::EvaluationFailed:
      std::fprintf(stderr, "hybridlm: error: %s\n", r.message.c_str());
      return 1;
    case TrainStatus::Stopped:
      std::printf("stopped      %s\n", r.message.c_str());
      return 0;
    case TrainStatus::DataExhausted:
      std::fprintf(stderr, "hybridlm: warning: %s\n", r.message.c_str());
      [[fallthrough]];
    case TrainStatus::Completed:
      if (r.test) std::printf("test\n%s", eval_result_table(*r.test).c_str());
      std::printf("wrote        %s/{config.json, metrics.jsonl, model/, test.json, %s}\n", config.out.c_str(),
                  r.last_checkpoint.empty() ? "no checkpoint" : r.last_checkpoint.filename().c_str());
      return 0;
  }
  return 1;
}

}  // namespace

int train_command_run(const TrainConfig& given, TrainDevice* device) {
  // MPI starts here when a launcher started this process (dist/communicator.h); one process needs none.
  const std::unique_ptr<Communicator> comm = make_host_communicator();
  TrainConfig config = given;
  config.world_size = comm->size();
  if (comm->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) std::fclose(stdout);  // rank 0 reports
  if (comm->size() == 1) return train_command_report(config, device, *comm);
  // A failure on one rank ends every rank (the others would wait in a collective): abort with the message.
  try {
    return train_command_report(config, device, *comm);
  } catch (const Error& e) {
    comm->abort(str_cat("error: ", e.what()), e.exit_code());
  } catch (const std::exception& e) {
    comm->abort(str_cat("internal error: ", e.what()), 1);
  }
  return 1;  // not reached: abort() ends the process
}

std::string train_command_footer() {
  return "Writes into --out: config.json (resolved settings), metrics.jsonl (one JSON object per step and per\n"
         "validation, per-language values), checkpoint-<step>/ (newest only: model + optimizer + trainer state +\n"
         "data cursor, written atomically), model/ (final weights) and test.json (final test evaluation).\n"
         "Everything checkable is checked before the first step (settings, corpus, tokenizer, teacher, validation and\n"
         "test rows of every language, --out writable and unlocked with room for two checkpoints and the model);\n"
         "after the last step the final checkpoint and model/ are written before the final evaluation.\n"
         "Resume: --resume CKPT|RUN --out DIR continues bit-identically. Settings that decide the trajectory\n"
         "(model, data, budget, batch, optimiser, seeds) come from the checkpoint and may be repeated only with the\n"
         "same value; --out, --eval-every, --checkpoint-every, --log-every, --stop-after-steps, --max-bad-steps may\n"
         "change. See docs/training.md.\n";
}

}  // namespace hlm
