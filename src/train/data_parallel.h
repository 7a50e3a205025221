// Data parallelism for the CPU trainer (trainer.h) over a Communicator (dist/communicator.h); docs/distributed.md.
//
// Every rank draws the same global batch of B rows from the (deterministic) data stream and trains on rows
// [rank·B/W, (rank+1)·B/W) of it (B % (W·b) == 0), so the shares are disjoint, every rank's stream cursor is the same
// and a checkpoint's cursor resumes all of them. Loss weights stay those of the GLOBAL batch (the caller passes the
// global target count), so the per-rank gradients add up to the one-process gradient.
//
// Parameters are laid end to end in the optimizer's order as one flat index space [0, P), cut into buckets of at most
// `bucket_elements` (HYBRIDLM_BUCKET_ELEMENTS, default 4 Mi = 16 MiB of fp32); collectives run bucket by bucket, so
// the staging memory is one bucket, and each bucket is split into W chunks (communicator.h's chunk_begin): rank r
// owns chunk r of every bucket.
//   zero_stage 0  all_reduce_sum of each bucket into the gradients; clipping and AdamW as in one process (every rank
//                 holds the whole AdamW state and updates every weight identically).
//   zero_stage 1  ZeRO-1: reduce_scatter_sum of each bucket into this rank's gradient shard (P/W floats); the global
//                 norm is the rank-order sum of the shards' squared norms; clipping scales the shard; an AdamW that
//                 holds ONLY the shard's moments updates the shard's weights; all_gather of each bucket's updated
//                 chunks gives every rank the whole model. On the CPU the working weights are fp32, so they are the
//                 master weights themselves: what is sharded is AdamW's m and v (8 bytes/param -> 8/W).
// Checkpoints keep the one-process format (full moments): optimizer_for_checkpoint gathers them (zero 1) into a
// temporary full AdamW on rank 0; restore_optimizer reads the full state and keeps this rank's shard.
// Sums follow the communicator's rank order, so a run is bit-reproducible for a given W; against one process the
// gradients differ by fp32 rounding of the regrouped sums (docs/distributed.md states the tested tolerance).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "train/adamw.h"
#include "train/trainer_batch.h"

namespace hlm {

inline constexpr const char* kBucketElementsEnv = "HYBRIDLM_BUCKET_ELEMENTS";
// HYBRIDLM_BUCKET_ELEMENTS, else `fallback` (the CPU's 4 Mi; the GPU trainer passes kGpuBucketElements); input error
// when not a positive integer.
size_t bucket_elements_from_env(size_t fallback = size_t{4} << 20);
// The GPU trainer's default bucket: 32 Mi elements (128 MiB). Each bucket costs a host wait and a collective's launch
// latency (tens of µs); larger buckets keep that below 1 % of a step at the sizes of docs/distributed.md.
inline constexpr size_t kGpuBucketElements = size_t{32} << 20;

// Sums the loss, per-language sums and counts, and counted tokens over ranks (rank order), in place on every rank.
void reduce_batch_loss(Communicator& comm, BatchLoss& loss);
// Rank r's rows [first, second) of a global batch of `rows` rows (rows % W == 0).
std::pair<int64_t, int64_t> rank_rows(const Communicator& comm, int64_t rows);

class DataParallel {
 public:
  // `full`: the trainer's optimizer (parameters, groups, config). With zero_stage 1 it should hold no moments (built
  // with with_state false, as the trainer does); this rank's shard optimizer holds them.
  DataParallel(Communicator& comm, const AdamW& full, int zero_stage, size_t bucket_elements);

  int zero_stage() const { return zero_stage_; }
  // This rank's rows [first, second) of a global batch of `rows` rows.
  std::pair<int64_t, int64_t> rows(int64_t rows) const { return rank_rows(comm_, rows); }
  // Sums the loss record over ranks (reduce_batch_loss).
  void reduce_loss(BatchLoss& loss) const { reduce_batch_loss(comm_, loss); }
  // Sums the gradients over ranks and clips them to `clip` by the global norm; returns the norm before clipping
  // (NaN / inf: nothing was scaled and the caller must skip the update).
  double reduce_and_clip(double clip);
  // One AdamW update with `full`'s group learning rates (zero 0: full.step(); zero 1: the shard, then all_gather).
  void step(AdamW& full);
  // Every rank calls it. zero 0: returns &full. zero 1: gathers the moments; rank 0 gets a full AdamW (valid until the
  // next call), other ranks nullptr.
  const AdamW* optimizer_for_checkpoint(const AdamW& full);
  // Loads a checkpoint's optimizer.safetensors (zero 0: into full; zero 1: this rank's shard of it).
  void restore_optimizer(const std::filesystem::path& checkpoint, AdamW& full);
  size_t shard_elements() const { return shard_grad_.size(); }

 private:
  struct Bucket {
    size_t begin = 0, end = 0;  // flat range
    size_t shard_offset = 0;    // where this rank's chunk of it starts in shard_grad_
  };
  struct Piece {                // a parameter's part of this rank's chunk of one bucket
    size_t param = 0;           // index into full.params()
    size_t begin = 0, end = 0;  // flat range
  };
  // Copies flat range [begin, end) of the parameters (weights when `weights`, else gradients) to or from `buf`.
  void copy_flat(size_t begin, size_t end, float* buf, bool to_buf, bool weights) const;
  size_t chunk_first(const Bucket& b) const {  // flat start of this rank's chunk of bucket b
    return b.begin + chunk_begin(b.end - b.begin, comm_.size(), comm_.rank());
  }

  Communicator& comm_;
  int zero_stage_ = 1;
  std::vector<size_t> offsets_;  // flat start of each parameter; offsets_.back() = P
  std::vector<Tensor> weights_, grads_;
  std::vector<Bucket> buckets_;
  std::vector<float> staging_;   // one bucket
  std::vector<float> shard_grad_;
  std::vector<Piece> pieces_;
  std::unique_ptr<AdamW> shard_;     // zero 1
  std::unique_ptr<AdamW> gathered_;  // zero 1, rank 0, during a checkpoint
};

}  // namespace hlm
