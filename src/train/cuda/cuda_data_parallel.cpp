// CudaDataParallel: bucketed gradient sums and ZeRO-1 of the GPU trainer (contract in cuda_data_parallel.h).
#include "train/cuda/cuda_data_parallel.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_tensor.h"
#include "core/error.h"
#include "layers/cuda/cuda_linear.h"
#include "ops/adamw/adamw_cuda.h"
#include "ops/adamw/adamw_lowmem_cuda.h"
#include "ops/adamw/grad_norm_cuda.h"
#include "ops/cast/cast_cuda.h"
#include "train/data_parallel.h"

namespace hlm {

CudaDataParallel::CudaDataParallel(CudaContext& ctx, Communicator& host, std::unique_ptr<DeviceCollectives> collectives,
                                   int zero_stage, size_t bucket_elements)
    : ctx_(ctx), host_(host), coll_(std::move(collectives)), zero_stage_(zero_stage),
      bucket_elements_(bucket_elements) {
  overlap_ = dp_overlap_from_env() && coll_->can_queue();
  HLM_CHECK(zero_stage == 0 || zero_stage == 1, "zero stage ", zero_stage);
  HLM_CHECK(bucket_elements > 0, "bucket of 0 elements");
  HLM_CHECK(coll_->size() == host_.size() && coll_->rank() == host_.rank(), "CudaDataParallel: the collectives' rank ",
            coll_->rank(), " of ", coll_->size(), " differs from the host communicator's ", host_.rank(), " of ",
            host_.size());
}

bool dp_overlap_from_env() {
  const char* v = std::getenv(kDpOverlapEnv);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "on") == 0 || std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "off") == 0 || std::strcmp(v, "0") == 0) return false;
  throw_input_error("environment variable ", kDpOverlapEnv, "='", v, "' is not on or off");
}

CudaDataParallel::~CudaDataParallel() {
  if (armed_) {  // an exception left queued sums behind: let them end before the buffers go
    try {
      coll_->finish();
    } catch (...) {
    }
  }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

std::pair<int64_t, int64_t> CudaDataParallel::rows(int64_t rows) const { return rank_rows(host_, rows); }

void CudaDataParallel::reduce_loss(BatchLoss& loss) const { reduce_batch_loss(host_, loss); }

size_t CudaDataParallel::chunk_first(const Bucket& b) const {
  return b.begin + chunk_begin(b.end - b.begin, size(), host_.rank());
}

template <class Fn>
void CudaDataParallel::for_each_part(size_t begin, size_t end, const Fn& fn) const {
  const size_t np = ends_.size();
  auto i = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.begin() + static_cast<std::ptrdiff_t>(np),
                                                begin) - offsets_.begin());
  if (i > 0) --i;  // the last parameter starting at or before `begin`
  for (; i < np && offsets_[i] < end; ++i) {
    const size_t lo = std::max(begin, offsets_[i]), hi = std::min(end, ends_[i]);
    if (lo < hi) fn(i, lo, hi);
  }
}

