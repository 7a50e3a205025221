// Plans and checks made before a run's first step (trainer.h): the disk plan, the device memory floor, and the data
// checks that need no model (for callers planning several runs, e.g. the study).
#include <filesystem>
#include <memory>

#include "data/corpus.h"
#include "data/data_stream.h"
#include "data/tokenizer.h"
#include "train/trainer.h"

namespace hlm {

TrainDiskPlan train_disk_plan(int64_t parameters, bool periodic_checkpoints) {
  const auto p = static_cast<uint64_t>(parameters);
  TrainDiskPlan plan;
  plan.model_bytes = 4 * p;                           // fp32 weights (Model::save)
  plan.checkpoint_bytes = plan.model_bytes + 8 * p;   // + AdamW m and v, fp32
  plan.peak_bytes = (periodic_checkpoints ? 2 : 1) * plan.checkpoint_bytes + plan.model_bytes;
  plan.peak_bytes += plan.peak_bytes / 100 + (uint64_t{16} << 20);  // headers, JSON, metrics: 1% + 16 MiB
  return plan;
}

uint64_t train_device_memory_floor(int64_t student_parameters, int64_t teacher_parameters, int64_t layers,
                                   int64_t hidden, int64_t micro_batch_tokens) {
  const auto s = static_cast<uint64_t>(student_parameters), t = static_cast<uint64_t>(teacher_parameters);
  const uint64_t layer_inputs = 4 * static_cast<uint64_t>(layers + 1) * static_cast<uint64_t>(hidden) *
                                static_cast<uint64_t>(micro_batch_tokens);
  return 16 * s + 4 * t + layer_inputs;  // weights + gradients + m + v (fp32), teacher fp32, kept layer inputs
}

void train_check_data(const TrainConfig& config) {
  train_config_validate(config);
  HLM_CHECK_INPUT(std::filesystem::is_directory(config.data), config.data,
                  ": not a corpus directory (does not exist)");
  const Corpus corpus = Corpus::open(config.data);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(config.tokenizer);
  DataConfig data;
  data.seq_len = config.seq_len;
  data.held_out_docs = config.held_out_docs;
  data.anchor_share = config.anchor_share;
  data.token_budget = config.tokens;
  data.data_seed = config.data_seed;
  data.eval_tokens_per_language = config.eval_tokens;
  data.packing = data_packing_from_name(config.packing, "--packing");
  data.passes = config.passes;
  held_out_check(held_out_set(corpus, *tokenizer, data, Split::Valid), Split::Valid, data);
  held_out_check(held_out_set(corpus, *tokenizer, data, Split::Test), Split::Test, data);
}

}  // namespace hlm
