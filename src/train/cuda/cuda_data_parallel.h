// CudaDataParallel: the GPU trainer's gradient sums and ZeRO-1 over DeviceCollectives (issue #25,
// docs/distributed.md); the device twin of train/data_parallel.h, with the same layout and the same numbers moved.
//
// The device optimizer's parameters (CudaAdamW::params(), in its order) are laid end to end as one flat index space
// [0, P), cut into buckets of at most `bucket_elements`; each bucket is split into W chunks (communicator.h's
// chunk_begin) and rank r owns chunk r of every bucket. Bucket by bucket, the gradients are packed into one device
// bucket buffer (device-to-device copies) and
//   zero_stage 0  all_reduce_sum'd and unpacked: every rank then holds the summed gradients and runs its own full
//                 CudaAdamW step (norm, clip, update), identically on every rank. With one rank nothing is moved.
//   zero_stage 1  reduce_scatter_sum'd into this rank's gradient shard [S = Σ chunk sizes ≈ P/W floats]. The global
//                 norm: ‖shard‖ on the device (grad_norm_cuda.h over the shard's pieces), then (W > 1) the
//                 rank-order sum of the ranks' squared norms over the host communicator, sqrt; the clip scale
//                 float(clip / norm) when norm > clip (grad_norm_cuda.h's formula); AdamW (adamw_multi_step_cuda, one
//                 launch) updates the shard's fp32 weights with the shard's own m and v [S floats each], writing the
//                 bf16 copies of those elements where the model has them; then all_gather of each bucket's chunks
//                 gives every rank the whole fp32 model (and with W > 1 the caller re-rounds the bf16 copies).
// What is sharded on the GPU: AdamW's m and v (8 bytes per parameter -> 8/W), and in the bf16 compute mode the fp32
// master weights of every parameter whose fp32 slot the caller freed before attach (the linears and an untied head,
// cuda_bf16_masters.h's cuda_hold_bf16_masters; HYBRIDLM_ZERO1_MASTERS=sharded, the default there): for those the
// device holds the bf16 copy whole (the forward and backward read only it) and the fp32 master only for this rank's
// pieces, in shard_master_ [the pieces' elements of such parameters ~ their count / W]. The update reads and writes
// the master there and writes the bf16 copy of the same elements (the kernel's rounding, refresh_bf16's bits); the
// all-gather then moves the bf16 copies of such buckets (2 bytes per element, packed two to an fp32 slot of the
// float collective: each rank's chunk of a bucket at the front of an equal slot of ceil(ceil(len/W)/2) floats) and
// fp32 values only for the parameters still held in fp32 (the embedding, norms, biases, the GDN's small tensors;
// every rank keeps those whole, updates its chunks and receives the others'). The bits are those of the whole-master
// path: the same update of the same fp32 values, and a bf16 copy is the rounding of the updated master either way
// (test: GpuDataParallel.ShardedMastersEqualWholeMasters, tolerance 0). Checkpoints gather the master shards
// (gather_masters) as they gather the moments. NOT sharded: the fp32 weights of the fp32 mode (the forward reads
// them) and of the tensors above, the gradients (accumulated over micro-batches), the bf16 copies.
// 8-bit moments (memory plan adam8; the device optimizer's state Q8), zero 1: every parameter starts at a multiple of
// the quantization block (kQ8Block = 256 elements) in the flat space (gaps after each parameter, never read) and a
// bucket is a multiple of W blocks (HYBRIDLM_BUCKET_ELEMENTS rounded up), so each rank's chunk of a bucket is whole
// blocks of each parameter (or its last, shorter block): the shard holds codes [S] bytes and block scales
// [S / 256] floats for m and for v, exactly the slice of the one-rank state (attach slices the host's; gather_state
// gathers codes and scales into the host's byte for byte). The update is one adamw_lowmem_step_cuda launch per
// piece (the one-rank step's blocks, values and bits), then the bf16 copies of the pieces that have one (the cast
// of refresh_bf16). Zero 0 with 8-bit moments: the gradients are all-reduced and CudaAdamW holds the whole state.
// bf16 master weights (memory plan lean, MasterFormat::Bf16Sr; train/cuda/cuda_bf16_masters.h), zero 1: the device
// optimizer's parameter of a linear (and an untied head) IS its bf16 copy, and its gradient is bf16; the embedding,
// norms and small tensors are fp32 storage holding bf16 values with fp32 gradients. Every rank keeps all of them
// whole (the forward and backward read them); what is sharded is the 8-bit moments (laid out as adam8's above) and
// the update. The bf16 gradients are widened exactly into the fp32 bucket, reduce-scattered (rank-order sum in
// fp32), and this rank's chunk is written back IN PLACE into its own gradient tensors (no gradient shard: those
// elements of the whole gradient are not read again this step): fp32 gradients as they are, bf16 ones rounded to
// nearest even once (exact with one rank; with W ranks within half a bf16 ulp of the fp32 sum of the ranks' bf16
// gradients). The update is one adamw_lowmem_step_cuda launch per piece, in place in the bf16 master (or the fp32
// storage holding bf16 values), with the stochastic-rounding stream of the one-rank step for the same elements: the
// draws are splitmix64(adamw_sr_base(seed, step, name) + element index), so a piece that starts at element `at` of
// its parameter takes base + at (test: GpuDataParallel.LeanIsShardedWithTheOneRankBits: one rank through the
// collectives with parameters cut across buckets equals the plain lean step bit for bit). The all-gather moves the
// bf16 masters (packed, as the bf16 copies of sharded masters) and the fp32 tensors. Checkpoints: the masters are
// whole on every rank (cuda_download_bf16_masters); the 8-bit state is gathered as adam8's. Zero 0 with bf16
// gradients on several ranks would round the all-reduced sums back into bf16 gradients: refused (the trainer checks).
// Numerics: sums in rank order (bit-reproducible for a given W). With one rank, zero 1 moves the gradients through
// the collectives and back unchanged; the update is the per-element arithmetic of CudaAdamW (the same kernel); the
// norm's fp64 partial sums are grouped by pieces rather than parameters, so the norm may differ from CudaAdamW's in
// its last bits (and the clip scale, when clipping, by one fp32 rounding).
// Overlap (HYBRIDLM_DP_OVERLAP=on|off, default on; docs/distributed.md): during the LAST micro-batch's backward,
// each bucket's sum is queued as soon as every parameter in it has its final gradient (CudaModel::backward's
// layer_done hook: set_ready_stages gives each parameter the stage after which it is final), as a DeviceCollectives
// job behind an event of the compute stream: the packing copies, the collective (the fixed-order sum kernel too) and,
// for zero 0, the unpacking run on the collectives' stream while the compute stream goes on with the earlier layers.
// Buckets go from the last to the first (the order in which the backward finishes them; the same on every rank).
// finish_gradient_sums waits for them before any other collective (the loss record, the norm, the AdamW step).
// The sums, buckets and chunks are those of the blocking path, so the results are the same bits either way (test:
// GpuDataParallel.OverlapOnAndOffAreBitIdentical). Not overlapped: the earlier micro-batches (their gradients are not
// final), a step replayed as a CUDA graph (the blocking path runs after it), the all-gather of the weights after
// the update (it needs the update), and zero 0 with one rank (nothing to sum). Host staging overlaps only where MPI
// granted MPI_THREAD_SERIALIZED (its helper thread calls MPI).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "models/cuda/cuda_adamw.h"
#include "train/adamw.h"
#include "train/cuda/device_collectives.h"
#include "train/trainer_batch.h"