void CudaDataParallel::attach(CudaAdamW& optimizer, const AdamW& host, const std::vector<size_t>& host_index,
                              const std::vector<CudaModel::Bf16Copy>& copies) {
  ctx_.make_current();
  optimizer_ = &optimizer;
  weights_.clear();
  grads_.clear();
  copies_.clear();
  sharded_master_.clear();
  bf16_master_.clear();
  grads16_.clear();
  offsets_.assign(1, 0);
  ends_.clear();
  q8_ = zero_stage_ == 1 && optimizer.state_format() == AdamWStateFormat::Q8;  // zero 0: CudaAdamW holds them whole
  sr_ = optimizer.master_format() == MasterFormat::Bf16Sr;
  sr_seed_ = host.config().sr_seed;
  grads_in_place_ = false;
  // 8-bit moments: every parameter starts at a multiple of the quantization block and every bucket is a multiple of
  // W blocks, so each rank's chunk of a bucket is whole blocks of each parameter (the gaps are never read).
  const size_t align = q8_ ? static_cast<size_t>(kQ8Block) : 1, W = static_cast<size_t>(size());
  const size_t bucket_elements =
      q8_ ? (bucket_elements_ + align * W - 1) / (align * W) * (align * W) : bucket_elements_;
  buckets_.clear();
  pieces_.clear();
  master_elements_ = 0;
  shard_master_ = CudaTensor();
  for (const CudaAdamWParam& p : optimizer.params()) {
    void* copy = nullptr;
    for (const CudaModel::Bf16Copy& c : copies)
      if (c.weight == p.param && c.copy != nullptr && c.copy->raw() != nullptr) copy = c.copy->raw();
    // lean: the parameter is the bf16 copy itself (CudaAdamW put it in the freed slot's place).
    const bool bf16_param = p.param->dtype() == DType::BF16 && p.param->raw() != nullptr;
    // A freed fp32 slot (its shape is gone with it: the gradient's gives the element count).
    const bool freed = !bf16_param && p.param->raw() == nullptr && p.grad->numel() > 0;
    const bool grad16 = p.grad->dtype() == DType::BF16;
    HLM_CHECK((p.grad->dtype() == DType::F32 || grad16) && (freed || bf16_param || p.param->dtype() == DType::F32),
              "CudaDataParallel: ", p.name, " is not an fp32 or bf16 weight with an fp32 or bf16 gradient");
    HLM_CHECK(!bf16_param || sr_, "CudaDataParallel: ", p.name, " is a bf16 weight without bf16 master weights");
    HLM_CHECK(!grad16 || zero_stage_ == 1 || size() == 1, "CudaDataParallel: ", p.name, " has a bf16 gradient; "
              "zero stage 0 on several ranks would round the summed gradients into it (zero stage 1 only)");
    HLM_CHECK(!freed || (zero_stage_ == 1 && copy != nullptr), "CudaDataParallel: ", p.name, " has no fp32 storage",
              copy == nullptr ? " and no bf16 copy" : " (its master can be sharded with zero stage 1 only)");
    weights_.push_back(freed || bf16_param ? nullptr : p.param->data<float>());
    // The collectives write the sums back (zero 0), or this rank's chunk of them (zero 1 with bf16 gradients).
    grads_.push_back(grad16 ? nullptr : const_cast<float*>(p.grad->data<float>()));
    grads16_.push_back(grad16 ? const_cast<void*>(p.grad->raw()) : nullptr);
    copies_.push_back(bf16_param ? p.param->raw() : copy);
    sharded_master_.push_back(freed);
    bf16_master_.push_back(bf16_param);
    ends_.push_back(offsets_.back() + static_cast<size_t>(p.grad->numel()));
    offsets_.push_back((ends_.back() + align - 1) / align * align);
  }
  const size_t P = q8_ ? (offsets_.back() + align * W - 1) / (align * W) * (align * W) : offsets_.back();
  offsets_.back() = P;
  size_t shard = 0, bucket_floats = std::max<size_t>(1, std::min(P, bucket_elements));
  for (size_t begin = 0; begin < P; begin += bucket_elements) {
    Bucket b{begin, std::min(P, begin + bucket_elements), shard};
    if (zero_stage_ == 1) shard += chunk_size(b.end - b.begin, static_cast<int>(W), host_.rank());
    for_each_part(b.begin, b.end, [&](size_t i, size_t, size_t) {
      (sharded_master_[i] || bf16_master_[i] ? b.has_bf16 : b.has_f32) = true;
    });
    if (b.has_bf16) bucket_floats = std::max(bucket_floats, W * bf16_slot_floats(b.end - b.begin));
    buckets_.push_back(b);
  }
  bucket_ = CudaTensor::empty(ctx_, {static_cast<int64_t>(bucket_floats)});
  shard_elements_ = shard;
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  events_.assign(buckets_.size(), nullptr);
  for (cudaEvent_t& e : events_) HLM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  bucket_stage_.assign(buckets_.size(), -1);  // until set_ready_stages: every bucket at the end of the backward
  queued_.assign(buckets_.size(), false);
  if (zero_stage_ == 0) return;

  grads_in_place_ = std::any_of(grads16_.begin(), grads16_.end(), [](void* g) { return g != nullptr; });
  size_t largest_chunk = 1;
  for (Bucket& b : buckets_) {
    const size_t c0 = chunk_first(b), c1 = c0 + chunk_size(b.end - b.begin, size(), host_.rank());
    largest_chunk = std::max(largest_chunk, c1 - c0);
    b.piece_begin = pieces_.size();
    for_each_part(c0, c1, [&](size_t i, size_t lo, size_t hi) {
      Piece p{i, lo, hi, b.shard_offset + (lo - c0), sharded_master_[i] ? master_elements_ : kNoMaster};
      if (grads_in_place_ && grads16_[i] != nullptr)
        p.grad16 = static_cast<uint16_t*>(grads16_[i]) + (lo - offsets_[i]);
      else if (grads_in_place_)
        p.grad32 = grads_[i] + (lo - offsets_[i]);
      pieces_.push_back(p);
      if (sharded_master_[i]) master_elements_ += hi - lo;
    });
    b.piece_end = pieces_.size();
  }
  const auto S = static_cast<int64_t>(std::max<size_t>(1, shard));
  // The summed gradients of this rank's pieces: a shard of their own, or (bf16 gradients) in place.
  shard_grad_ = grads_in_place_ ? CudaTensor() : CudaTensor::empty(ctx_, {S});
  stage_ = grads_in_place_ ? CudaTensor::empty(ctx_, {static_cast<int64_t>(largest_chunk)}) : CudaTensor();
  if (!grads_in_place_)
    for (Piece& p : pieces_) p.grad32 = shard_grad_.data<float>() + p.shard;
  for (CudaTensor* t : {&shard_m_, &shard_v_, &shard_qm_, &shard_qv_, &shard_am_, &shard_av_}) *t = CudaTensor();
  // This rank's shard of the host moments (zero at a fresh start, the checkpoint's on a resume).
  std::vector<float> m, v;
  std::vector<uint8_t> qm, qv;
  if (q8_) {  // codes [shard] bytes, block scales [shard / kQ8Block]: a piece's blocks are a slice of the host's
    const size_t blocks = shard / static_cast<size_t>(kQ8Block);
    qm.assign(shard, q8_codebook_signed().zero);
    qv.assign(shard, q8_codebook_unsigned().zero);
    m.assign(blocks, 0.0f);
    v.assign(blocks, 0.0f);
    for (const Piece& p : pieces_) {
      const AdamWQ8State& hs = host.q8_state(host_index[p.param]);
      const size_t at = p.begin - offsets_[p.param], n = p.end - p.begin, nb = static_cast<size_t>(q8_blocks(n));
      HLM_CHECK(at % kQ8Block == 0 && p.shard % kQ8Block == 0 && hs.q_m.size() >= at + n &&
                    hs.absmax_m.size() >= at / kQ8Block + nb,
                "CudaDataParallel: 8-bit state of ", optimizer.params()[p.param].name, " not block-aligned");
      std::copy_n(hs.q_m.data() + at, n, qm.data() + p.shard);
      std::copy_n(hs.q_v.data() + at, n, qv.data() + p.shard);
      std::copy_n(hs.absmax_m.data() + at / kQ8Block, nb, m.data() + p.shard / kQ8Block);
      std::copy_n(hs.absmax_v.data() + at / kQ8Block, nb, v.data() + p.shard / kQ8Block);
    }
    shard_qm_ = cuda_scratch_bytes(ctx_, std::max<size_t>(1, shard));
    shard_qv_ = cuda_scratch_bytes(ctx_, std::max<size_t>(1, shard));
    shard_am_ = CudaTensor::empty(ctx_, {static_cast<int64_t>(std::max<size_t>(1, blocks))});
    shard_av_ = CudaTensor::empty(ctx_, {static_cast<int64_t>(std::max<size_t>(1, blocks))});
    if (shard > 0) {
      cuda_copy_to_device_async(ctx_, shard_qm_.raw(), qm.data(), shard);
      cuda_copy_to_device_async(ctx_, shard_qv_.raw(), qv.data(), shard);
      cuda_copy_to_device_async(ctx_, shard_am_.raw(), m.data(), blocks * sizeof(float));
      cuda_copy_to_device_async(ctx_, shard_av_.raw(), v.data(), blocks * sizeof(float));
    }
  } else {
    shard_m_ = CudaTensor::empty(ctx_, {S});
    shard_v_ = CudaTensor::empty(ctx_, {S});
    m.resize(shard);
    v.resize(shard);
    for (const Piece& p : pieces_) {
      const Tensor hm = host.exp_avg(host_index[p.param]), hv = host.exp_avg_sq(host_index[p.param]);
      const size_t at = p.begin - offsets_[p.param], n = p.end - p.begin;
      std::copy_n(hm.f32() + at, n, m.data() + p.shard);
      std::copy_n(hv.f32() + at, n, v.data() + p.shard);
    }
    if (shard > 0) {
      cuda_copy_to_device_async(ctx_, shard_m_.raw(), m.data(), shard * sizeof(float));
      cuda_copy_to_device_async(ctx_, shard_v_.raw(), v.data(), shard * sizeof(float));
    }
  }
  // This rank's fp32 masters of the parameters whose fp32 slot was freed: the host optimizer's values (those the
  // device model was built from: a fresh start's weights or the checkpoint's).
  std::vector<float> masters(master_elements_);
  for (const Piece& p : pieces_) {
    if (p.master == kNoMaster) continue;
    const Tensor& hp = host.params()[host_index[p.param]].param;
    HLM_CHECK(static_cast<size_t>(hp.numel()) == ends_[p.param] - offsets_[p.param], "CudaDataParallel: ",
              optimizer.params()[p.param].name, ": host parameter of ", hp.numel(), " elements");
    std::copy_n(hp.f32() + (p.begin - offsets_[p.param]), p.end - p.begin, masters.data() + p.master);
  }
  if (master_elements_ > 0) {
    shard_master_ = CudaTensor::empty(ctx_, {static_cast<int64_t>(master_elements_)});
    cuda_copy_to_device_async(ctx_, shard_master_.raw(), masters.data(), master_elements_ * sizeof(float));
  }
  step_ = host.step_count();
  beta1_ = host.config().beta1;
  beta2_ = host.config().beta2;
  eps_ = host.config().eps;
  norm_ = CudaTensor::empty(ctx_, {1}, DType::I64);  // one double
  scale_ = CudaTensor::empty(ctx_, {1});
  const size_t table = adamw_multi_step_cuda_workspace_bytes(pieces_.size());
  adamw_ws_ = cuda_scratch_bytes(ctx_, std::max<size_t>(1, table));
  adamw_ws_bytes_ = table;
  adamw_staging_.resize(table);
  ctx_.synchronize();  // the pageable uploads above have been staged; m, v and masters may go
}

