#include "infer/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace hlm {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Eos: return "eos";
    case FinishReason::Length: return "length";
    case FinishReason::Stop: return "stop";
    case FinishReason::MaxPositions: return "max_positions";
    case FinishReason::Refused: return "refused";
  }
  return "?";
}

int64_t generate_max_tokens(const ModelConfig& c, const GenerateRequest& r) {
  const auto prompt = static_cast<int64_t>(r.prompt.size());
  int64_t fed = prompt + std::max<int64_t>(r.max_new_tokens - 1, 0);
  if (c.max_position_embeddings > 0) fed = std::min(fed, c.max_position_embeddings);
  return std::max(fed, prompt);
}

std::string generate_refusal(const InferenceEngine& engine, const GenerateRequest& r) {
  const ModelConfig& c = engine.config();
  if (r.prompt.empty()) return "the prompt is empty (at least one token is needed to predict the next)";
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= c.vocab_size)
      return str_cat("token id ", r.prompt[i], " at prompt position ", i, " is outside the vocabulary [0, ",
                     c.vocab_size, ")");
  if (r.max_new_tokens < 0) return str_cat("max_new_tokens is negative (", r.max_new_tokens, ")");
  const auto prompt = static_cast<int64_t>(r.prompt.size());
  if (c.max_position_embeddings > 0 && prompt > c.max_position_embeddings)
    return str_cat("the prompt has ", prompt, " tokens, more than the model's max_position_embeddings ",
                   c.max_position_embeddings);
  const MemoryPlan& p = engine.plan();
  const int64_t tokens = generate_max_tokens(c, r);
  if (p.kv_bytes_per_block > 0 && p.blocks_for(tokens) > p.num_blocks)
    return str_cat("the context of ", tokens, " tokens needs ", p.blocks_for(tokens), " KV blocks (",
                   p.sequence_bytes(tokens), " bytes of state) but the memory plan holds ", p.num_blocks,
                   " blocks (", p.total_bytes(), " bytes)");
  return {};
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Running {
  size_t request;
  int slot;
  int32_t last;           // the token to feed next
  int64_t allowed_new;    // max_new_tokens cut by max positions
};

}  // namespace

