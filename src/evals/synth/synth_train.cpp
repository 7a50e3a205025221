// Training and evaluation of one synthetic-study pair on the CPU (contracts in synth_train.h).
#include "evals/synth/synth_train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>

#include "core/rng.h"
#include "models/model_train.h"
#include "train/adamw.h"
#include "train/grad_utils.h"
#include "train/lm_head_loss.h"
#include "train/lr_schedule.h"

namespace hlm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The (n, m) of an item of difficulty d.
std::pair<int64_t, int64_t> item_size(const SynthConfig& c, SynthTask task, int64_t d) {
  switch (task) {
    case SynthTask::StateTracking: return {d, 0};
    case SynthTask::Recall: return {0, d};
    case SynthTask::StateBasedRecall: return {d, synth_state_based_recall_m(c, d)};
  }
  return {0, 0};
}

// Training item number i of step s: its difficulty from its own counter, uniform in [train_min, the curriculum's
// maximum at s], then the item from (task, n, m, Train, i).
SynthItem training_item(const SynthConfig& c, SynthTask task, const SynthVocab& vocab, int64_t s, uint64_t i) {
  const uint64_t span = static_cast<uint64_t>(synth_train_difficulty_max(c, s) - c.train_min + 1);
  const uint64_t stream = rng_stream_id("synth/train_difficulty") + static_cast<uint64_t>(task);
  const uint32_t w = philox4x32(c.seed, stream, i)[0];
  const int64_t d = c.train_min + static_cast<int64_t>((static_cast<uint64_t>(w) * span) >> 32);
  const auto [n, m] = item_size(c, task, d);
  return synth_generate(task, n, m, {c.seed, SynthSplit::Train, i}, vocab, c.gen_options());
}

struct PackedItems {
  TokenBatch batch;
  std::vector<int64_t> last;      // row of each item's last input token
  std::vector<int32_t> targets;   // answer tokens
  std::vector<bool> moved;
};

PackedItems pack(const std::vector<SynthItem>& items) {
  PackedItems p;
  for (const SynthItem& item : items) {
    p.batch.add_sequence(item.tokens);
    p.last.push_back(p.batch.total_tokens() - 1);
    p.targets.push_back(item.answer_token);
    p.moved.push_back(item.moved);
  }
  return p;
}

// The step's items as a TrainDevice batch: one row (micro-batch = the whole batch, so sequences need not share a
// length), CE targets only at each item's last input position.
PackedBatch answer_batch(const PackedItems& packed) {
  PackedBatch out;
  out.batch = packed.batch;
  out.rows = 1;
  out.targets.assign(static_cast<size_t>(packed.batch.total_tokens()), -100);
  out.language.assign(static_cast<size_t>(packed.batch.total_tokens()), 0);
  for (size_t b = 0; b < packed.last.size(); ++b) out.targets[static_cast<size_t>(packed.last[b])] = packed.targets[b];
  return out;
}

}  // namespace

void synth_pad_batch(PackedBatch& batch, int64_t bucket) {
  if (bucket <= 0) return;
  int64_t missing = (bucket - batch.batch.total_tokens() % bucket) % bucket;
  while (missing > 0) {
    const int64_t piece = std::min<int64_t>(missing, 64);
    batch.batch.add_sequence(std::vector<int32_t>(static_cast<size_t>(piece), SynthVocab::kPad));
    batch.targets.insert(batch.targets.end(), static_cast<size_t>(piece), -100);
    batch.language.insert(batch.language.end(), static_cast<size_t>(piece), 0);
    missing -= piece;
  }
}

namespace {

// One training step's input: the items packed, and (device runs) the device batch.
struct StepInput {
  PackedItems packed;
  PackedBatch device_batch;
};

// Rows `rows` of src [T, H] gathered into [rows.size(), H].
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& rows) {
  const int64_t H = src.dim(1);
  Tensor out = Tensor::zeros({static_cast<int64_t>(rows.size()), H});
  for (size_t r = 0; r < rows.size(); ++r)
    std::memcpy(out.f32() + static_cast<int64_t>(r) * H, src.f32() + rows[r] * H, static_cast<size_t>(H) * sizeof(float));
  return out;
}

int64_t argmax_row(const float* row, int64_t V) {
  return static_cast<int64_t>(std::max_element(row, row + V) - row);
}