void CudaDataParallel::set_ready_stages(const std::vector<int>& stage) {
  HLM_CHECK(stage.size() == ends_.size(), "CudaDataParallel::set_ready_stages: ", stage.size(), " stages for ",
            ends_.size(), " parameters");
  for (size_t k = 0; k < buckets_.size(); ++k) {
    int lowest = INT_MAX;
    for_each_part(buckets_[k].begin, buckets_[k].end,
                  [&](size_t i, size_t, size_t) { lowest = std::min(lowest, stage[i]); });
    bucket_stage_[k] = lowest == INT_MAX ? -1 : lowest;
  }
}

bool CudaDataParallel::overlap_begin() {
  HLM_CHECK(!armed_ && !summed_, "CudaDataParallel::overlap_begin twice in a step");
  armed_ = overlap_ && optimizer_ != nullptr && !(zero_stage_ == 0 && size() == 1);
  std::fill(queued_.begin(), queued_.end(), false);
  return armed_;
}

void CudaDataParallel::overlap_reached(int stage) {
  if (!armed_) return;
  for (size_t k = buckets_.size(); k-- > 0;)
    if (!queued_[k] && bucket_stage_[k] >= stage) submit_bucket(k);
}

void CudaDataParallel::submit_bucket(size_t k) {
  const Bucket b = buckets_[k];
  float* buf = bucket_.data<float>();
  HLM_CUDA_CHECK(cudaEventRecord(events_[k], ctx_.stream()));
  DeviceCollectives::Job job;
  job.ready = events_[k];
  job.pack = [this, b, buf](cudaStream_t s) { copy_flat(b.begin, b.end, buf, true, false, s); };
  job.data = buf;
  job.n = b.end - b.begin;
  if (zero_stage_ == 1 && grads_in_place_) {
    job.recv = stage_.data<float>();  // jobs run in order on one stream: each unpacks the stage before the next
    job.unpack = [this, k](cudaStream_t s) { unpack_chunk(k, s); };
  } else if (zero_stage_ == 1) {
    job.recv = shard_grad_.data<float>() + b.shard_offset;
  } else job.unpack = [this, b, buf](cudaStream_t s) { copy_flat(b.begin, b.end, buf, false, false, s); };
  coll_->submit(std::move(job));
  queued_[k] = true;
}