std::vector<GenerateResult> generate(InferenceEngine& engine, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options, GenerateStats* stats_out) {
  const ModelConfig& c = engine.config();
  for (const GenerateRequest& r : requests) sampling_check(r.sampling);
  std::vector<GenerateResult> results(requests.size());
  std::vector<size_t> queue;
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i].error = generate_refusal(engine, requests[i]);
    if (!results[i].error.empty()) results[i].finish = FinishReason::Refused;
    else if (requests[i].max_new_tokens > 0) queue.push_back(i);
  }
  HLM_CHECK_INPUT(options.prefill_chunk > 0, "the prefill chunk must be positive");
  GenerateStats stats;
  const auto note_usage = [&] {
    StateUsage u = engine.state_usage();
    if (u.bytes_in_use() >= stats.peak_state_bytes) {  // ties: the later, fuller state
      stats.peak_state_bytes = u.bytes_in_use();
      stats.peak_usage = std::move(u);
    }
  };

  std::vector<Running> running;
  // Records a sampled token; true when the request is finished.
  const auto accept = [&](const Running& run, int32_t token) {
    GenerateResult& res = results[run.request];
    res.ids.push_back(token);
    const bool eos = std::find(options.eos_ids.begin(), options.eos_ids.end(), token) != options.eos_ids.end();
    const bool go_on = !options.on_token || options.on_token(run.request, token);
    const auto made = static_cast<int64_t>(res.ids.size());
    if (eos) res.finish = FinishReason::Eos;
    else if (!go_on) res.finish = FinishReason::Stop;
    else if (made >= run.allowed_new)
      res.finish = run.allowed_new < requests[run.request].max_new_tokens ? FinishReason::MaxPositions
                                                                          : FinishReason::Length;
    else return false;
    return true;
  };

  size_t next = 0;
  while (true) {
    // Admit waiting requests while the plan has room for their worst case (FIFO).
    std::vector<Running> admitted;
    while (next < queue.size()) {
      const size_t r = queue[next];
      const GenerateRequest& req = requests[r];
      const int64_t max_tokens = generate_max_tokens(c, req);
      const int slot = engine.open_sequence(max_tokens);
      if (slot < 0) break;
      ++next;
      const auto prompt = static_cast<int64_t>(req.prompt.size());
      admitted.push_back({r, slot, 0, std::min(req.max_new_tokens, max_tokens - prompt + 1)});
    }
    // Prefill the admitted prompts together: each step takes up to prefill_chunk prompt tokens, filling the
    // sequences in order; a sequence whose prompt is complete samples its first token from that step's logits.
    std::vector<int64_t> fed(admitted.size(), 0);
    for (size_t first = 0; first < admitted.size();) {
      TokenBatch batch;
      std::vector<int> slots;
      std::vector<size_t> members;
      int64_t budget = options.prefill_chunk;
      for (size_t i = first; i < admitted.size() && budget > 0; ++i) {
        const std::vector<int32_t>& prompt = requests[admitted[i].request].prompt;
        const int64_t n = std::min(budget, static_cast<int64_t>(prompt.size()) - fed[i]);
        batch.add_sequence(std::vector<int32_t>(prompt.begin() + fed[i], prompt.begin() + fed[i] + n));
        slots.push_back(admitted[i].slot);
        members.push_back(i);
        fed[i] += n;
        budget -= n;
      }
      const Clock::time_point t0 = Clock::now();
      const Tensor logits = engine.step(slots, batch);
      stats.prefill_seconds += seconds_since(t0);
      stats.prefill_tokens += batch.total_tokens();
      note_usage();
      for (size_t k = 0; k < members.size(); ++k) {
        Running run = admitted[members[k]];
        const GenerateRequest& req = requests[run.request];
        if (fed[members[k]] < static_cast<int64_t>(req.prompt.size())) continue;  // more prompt to come
        first = members[k] + 1;
        const float* row = logits.f32() + static_cast<int64_t>(k) * c.vocab_size;
        run.last = sample_token({row, static_cast<size_t>(c.vocab_size)}, req.sampling, run.request, 0);
        if (accept(run, run.last)) engine.close_sequence(run.slot);
        else running.push_back(run);
      }
    }
    if (running.empty()) {
      if (next == queue.size()) break;
      HLM_CHECK(!admitted.empty(), "a request that fits the plan alone could not start on an empty engine");
      continue;  // every admitted request finished at its first token: admit more
    }
    // One decode step over every running sequence.
    TokenBatch batch;
    std::vector<int> slots;
    for (const Running& run : running) {
      batch.add_sequence({run.last});
      slots.push_back(run.slot);
    }
    const Clock::time_point t0 = Clock::now();
    const Tensor logits = engine.step(slots, batch);
    stats.decode_seconds += seconds_since(t0);
    stats.decode_tokens += static_cast<int64_t>(running.size());
    ++stats.decode_steps;
    note_usage();
    std::vector<Running> still;
    for (size_t i = 0; i < running.size(); ++i) {
      Running run = running[i];
      const GenerateRequest& req = requests[run.request];
      const auto index = static_cast<uint64_t>(results[run.request].ids.size());
      const float* row = logits.f32() + static_cast<int64_t>(i) * c.vocab_size;
      run.last = sample_token({row, static_cast<size_t>(c.vocab_size)}, req.sampling, run.request, index);
      if (accept(run, run.last)) engine.close_sequence(run.slot);
      else still.push_back(run);
    }
    running = std::move(still);
  }
  if (stats_out) *stats_out = std::move(stats);
  return results;
}

}  // namespace hlm