// Whether the argmax of h · Wᵀ is the target, for each row of h [B, H] (the LM head W [V, H]).
std::vector<bool> head_correct(const Tensor& h, const Model& model, const std::vector<int32_t>& targets) {
  const int64_t B = h.dim(0), H = h.dim(1), V = model.config().vocab_size;
  const float* W = model.weights().lm_head.weight.f32();
  std::vector<bool> ok(static_cast<size_t>(B));
  std::vector<float> logits(static_cast<size_t>(V));
  for (int64_t b = 0; b < B; ++b) {
    const float* x = h.f32() + b * H;
    for (int64_t v = 0; v < V; ++v) {
      float s = 0.0f;
      for (int64_t k = 0; k < H; ++k) s += x[k] * W[v * H + k];
      logits[static_cast<size_t>(v)] = s;
    }
    ok[static_cast<size_t>(b)] = argmax_row(logits.data(), V) == targets[static_cast<size_t>(b)];
  }
  return ok;
}

std::string format_eta(double seconds) {
  char buf[32];
  const auto s = static_cast<long long>(std::max(0.0, seconds));
  std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  return buf;
}

}  // namespace

SynthPairResult synth_train_and_eval(const SynthConfig& c, SynthTask task, SynthArch arch, const SynthLog& log,
                                     const SynthDevice& device) {
  const SynthVocab vocab{c.max_address};
  const ModelConfig mc = synth_model_config(c, arch, task);
  Model model = Model::create(mc, c.seed);
  DecoderWeights grads = zero_grads_like(mc);

  std::vector<AdamWGroup> groups{{"decay", c.lr, c.weight_decay, 0.0}, {"no_decay", c.lr, 0.0, 0.0}};
  std::vector<AdamWParam> params;
  SynthPairResult result;
  result.task = synth_task_name(task);
  result.arch = synth_arch_spec(arch).name;
  for (const NamedParameter& p : named_parameters(mc, model.mutable_weights(), grads)) {
    params.push_back({p.name, p.value, p.grad, default_weight_decay(p.name) ? 0 : 1});
    result.parameters += p.value.numel();
  }
  AdamW optimizer(std::move(groups), std::move(params));
  const std::vector<Tensor> grad_list = optimizer.grads();
  LrSchedule schedule;
  schedule.total_steps = c.steps;
  schedule.warmup_steps = lr_schedule_warmup_steps(c.steps, c.warmup_fraction);
  schedule.min_lr = c.min_lr;

  std::unique_ptr<TrainDevice> trainer = device.make_trainer ? device.make_trainer() : nullptr;
  if (trainer) trainer->attach(model, nullptr, optimizer);
  const int64_t H = mc.hidden_size;
  const LmHead<float> head{model.weights().lm_head.weight.f32(), mc.vocab_size, H, mc.logits_scaling};
  const auto t_train = Clock::now();
  double window_loss = 0.0, window_correct = 0.0;
  int64_t window_steps = 0, window_items = 0;
  // The next step's items are generated (and packed) on a worker thread while this step runs: they depend only on
  // the config and the step number, so the results are those of the serial loop.
  const auto make_input = [&](int64_t step) {
    StepInput in;
    std::vector<SynthItem> items;
    items.reserve(static_cast<size_t>(c.batch_size));
    for (int64_t b = 0; b < c.batch_size; ++b)
      items.push_back(training_item(c, task, vocab, step, static_cast<uint64_t>((step - 1) * c.batch_size + b)));
    in.packed = pack(items);
    if (trainer) {
      in.device_batch = answer_batch(in.packed);
      synth_pad_batch(in.device_batch, device.bucket_tokens);
    }
    return in;
  };
  // HLM_SYNTH_HOST_TIMES=1: print the host's time per step waiting for the batch and inside the device step;
  // HLM_SYNTH_PREFETCH=0: generate each step's items when it starts (diagnostics for docs/benchmarks.md).
  const bool host_times = std::getenv("HLM_SYNTH_HOST_TIMES") != nullptr;
  const char* prefetch_env = std::getenv("HLM_SYNTH_PREFETCH");
  const std::launch policy =
      prefetch_env != nullptr && std::strcmp(prefetch_env, "0") == 0 ? std::launch::deferred : std::launch::async;
  double wait_seconds = 0.0, step_seconds = 0.0;
  std::future<StepInput> next;
  if (c.steps >= 1) next = std::async(policy, make_input, int64_t{1});
  for (int64_t s = 1; s <= c.steps; ++s) {
    const auto t_wait = Clock::now();
    const StepInput input = next.get();
    wait_seconds += seconds_since(t_wait);
    if (s < c.steps) next = std::async(policy, make_input, s + 1);
    const PackedItems& packed = input.packed;
    const int64_t T = packed.batch.total_tokens(), B = c.batch_size;

    // One step: {answer CE, answers right (NaN on a device: it reports the loss only), gradient norm}.
    double loss = 0.0, correct = std::numeric_limits<double>::quiet_NaN(), norm = 0.0;
    lr_schedule_apply(optimizer, schedule, s);
    if (trainer) {
      const auto t_step = Clock::now();
      loss = trainer->step(input.device_batch, 1, 1.0, c.clip, &norm, 1).loss;
      step_seconds += seconds_since(t_step);
    } else {
      grad_zero(grad_list);
      const ForwardTrace trace = model_forward_train(model, packed.batch);
      const Tensor h = gather_rows(trace.final_hidden, packed.last);
      Tensor dh = Tensor::zeros({B, H});
      const LmHeadGrad<float> g{dh.f32(), grads.lm_head.weight.f32()};
      std::vector<float> ce(static_cast<size_t>(B));
      loss = lm_head_cross_entropy<float>(ce.data(), h.f32(), B, head, packed.targets.data(), nullptr, &g).loss;
      const std::vector<bool> ok = head_correct(h, model, packed.targets);
      correct = static_cast<double>(std::count(ok.begin(), ok.end(), true));
      Tensor d_final = Tensor::zeros({T, H});
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(d_final.f32() + packed.last[static_cast<size_t>(b)] * H, dh.f32() + b * H,
                    static_cast<size_t>(H) * sizeof(float));
      model_backward(model, packed.batch, trace, d_final, grads);
      norm = clip_grad_norm(grad_list, c.clip);
      if (std::isfinite(loss) && std::isfinite(norm)) optimizer.step();
    }

    result.train_tokens += T;
    window_loss += loss;
    window_correct += correct;
    ++window_steps;
    window_items += B;
    if (s % c.log_every == 0 || s == c.steps) {
      const double elapsed = seconds_since(t_train);
      const double tps = static_cast<double>(result.train_tokens) / std::max(elapsed, 1e-9);
      const double eta = elapsed / static_cast<double>(s) * static_cast<double>(c.steps - s);
      result.final_loss = window_loss / static_cast<double>(window_steps);
      char line[256];
      std::snprintf(line, sizeof line,
                    "  %s/%s step %lld/%lld loss %.4f acc %.3f lr %.2e |g| %.3f  %.0f tok/s  ETA %s",
                    result.task.c_str(), result.arch.c_str(), static_cast<long long>(s),
                    static_cast<long long>(c.steps), result.final_loss,
                    window_correct / static_cast<double>(window_items), optimizer.groups()[0].lr, norm, tps,
                    format_eta(eta).c_str());
      log(line);
      window_loss = window_correct = 0.0;
      window_steps = window_items = 0;
    }
  }
  if (trainer) trainer->sync_to_host();
  if (host_times && c.steps > 0) {
    char line[200];
    std::snprintf(line, sizeof line, "  %s/%s host: %.3f ms/step waiting for the next batch, %.3f ms/step in the "
                  "device step (of %.3f ms/step)", result.task.c_str(), result.arch.c_str(),
                  1e3 * wait_seconds / static_cast<double>(c.steps), 1e3 * step_seconds / static_cast<double>(c.steps),
                  1e3 * seconds_since(t_train) / static_cast<double>(c.steps));
    log(line);
  }
  result.steps = c.steps;
  result.train_seconds = seconds_since(t_train);
  result.tokens_per_second = static_cast<double>(result.train_tokens) / std::max(result.train_seconds, 1e-9);

  const auto t_eval = Clock::now();
  const std::function<Tensor(const TokenBatch&)> forward =
      device.make_forward ? device.make_forward(model)
                          : std::function<Tensor(const TokenBatch&)>([&model](const TokenBatch& b) { return model.forward(b); });
  for (int64_t d : c.eval_difficulties) {
    const auto [n, m] = item_size(c, task, d);
    SynthDifficultyResult r;
    r.difficulty = d;
    r.m = m;
    r.in_training_range = c.train_min <= d && d <= c.train_max;
    int64_t correct = 0, moved_correct = 0;
    for (int64_t begin = 0; begin < c.eval_items; begin += c.eval_batch) {
      const int64_t end = std::min(c.eval_items, begin + c.eval_batch);
      std::vector<SynthItem> items;
      for (int64_t i = begin; i < end; ++i)
        items.push_back(
            synth_generate(task, n, m, {c.seed, SynthSplit::Eval, static_cast<uint64_t>(i)}, vocab, c.gen_options()));
      const PackedItems packed = pack(items);
      const Tensor logits = forward(packed.batch);  // [items, V]: last position of each sequence
      for (size_t b = 0; b < items.size(); ++b) {
        const bool ok = argmax_row(logits.f32() + static_cast<int64_t>(b) * mc.vocab_size, mc.vocab_size) ==
                        packed.targets[b];
        correct += ok;
        if (packed.moved[b]) {
          ++r.moved_items;
          moved_correct += ok;
        }
      }
    }
    r.items = c.eval_items;
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.items);
    r.moved_accuracy = r.moved_items > 0 ? static_cast<double>(moved_correct) / static_cast<double>(r.moved_items)
                                         : std::numeric_limits<double>::quiet_NaN();
    char line[200];
    std::snprintf(line, sizeof line, "  %s/%s eval %s=%lld: accuracy %.4f%s", result.task.c_str(),
                  result.arch.c_str(), task == SynthTask::Recall ? "m" : "n", static_cast<long long>(d), r.accuracy,
                  r.in_training_range ? "" : " (beyond training range)");
    log(line);
    result.eval.push_back(r);
  }
  result.eval_seconds = seconds_since(t_eval);
  return result;
}