void CudaDataParallel::finish_gradient_sums() {
  if (!armed_) return;
  overlap_reached(-1);  // anything not queued yet (the caller normally did this right after the backward)
  armed_ = false;
  coll_->finish();
  summed_ = true;
}

void CudaDataParallel::copy_flat(size_t begin, size_t end, float* buf, bool to_buf, bool weights,
                                 cudaStream_t stream) const {
  if (stream == nullptr) stream = ctx_.stream();
  const std::vector<float*>& t = weights ? weights_ : grads_;
  for_each_part(begin, end, [&](size_t i, size_t at, size_t stop) {
    if (!weights && grads16_[i] != nullptr) {  // a bf16 gradient: widened exactly into the bucket (lean)
      HLM_CHECK(to_buf, "CudaDataParallel: summed gradients are not written back into a bf16 gradient");
      cast_bf16_to_f32_cuda(buf + (at - begin), static_cast<const __nv_bfloat16*>(grads16_[i]) + (at - offsets_[i]),
                            static_cast<int64_t>(stop - at), stream);
      return;
    }
    if (t[i] == nullptr) return;  // a sharded master or a bf16 master (weights only)
    float* p = t[i] + (at - offsets_[i]);
    float* b = buf + (at - begin);
    HLM_CUDA_CHECK(cudaMemcpyAsync(to_buf ? b : p, to_buf ? p : b, (stop - at) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));
  });
}