namespace hlm {

class CudaDataParallel {
 public:
  // `host`: the host communicator (loss records, the norm's partial sums); `collectives` move device buffers over the
  // same ranks.
  CudaDataParallel(CudaContext& ctx, Communicator& host, std::unique_ptr<DeviceCollectives> collectives, int zero_stage,
                   size_t bucket_elements);
  ~CudaDataParallel();

  int zero_stage() const { return zero_stage_; }
  int rank() const { return host_.rank(); }
  int size() const { return host_.size(); }
  const char* backend() const { return coll_->backend(); }
  std::pair<int64_t, int64_t> rows(int64_t rows) const;
  void reduce_loss(BatchLoss& loss) const;

  // Lays out the parameters of `optimizer` (F32 params and grads; built with_state false for zero 1) and, for zero 1,
  // this rank's shard of the moments from the host optimizer (host_index[i]: the host parameter of device parameter
  // i) and its step count. copies: the bf16 copies the update writes (CudaModel::bf16_copies(); may be empty).
  // Zero 1: a parameter whose fp32 slot is empty (freed) and that has a bf16 copy gets its master shard from the
  // host optimizer's fp32 parameter (the values the device was built from); any other freed slot is an error.
  void attach(CudaAdamW& optimizer, const AdamW& host, const std::vector<size_t>& host_index,
              const std::vector<CudaModel::Bf16Copy>& copies);
  // bf16 master weights (lean): the update writes the bf16 masters and fp32 storage holding bf16 values with
  // stochastic rounding; the caller re-rounds only a tied head's copy (cuda_refresh_held_copies).
  bool bf16_masters() const { return sr_; }
  // Device bytes of the fp32 gradient shard (zero 1; 0 when the reduced chunks go back into the gradients: lean).
  size_t gradient_shard_bytes() const { return grads_in_place_ ? 0 : sizeof(float) * shard_elements_; }
  // Whether some fp32 masters live in this rank's shard only (see above); then the caller must not re-round the bf16
  // copies from fp32 slots that are gone (CudaModel::refresh_bf16), nor download them.
  bool masters_sharded() const { return master_elements_ > 0; }
  size_t master_shard_elements() const { return master_elements_; }
  // Overlap (see above). set_ready_stages: per device optimizer parameter (after attach), the value of layer_done
  // after which its gradient is final; -1: only when the backward has returned.
  bool overlap() const { return overlap_; }
  void set_ready_stages(const std::vector<int>& stage);
  // Before the last micro-batch's backward is queued: true when its bucket sums will be queued as it goes (then pass
  // overlap_reached as the backward's layer_done, and call overlap_reached(-1) once it returned).
  bool overlap_begin();
  void overlap_reached(int stage);
  // Every step, after the backward and before any other collective: waits for the queued sums (nothing otherwise).
  void finish_gradient_sums();
  // zero 0: sums the gradients over ranks in place (the caller then runs CudaAdamW::step).
  void all_reduce_gradients();
  // zero 1: reduce-scatter, global norm, and when `update` and the norm is finite: clip, the shard's AdamW update with
  // each parameter's current lr and weight decay, all-gather of the weights. Returns the norm before clipping.
  double sharded_step(double clip, bool update);
  // zero 1, every rank: the whole m and v gathered into `host` (and its step count).
  void gather_state(AdamW& host, const std::vector<size_t>& host_index);
  // zero 1 with masters_sharded(), every rank: the fp32 masters held as shards gathered into the host optimizer's
  // parameters (which alias the host model's weights); the other parameters are not touched.
  void gather_masters(AdamW& host, const std::vector<size_t>& host_index);
  int64_t step_count() const { return step_; }
  size_t shard_elements() const { return shard_elements_; }

