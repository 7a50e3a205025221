// Data parallelism of the CPU trainer: batch shares, bucketed gradient sums, ZeRO-1 (contract in data_parallel.h).
#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "core/error.h"
#include "train/checkpoint_io.h"
#include "train/grad_utils.h"

namespace hlm {

namespace {

Tensor view(float* data, size_t n) {
  return Tensor::wrap(nullptr, data, Shape{static_cast<int64_t>(n)}, DType::F32);
}

// Copies flat range [begin, end) of tensors laid end to end (tensor i starts at offsets[i], its data at base(i)) to or
// from buf.
void copy_flat_range(const std::vector<size_t>& offsets, size_t begin, size_t end, float* buf, bool to_buf,
                     const std::function<float*(size_t)>& base) {
  size_t i = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin()) - 1;
  for (size_t at = begin; at < end; ++i) {
    const size_t stop = std::min(end, offsets[i + 1]);
    float* p = base(i) + (at - offsets[i]);
    float* b = buf + (at - begin);
    if (to_buf) std::memcpy(b, p, (stop - at) * sizeof(float));
    else std::memcpy(p, b, (stop - at) * sizeof(float));
    at = stop;
  }
}

}  // namespace

size_t bucket_elements_from_env(size_t fallback) {
  const char* v = std::getenv(kBucketElementsEnv);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  HLM_CHECK_INPUT(end != v && *end == '\0' && x > 0 && x <= (1ull << 30), "environment variable ",
                  kBucketElementsEnv, "='", v, "' is not a bucket size in elements (1 .. 2^30)");
  return static_cast<size_t>(x);
}

DataParallel::DataParallel(Communicator& comm, const AdamW& full, int zero_stage, size_t bucket_elements)
    : comm_(comm), zero_stage_(zero_stage) {
  HLM_CHECK(zero_stage == 0 || zero_stage == 1, "zero stage ", zero_stage);
  HLM_CHECK(bucket_elements > 0, "bucket of 0 elements");
  offsets_.push_back(0);
  for (const AdamWParam& p : full.params()) {
    weights_.push_back(p.param);
    grads_.push_back(p.grad);
    offsets_.push_back(offsets_.back() + static_cast<size_t>(p.param.numel()));
  }
  const size_t P = offsets_.back();
  size_t shard = 0;
  for (size_t begin = 0; begin < P; begin += bucket_elements) {
    Bucket b{begin, std::min(P, begin + bucket_elements), shard};
    if (zero_stage_ == 1) shard += chunk_size(b.end - b.begin, comm_.size(), comm_.rank());
    buckets_.push_back(b);
  }
  staging_.resize(std::min(P, bucket_elements));
  if (zero_stage_ == 0) return;

  shard_grad_.assign(shard, 0.0f);
  std::vector<AdamWParam> params;
  for (const Bucket& b : buckets_) {
    const size_t c0 = chunk_first(b), c1 = c0 + chunk_size(b.end - b.begin, comm_.size(), comm_.rank());
    for (size_t i = 0; i < full.params().size(); ++i) {
      const size_t lo = std::max(c0, offsets_[i]), hi = std::min(c1, offsets_[i + 1]);
      if (lo >= hi) continue;
      const AdamWParam& p = full.params()[i];
      pieces_.push_back({i, lo, hi});
      params.push_back({str_cat(p.name, "[", lo - offsets_[i], ":", hi - offsets_[i], "]"),
                        view(p.param.f32() + (lo - offsets_[i]), hi - lo),
                        view(shard_grad_.data() + b.shard_offset + (lo - c0), hi - lo), p.group});
    }
  }
  shard_ = std::make_unique<AdamW>(full.groups(), std::move(params), full.config());
}

void DataParallel::copy_flat(size_t begin, size_t end, float* buf, bool to_buf, bool weights) const {
  const std::vector<Tensor>& t = weights ? weights_ : grads_;
  copy_flat_range(offsets_, begin, end, buf, to_buf, [&](size_t i) { return t[i].f32(); });
}

std::pair<int64_t, int64_t> rank_rows(const Communicator& comm, int64_t rows) {
  const int64_t W = comm.size(), r = comm.rank();
  HLM_CHECK(rows % W == 0, "batch of ", rows, " rows over ", W, " ranks");
  return {r * rows / W, (r + 1) * rows / W};
}

void reduce_batch_loss(Communicator& comm, BatchLoss& loss) {
  std::vector<double> v;
  v.push_back(loss.loss);
  v.push_back(static_cast<double>(loss.counted));
  v.insert(v.end(), loss.sum_by_language.begin(), loss.sum_by_language.end());
  for (int64_t c : loss.count_by_language) v.push_back(static_cast<double>(c));  // exact below 2^53
  comm.all_reduce_sum(v.data(), v.size());
  const size_t L = loss.sum_by_language.size();
  loss.loss = v[0];
  loss.counted = static_cast<int64_t>(v[1]);
  for (size_t i = 0; i < L; ++i) {
    loss.sum_by_language[i] = v[2 + i];
    loss.count_by_language[i] = static_cast<int64_t>(v[2 + L + i]);
  }
}