void CudaDataParallel::copy_flat_bf16(size_t begin, size_t end, void* buf, bool to_buf) const {
  constexpr size_t kBf16 = 2;  // bytes of one __nv_bfloat16
  for_each_part(begin, end, [&](size_t i, size_t at, size_t stop) {
    if (!sharded_master_[i] && !bf16_master_[i]) return;
    char* p = static_cast<char*>(copies_[i]) + (at - offsets_[i]) * kBf16;
    char* b = static_cast<char*>(buf) + (at - begin) * kBf16;
    HLM_CUDA_CHECK(cudaMemcpyAsync(to_buf ? b : p, to_buf ? p : b, (stop - at) * kBf16, cudaMemcpyDeviceToDevice,
                                   ctx_.stream()));
  });
}

void CudaDataParallel::unpack_chunk(size_t k, cudaStream_t stream) const {
  const Bucket& b = buckets_[k];
  const size_t c0 = chunk_first(b);
  const float* stage = stage_.data<float>();
  for (size_t j = b.piece_begin; j < b.piece_end; ++j) {
    const Piece& p = pieces_[j];
    const size_t n = p.end - p.begin;
    if (p.grad16 != nullptr)  // round to nearest even, once
      cast_f32_to_bf16_cuda(reinterpret_cast<__nv_bfloat16*>(p.grad16), stage + (p.begin - c0),
                            static_cast<int64_t>(n), stream);
    else
      HLM_CUDA_CHECK(cudaMemcpyAsync(p.grad32, stage + (p.begin - c0), n * sizeof(float), cudaMemcpyDeviceToDevice,
                                     stream));
  }
}

size_t CudaDataParallel::bf16_slot_floats(size_t len) const {
  const auto W = static_cast<size_t>(size());
  return ((len + W - 1) / W + 1) / 2;  // the largest chunk (chunk_begin: at most ceil(len / W)), two bf16 per float
}

void CudaDataParallel::all_reduce_gradients() {
  HLM_CHECK(zero_stage_ == 0, "CudaDataParallel::all_reduce_gradients with zero stage 1");
  if (std::exchange(summed_, false)) return;  // summed during the backward (overlap)
  if (size() == 1) return;  // the sum over one rank is the gradient itself
  float* buf = bucket_.data<float>();
  for (const Bucket& b : buckets_) {
    copy_flat(b.begin, b.end, buf, true, false);
    coll_->all_reduce_sum(buf, b.end - b.begin);
    copy_flat(b.begin, b.end, buf, false, false);
  }
}