 private:
  struct Bucket {
    size_t begin = 0, end = 0;  // flat range
    size_t shard_offset = 0;    // where this rank's chunk starts in the shard buffers
    bool has_f32 = false;       // holds elements of parameters with fp32 storage (gathered in fp32)
    bool has_bf16 = false;      // holds elements gathered in bf16: sharded masters' copies, or bf16 masters (lean)
    size_t piece_begin = 0, piece_end = 0;  // this rank's pieces of the bucket (zero 1): pieces_[begin, end)
  };
  static constexpr size_t kNoMaster = static_cast<size_t>(-1);
  struct Piece {                // a parameter's part of this rank's chunk of one bucket
    size_t param = 0;           // index into the device optimizer's params
    size_t begin = 0, end = 0;  // flat range
    size_t shard = 0;           // position in the shard buffers
    size_t master = kNoMaster;  // position in shard_master_ (parameters whose master is sharded), else kNoMaster
    float* grad32 = nullptr;    // the piece's summed gradient: in shard_grad_, or in place in the fp32 gradient
    uint16_t* grad16 = nullptr; // ... or in place in the bf16 gradient (lean's linears)
  };
  // Device copies between flat range [begin, end) of the weights (or gradients) and buf (queued on `stream`, or on
  // ctx's stream when null).
  // weights: parameters without fp32 storage (sharded masters) are skipped.
  void copy_flat(size_t begin, size_t end, float* buf, bool to_buf, bool weights, cudaStream_t stream = nullptr) const;
  // The same over the bf16 copies of the parameters whose master is sharded and the bf16 masters (buf: 2-byte
  // elements).
  void copy_flat_bf16(size_t begin, size_t end, void* buf, bool to_buf) const;
  // Gradients in place (lean): bucket b's reduced chunk (in stage_) into this rank's pieces of the gradients.
  void unpack_chunk(size_t b, cudaStream_t stream) const;
  // Floats per rank of the packed bf16 all-gather of a bucket of len elements: ceil(ceil(len / W) / 2).
  size_t bf16_slot_floats(size_t len) const;
  // Queues bucket b's sum as a DeviceCollectives job behind an event of ctx's stream.
  void submit_bucket(size_t b);
  size_t chunk_first(const Bucket& b) const;
  // Calls fn(i, lo, hi) for every parameter i with elements in the flat range [begin, end): its part [lo, hi).
  template <class Fn>
  void for_each_part(size_t begin, size_t end, const Fn& fn) const;
  void gather_q8_state(AdamW& host, const std::vector<size_t>& host_index);