double DataParallel::reduce_and_clip(double clip) {
  if (zero_stage_ == 0) {
    for (const Bucket& b : buckets_) {
      copy_flat(b.begin, b.end, staging_.data(), true, false);
      comm_.all_reduce_sum(staging_.data(), b.end - b.begin);
      copy_flat(b.begin, b.end, staging_.data(), false, false);
    }
    return clip_grad_norm(grads_, clip);
  }
  for (const Bucket& b : buckets_) {
    copy_flat(b.begin, b.end, staging_.data(), true, false);
    comm_.reduce_scatter_sum(staging_.data(), shard_grad_.data() + b.shard_offset, b.end - b.begin);
  }
  // Σ g² of the shard in double, in index order; the ranks' sums are added in rank order. NaN and inf propagate.
  double sum_sq = 0.0;
  for (const float g : shard_grad_) sum_sq += static_cast<double>(g) * static_cast<double>(g);
  comm_.all_reduce_sum(&sum_sq, 1);
  const double norm = std::sqrt(sum_sq);
  if (!std::isfinite(norm)) return std::isnan(sum_sq) ? std::numeric_limits<double>::quiet_NaN() : norm;
  HLM_CHECK_INPUT(clip > 0.0, "max gradient norm must be positive, got ", clip);
  if (norm > clip && !shard_grad_.empty()) {
    const Tensor shard = view(shard_grad_.data(), shard_grad_.size());
    grad_scale({&shard, 1}, clip / norm);  // the factor and rounding of clip_grad_norm
  }
  return norm;
}

void DataParallel::step(AdamW& full) {
  if (zero_stage_ == 0) {
    full.step();
    return;
  }
  for (size_t g = 0; g < full.groups().size(); ++g) shard_->groups()[g].lr = full.groups()[g].lr;
  shard_->step();
  for (const Bucket& b : buckets_) {
    const size_t len = b.end - b.begin, c0 = chunk_first(b) - b.begin;
    float* mine = staging_.data() + c0;
    copy_flat(b.begin + c0, b.begin + c0 + chunk_size(len, comm_.size(), comm_.rank()), mine, true, true);
    comm_.all_gather(mine, staging_.data(), len);
    copy_flat(b.begin, b.end, staging_.data(), false, true);
  }
}

const AdamW* DataParallel::optimizer_for_checkpoint(const AdamW& full) {
  if (zero_stage_ == 0) return &full;
  const bool root = comm_.rank() == 0;
  gathered_.reset();
  std::vector<Tensor> moments[2];  // rank 0: the whole m and v, per parameter
  if (root)
    for (auto& m : moments)
      for (const Tensor& w : weights_) m.push_back(Tensor::zeros(w.shape()));
  for (const int which : {0, 1}) {
    size_t piece = 0;
    for (const Bucket& b : buckets_) {
      const size_t len = b.end - b.begin, c0 = chunk_first(b) - b.begin;
      // This rank's chunk of the bucket is its pieces of it, in order.
      for (size_t at = b.begin + c0; piece < pieces_.size() && pieces_[piece].begin == at; ++piece) {
        const Tensor s = which == 0 ? shard_->exp_avg(piece) : shard_->exp_avg_sq(piece);
        std::memcpy(staging_.data() + (at - b.begin), s.f32(), s.nbytes());
        at = pieces_[piece].end;
      }
      comm_.all_gather(staging_.data() + c0, staging_.data(), len);
      if (root)
        copy_flat_range(offsets_, b.begin, b.end, staging_.data(), false,
                        [&](size_t i) { return moments[which][i].f32(); });
    }
    HLM_CHECK(piece == pieces_.size(), "optimizer shard pieces out of order");
  }
  if (!root) return nullptr;
  gathered_ = std::make_unique<AdamW>(full.groups(), full.params(), full.config());
  for (size_t i = 0; i < weights_.size(); ++i) gathered_->set_state(i, moments[0][i], moments[1][i]);
  gathered_->set_step_count(shard_->step_count());
  return gathered_.get();
}

void DataParallel::restore_optimizer(const std::filesystem::path& checkpoint, AdamW& full) {
  if (zero_stage_ == 0) {
    checkpoint_restore_optimizer(checkpoint, full);
    return;
  }
  AdamW all(full.groups(), full.params(), full.config());  // the whole state, briefly (8 bytes per parameter)
  checkpoint_restore_optimizer(checkpoint, all);
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const Piece& p = pieces_[k];
    const size_t at = p.begin - offsets_[p.param], n = p.end - p.begin;
    const Tensor m = all.exp_avg(p.param), v = all.exp_avg_sq(p.param);  // held: views below point into them
    shard_->set_state(k, view(m.f32() + at, n), view(v.f32() + at, n));
  }
  shard_->set_step_count(all.step_count());
  full.set_step_count(all.step_count());
}

}  // namespace hlm