double CudaDataParallel::sharded_step(double clip, bool update) {
  HLM_CHECK(zero_stage_ == 1 && optimizer_ != nullptr, "CudaDataParallel::sharded_step: zero 1 after attach");
  ctx_.make_current();
  float* buf = bucket_.data<float>();
  if (!std::exchange(summed_, false)) {  // else reduce-scattered during the backward (overlap)
    for (size_t k = 0; k < buckets_.size(); ++k) {
      const Bucket& b = buckets_[k];
      copy_flat(b.begin, b.end, buf, true, false);
      if (grads_in_place_) {
        coll_->reduce_scatter_sum(buf, stage_.data<float>(), b.end - b.begin);
        unpack_chunk(k, ctx_.stream());  // the next collective waits for the stream first
      } else {
        coll_->reduce_scatter_sum(buf, shard_grad_.data<float>() + b.shard_offset, b.end - b.begin);
      }
    }
  }
  // ‖shard‖ on the device, over the pieces (grad_norm_cuda.h: fp64, a fixed order; bf16 gradients widened exactly).
  std::vector<GradNormCudaTensor> list;
  for (const Piece& p : pieces_)
    list.push_back({p.grad32, static_cast<int64_t>(p.end - p.begin), p.grad16});
  const size_t ws_bytes = grad_norm_cuda_workspace_bytes(list.data(), list.size());
  if (norm_ws_bytes_ < ws_bytes) {
    norm_ws_ = cuda_scratch_bytes(ctx_, ws_bytes);
    norm_ws_bytes_ = ws_bytes;
  }
  std::vector<unsigned char> staging(grad_norm_cuda_staging_bytes(list.size()));  // pageable: free once queued
  grad_global_norm_cuda(static_cast<double*>(norm_.raw()), nullptr, list.data(), list.size(), 0.0, norm_ws_.raw(),
                        norm_ws_bytes_, staging.data(), ctx_.stream());
  double norm = 0.0;
  cuda_copy_to_host(ctx_, &norm, norm_.raw(), sizeof(norm));
  if (size() > 1) {  // rank-order sum of the squared shard norms (NaN and inf propagate)
    double sum_sq = norm * norm;
    host_.all_reduce_sum(&sum_sq, 1);
    norm = std::sqrt(sum_sq);
  }
  if (!update || !std::isfinite(norm)) return norm;
  HLM_CHECK_INPUT(clip > 0.0, "max gradient norm must be positive, got ", clip);
  const float scale = norm > clip ? static_cast<float>(clip / norm) : 1.0f;  // grad_norm_cuda.h's clip scale
  cuda_copy_to_device_async(ctx_, scale_.raw(), &scale, sizeof(scale));
  ++step_;
  if (q8_ || sr_) {
    // 8-bit moments and/or bf16 masters: one launch per piece (whole quantization blocks of one parameter: the same
    // blocks, values and bits as the one-rank launch over the whole tensor; bf16 masters: the one-rank step's random
    // bits, adamw_sr_bits(base, element index) with the piece's first element at index `at`), then, with fp32 masters,
    // the bf16 copies of the pieces that have one (CudaModel::refresh_bf16's cast; the low-memory kernel writes none).
    for (const Piece& p : pieces_) {
      const CudaAdamWParam& q = optimizer_->params()[p.param];
      const size_t at = p.begin - offsets_[p.param], n = p.end - p.begin;
      float* master = bf16_master_[p.param] ? nullptr
                      : p.master == kNoMaster ? weights_[p.param] + at
                                              : shard_master_.data<float>() + p.master;
      AdamWLowmemTensor t;
      if (master != nullptr) {
        t.param_f32 = master;
        t.f32_holds_bf16 = sr_;
      } else {
        t.param_bf16 = static_cast<uint16_t*>(copies_[p.param]) + at;
      }
      if (q8_) {
        t.q_m = static_cast<uint8_t*>(shard_qm_.raw()) + p.shard;
        t.q_v = static_cast<uint8_t*>(shard_qv_.raw()) + p.shard;
        t.absmax_m = shard_am_.data<float>() + p.shard / kQ8Block;
        t.absmax_v = shard_av_.data<float>() + p.shard / kQ8Block;
      } else {
        t.exp_avg = shard_m_.data<float>() + p.shard;
        t.exp_avg_sq = shard_v_.data<float>() + p.shard;
      }
      t.grad = p.grad32;
      t.grad_bf16 = p.grad16;
      t.n = static_cast<int64_t>(n);
      AdamWLowmemStep step = adamw_lowmem_step(q.lr, q.weight_decay, beta1_, beta2_, eps_, step_,
                                               sr_ ? adamw_sr_base(sr_seed_, step_, q.name) : 0);
      step.sr_first = static_cast<uint64_t>(at);
      adamw_lowmem_step_cuda(t, scale_.data<float>(), step, ctx_.stream());
      if (!sr_ && copies_[p.param] != nullptr)
        cast_f32_to_bf16_cuda(static_cast<__nv_bfloat16*>(copies_[p.param]) + at, master, static_cast<int64_t>(n),
                              ctx_.stream());
    }
  } else {
    std::vector<AdamWCudaTensor> tensors(pieces_.size());
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const Piece& p = pieces_[k];
      const CudaAdamWParam& q = optimizer_->params()[p.param];
      const size_t at = p.begin - offsets_[p.param];
      AdamWCudaTensor& t = tensors[k];
      t.param = p.master == kNoMaster ? weights_[p.param] + at : shard_master_.data<float>() + p.master;
      t.exp_avg = shard_m_.data<float>() + p.shard;
      t.exp_avg_sq = shard_v_.data<float>() + p.shard;
      t.grad = p.grad32;
      if (copies_[p.param] != nullptr) t.param_bf16 = static_cast<__nv_bfloat16*>(copies_[p.param]) + at;
      t.n = static_cast<int64_t>(p.end - p.begin);
      t.step = adamw_cuda_step(q.lr, q.weight_decay, beta1_, beta2_, eps_, step_);
    }
    adamw_multi_step_cuda(tensors.data(), tensors.size(), scale_.data<float>(), adamw_ws_.raw(), adamw_ws_bytes_,
                          adamw_staging_.data(), ctx_.stream());
  }
  // Every rank's updated chunks to every rank (with one rank: nothing to move): the fp32 weights of the parameters
  // held in fp32, the bf16 copies of those whose master is sharded (the kernel wrote this rank's chunk of them).
  if (size() == 1) return norm;
  const int r = host_.rank();
  for (const Bucket& b : buckets_) {
    const size_t len = b.end - b.begin, c0 = chunk_first(b) - b.begin, n = chunk_size(len, size(), r);
    if (b.has_f32) {
      copy_flat(b.begin + c0, b.begin + c0 + n, buf + c0, true, true);
      coll_->all_gather(buf + c0, buf, len);
      copy_flat(b.begin, b.begin + c0, buf, false, true);  // the other ranks' chunks only
      copy_flat(b.begin + c0 + n, b.end, buf + c0 + n, false, true);
    }
    if (b.has_bf16) {  // rank q's chunk packed at the front of slot q (k floats = 2k bf16 values)
      const size_t k = bf16_slot_floats(len);
      copy_flat_bf16(b.begin + c0, b.begin + c0 + n, buf + static_cast<size_t>(r) * k, true);
      coll_->all_gather(buf + static_cast<size_t>(r) * k, buf, static_cast<size_t>(size()) * k);
      for (int q = 0; q < size(); ++q)
        if (q != r)
          copy_flat_bf16(b.begin + chunk_begin(len, size(), q), b.begin + chunk_begin(len, size(), q + 1),
                         buf + static_cast<size_t>(q) * k, false);
    }
  }
  return norm;
}