  CudaContext& ctx_;
  Communicator& host_;
  std::unique_ptr<DeviceCollectives> coll_;
  int zero_stage_ = 1;
  size_t bucket_elements_ = 0;
  CudaAdamW* optimizer_ = nullptr;
  std::vector<float*> weights_, grads_;
  std::vector<void*> copies_;     // per parameter: its bf16 copy (__nv_bfloat16*) or nullptr
  std::vector<bool> sharded_master_;  // per parameter: no fp32 storage, master in shard_master_ (zero 1)
  std::vector<bool> bf16_master_;     // per parameter: the parameter is its bf16 copy (lean), in copies_
  std::vector<void*> grads16_;        // per parameter: its bf16 gradient (lean's linears), else nullptr (in grads_)
  bool sr_ = false;                   // bf16 masters with stochastic rounding (lean)
  uint64_t sr_seed_ = 0;              // the host AdamW's
  bool grads_in_place_ = false;       // zero 1 with bf16 gradients: reduced chunks go back into the gradients
  CudaTensor stage_;                  // then: one bucket's reduced chunk [largest chunk] floats
  std::vector<size_t> offsets_;  // flat start of each parameter; offsets_.back() = P (the flat space's size)
  std::vector<size_t> ends_;     // flat end of each parameter (= the next start, except 8-bit: gaps to block starts)
  bool q8_ = false;              // 8-bit moments (the optimizer's state format)
  std::vector<Bucket> buckets_;
  std::vector<Piece> pieces_;
  size_t shard_elements_ = 0;
  CudaTensor bucket_, shard_grad_, shard_m_, shard_v_;
  CudaTensor shard_qm_, shard_qv_, shard_am_, shard_av_;  // 8-bit: codes [S] bytes, block scales [S / kQ8Block]
  CudaTensor shard_master_;      // [master_elements_] fp32 masters of this rank's pieces of sharded-master parameters
  size_t master_elements_ = 0;
  CudaTensor norm_, scale_, norm_ws_, adamw_ws_;
  size_t norm_ws_bytes_ = 0, adamw_ws_bytes_ = 0;
  std::vector<unsigned char> adamw_staging_;
  double beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8;  // the host AdamW's
  int64_t step_ = 0;
  // Overlap state.
  bool overlap_ = true;
  std::vector<int> bucket_stage_;      // per bucket: the smallest ready stage of its parameters
  std::vector<cudaEvent_t> events_;    // per bucket: recorded on ctx's stream when it is queued
  std::vector<bool> queued_;           // per bucket, this step
  bool armed_ = false;                 // between overlap_begin and finish_gradient_sums
  bool summed_ = false;                // this step's sums were queued (the blocking loops are skipped)
};

// HYBRIDLM_DP_OVERLAP: on (default) | off; input error otherwise.
inline constexpr const char* kDpOverlapEnv = "HYBRIDLM_DP_OVERLAP";
bool dp_overlap_from_env();
// HYBRIDLM_ZERO1_MASTERS (sharded | whole): train/memory_plan.h's zero1_masters_sharded_from_env, which the
// start-up estimate reads too.

}  // namespace hlm