nlohmann::ordered_json synth_pair_result_to_json(const SynthPairResult& r) {
  nlohmann::ordered_json j;
  j["task"] = r.task;
  j["arch"] = r.arch;
  j["parameters"] = r.parameters;
  j["steps"] = r.steps;
  j["train_tokens"] = r.train_tokens;
  j["train_seconds"] = r.train_seconds;
  j["tokens_per_second"] = r.tokens_per_second;
  j["final_loss"] = r.final_loss;
  j["eval_seconds"] = r.eval_seconds;
  nlohmann::ordered_json eval = nlohmann::ordered_json::array();
  for (const SynthDifficultyResult& e : r.eval) {
    nlohmann::ordered_json x;
    x["difficulty"] = e.difficulty;
    x["m"] = e.m;
    x["items"] = e.items;
    x["accuracy"] = e.accuracy;
    x["moved_items"] = e.moved_items;
    x["moved_accuracy"] = std::isfinite(e.moved_accuracy) ? nlohmann::ordered_json(e.moved_accuracy) : nlohmann::ordered_json();
    x["in_training_range"] = e.in_training_range;
    eval.push_back(x);
  }
  j["eval"] = eval;
  return j;
}

SynthPairResult synth_pair_result_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    SynthPairResult r;
    r.task = j.at("task").get<std::string>();
    r.arch = j.at("arch").get<std::string>();
    r.parameters = j.at("parameters").get<int64_t>();
    r.steps = j.at("steps").get<int64_t>();
    r.train_tokens = j.at("train_tokens").get<int64_t>();
    r.train_seconds = j.at("train_seconds").get<double>();
    r.tokens_per_second = j.at("tokens_per_second").get<double>();
    r.final_loss = j.at("final_loss").get<double>();
    r.eval_seconds = j.at("eval_seconds").get<double>();
    for (const auto& x : j.at("eval")) {
      SynthDifficultyResult e;
      e.difficulty = x.at("difficulty").get<int64_t>();
      e.m = x.at("m").get<int64_t>();
      e.items = x.at("items").get<int64_t>();
      e.accuracy = x.at("accuracy").get<double>();
      e.moved_items = x.at("moved_items").get<int64_t>();
      e.moved_accuracy = x.at("moved_accuracy").is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                           : x.at("moved_accuracy").get<double>();
      e.in_training_range = x.at("in_training_range").get<bool>();
      r.eval.push_back(e);
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw_input_error(source, ": not a synth result marker: ", e.what());
  }
}

}  // namespace hlm