void CudaDataParallel::gather_state(AdamW& host, const std::vector<size_t>& host_index) {
  HLM_CHECK(zero_stage_ == 1 && optimizer_ != nullptr, "CudaDataParallel::gather_state: zero 1 after attach");
  ctx_.make_current();
  if (q8_) {
    gather_q8_state(host, host_index);
    return;
  }
  std::vector<Tensor> moments[2];
  for (auto& m : moments)
    for (size_t i = 0; i < ends_.size(); ++i)
      m.push_back(Tensor::zeros(Shape{static_cast<int64_t>(ends_[i] - offsets_[i])}));
  float* buf = bucket_.data<float>();
  std::vector<float> bucket(bucket_.numel());
  for (const int which : {0, 1}) {
    const float* shard = (which == 0 ? shard_m_ : shard_v_).data<float>();
    for (const Bucket& b : buckets_) {
      const size_t len = b.end - b.begin, c0 = chunk_first(b) - b.begin, n = chunk_size(len, size(), host_.rank());
      if (n > 0)
        HLM_CUDA_CHECK(cudaMemcpyAsync(buf + c0, shard + b.shard_offset, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                       ctx_.stream()));
      coll_->all_gather(buf + c0, buf, len);
      cuda_copy_to_host(ctx_, bucket.data(), buf, len * sizeof(float));
      for_each_part(b.begin, b.end, [&](size_t i, size_t at, size_t stop) {
        std::copy(bucket.data() + (at - b.begin), bucket.data() + (stop - b.begin),
                  moments[which][i].f32() + (at - offsets_[i]));
      });
    }
  }
  for (size_t i = 0; i < host_index.size(); ++i) {
    const Shape shape = host.params()[host_index[i]].param.shape();
    host.set_state(host_index[i], moments[0][i].reshape(shape), moments[1][i].reshape(shape));
  }
  host.set_step_count(step_);
}

