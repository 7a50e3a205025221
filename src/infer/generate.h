// The generation loop over an InferenceEngine: requests (prompt ids, limits, sampling) are admitted while the memory
// plan has a free sequence slot and enough unpromised KV blocks for the request's worst case (prompt + new tokens);
// the admitted prompts are prefilled together, `prefill_chunk` prompt tokens per step (filling the sequences in order),
// then all running sequences decode together,
// one token each per step (batched over different lengths). A finished sequence frees its slot and blocks at once,
// so waiting requests start while others still decode (FIFO order). A request stops at an EOS id (the EOS token is
// kept in its ids, as HF generate does), after max_new_tokens, when `on_token` returns false (e.g. a stop string),
// or when its next token would need a position >= max_position_embeddings.
// Refusals (a request checked alone, before anything runs): empty prompt, an id outside the vocabulary, a prompt
// longer than max_position_embeddings, a request whose worst case exceeds the whole plan. A refused request gets an
// error message and no ids; the others run.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "infer/inference_engine.h"
#include "infer/sampling.h"

namespace hlm {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
};

enum class FinishReason { Eos, Length, Stop, MaxPositions, Refused };
const char* finish_reason_name(FinishReason reason);  // "eos", "length", "stop", "max_positions", "refused"

struct GenerateResult {
  std::vector<int32_t> ids;  // generated ids only
  FinishReason finish = FinishReason::Length;
  std::string error;  // why a request was refused
};

struct GenerateStats {
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0.0;
  int64_t decode_tokens = 0;  // tokens fed by decode steps
  int64_t decode_steps = 0;
  double decode_seconds = 0.0;
  int64_t peak_state_bytes = 0;  // engine state in use, maximum over steps
  StateUsage peak_usage;         // the per-layer usage at that peak
};

struct GenerateOptions {
  std::vector<int32_t> eos_ids;
  int64_t prefill_chunk = 512;  // prompt tokens per prefill step (over the admitted prompts, in order)
  // Called for every generated token (request index, id); returning false stops that request (FinishReason::Stop).
  std::function<bool(size_t request, int32_t token)> on_token;
};

// The reason request `r` cannot run on this engine at all (empty when it can).
std::string generate_refusal(const InferenceEngine& engine, const GenerateRequest& r);
// Tokens request `r` may put into the cache: prompt + fed-back generated tokens (the last one is never fed),
// capped so that no fed token sits at a position >= max_position_embeddings.
int64_t generate_max_tokens(const ModelConfig& config, const GenerateRequest& r);

std::vector<GenerateResult> generate(InferenceEngine& engine, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options, GenerateStats* stats = nullptr);

}  // namespace hlm