void CudaDataParallel::gather_q8_state(AdamW& host, const std::vector<size_t>& host_index) {
  // Per bucket: the codes (len bytes, every rank's chunk len / W bytes: whole blocks, so a multiple of 4 bytes moved
  // as floats) and the block scales (len / kQ8Block floats), gathered, then cut into the parameters' states.
  std::vector<AdamWQ8State> states(ends_.size());
  for (size_t i = 0; i < ends_.size(); ++i) {
    const size_t n = ends_[i] - offsets_[i], nb = static_cast<size_t>(q8_blocks(static_cast<int64_t>(n)));
    states[i].q_m.resize(n);
    states[i].q_v.resize(n);
    states[i].absmax_m.resize(nb);
    states[i].absmax_v.resize(nb);
  }
  float* buf = bucket_.data<float>();
  std::vector<unsigned char> host_buf(static_cast<size_t>(bucket_.numel()) * sizeof(float));
  constexpr auto B = static_cast<size_t>(kQ8Block);
  for (const int which : {0, 1}) {
    const CudaTensor& codes = which == 0 ? shard_qm_ : shard_qv_;
    const CudaTensor& scales = which == 0 ? shard_am_ : shard_av_;
    for (const Bucket& b : buckets_) {
      const size_t len = b.end - b.begin, c0 = chunk_first(b) - b.begin, n = chunk_size(len, size(), host_.rank());
      HLM_CHECK(len % (B * static_cast<size_t>(size())) == 0 && c0 % B == 0 && b.shard_offset % B == 0,
                "CudaDataParallel: a bucket of 8-bit state is not block-aligned");
      // Codes: bytes [c0, c0 + n) of the bucket are this rank's.
      if (n > 0)
        HLM_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<unsigned char*>(buf) + c0,
                                       static_cast<const unsigned char*>(codes.raw()) + b.shard_offset, n,
                                       cudaMemcpyDeviceToDevice, ctx_.stream()));
      coll_->all_gather(buf + c0 / 4, buf, len / 4);
      cuda_copy_to_host(ctx_, host_buf.data(), buf, len);
      for_each_part(b.begin, b.end, [&](size_t i, size_t at, size_t stop) {
        std::vector<uint8_t>& q = which == 0 ? states[i].q_m : states[i].q_v;
        std::copy(host_buf.data() + (at - b.begin), host_buf.data() + (stop - b.begin), q.data() + (at - offsets_[i]));
      });
      // Block scales: blocks [c0 / B, (c0 + n) / B) of the bucket.
      if (n > 0)
        HLM_CUDA_CHECK(cudaMemcpyAsync(buf + c0 / B, scales.data<float>() + b.shard_offset / B, n / B * sizeof(float),
                                       cudaMemcpyDeviceToDevice, ctx_.stream()));
      coll_->all_gather(buf + c0 / B, buf, len / B);
      cuda_copy_to_host(ctx_, host_buf.data(), buf, len / B * sizeof(float));
      const auto* blocks = reinterpret_cast<const float*>(host_buf.data());
      for_each_part(b.begin, b.end, [&](size_t i, size_t at, size_t stop) {
        std::vector<float>& a = which == 0 ? states[i].absmax_m : states[i].absmax_v;
        const size_t first = (at - offsets_[i]) / B, count = (stop - at + B - 1) / B;  // at is a block start
        std::copy_n(blocks + (at - b.begin) / B, count, a.data() + first);
      });
    }
  }
  for (size_t i = 0; i < host_index.size(); ++i) host.set_q8_state(host_index[i], std::move(states[i]));
  host.set_step_count(step_);
}

void CudaDataParallel::gather_masters(AdamW& host, const std::vector<size_t>& host_index) {
  HLM_CHECK(zero_stage_ == 1 && optimizer_ != nullptr, "CudaDataParallel::gather_masters: zero 1 after attach");
  if (!masters_sharded()) return;
  ctx_.make_current();
  float* buf = bucket_.data<float>();
  std::vector<float> bucket(static_cast<size_t>(bucket_.numel()));
  for (const Bucket& b : buckets_) {
    if (!b.has_bf16) continue;
    const size_t len = b.end - b.begin, c0 = chunk_first(b) - b.begin;
    // This rank's chunk: the masters of its pieces in this bucket (the chunk's other elements are not read below).
    for (const Piece& p : pieces_)
      if (p.master != kNoMaster && p.begin >= b.begin && p.end <= b.end)
        HLM_CUDA_CHECK(cudaMemcpyAsync(buf + (p.begin - b.begin), shard_master_.data<float>() + p.master,
                                       (p.end - p.begin) * sizeof(float), cudaMemcpyDeviceToDevice, ctx_.stream()));
    coll_->all_gather(buf + c0, buf, len);
    cuda_copy_to_host(ctx_, bucket.data(), buf, len * sizeof(float));
    for_each_part(b.begin, b.end, [&](size_t i, size_t at, size_t stop) {
      if (!sharded_master_[i]) return;
      Tensor flat = host.params()[host_index[i]].param.reshape(Shape{static_cast<int64_t>(ends_[i] - offsets_[i])});
      std::copy(bucket.data() + (at - b.begin), bucket.data() + (stop - b.begin), flat.f32() + (at - offsets_[i]));
    });
  }
}

}  // namespace hlm
