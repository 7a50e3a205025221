// One training batch: row slicing, teacher/eval forward, and the micro-batched gradient (contracts in trainer_batch.h).
#include "train/trainer_batch.h"

#include <algorithm>

#include "models/model_train.h"

namespace hlm {

PackedBatch packed_batch_rows(const PackedBatch& batch, int64_t row_begin, int64_t row_end) {
  const int64_t T = batch.batch.total_tokens();
  HLM_CHECK(batch.rows > 0 && T % batch.rows == 0, "packed batch: ", T, " tokens in ", batch.rows, " rows");
  HLM_CHECK(0 <= row_begin && row_begin < row_end && row_end <= batch.rows, "packed batch: rows [", row_begin, ", ",
            row_end, ") of ", batch.rows);
  const int64_t n = T / batch.rows;
  const int64_t begin = row_begin * n, end = row_end * n;
  PackedBatch out;
  out.rows = row_end - row_begin;
  out.batch.ids.assign(batch.batch.ids.begin() + begin, batch.batch.ids.begin() + end);
  out.targets.assign(batch.targets.begin() + begin, batch.targets.begin() + end);
  out.language.assign(batch.language.begin() + begin, batch.language.begin() + end);
  const std::vector<int64_t>& cu = batch.batch.cu_seqlens;
  const auto first = std::lower_bound(cu.begin(), cu.end(), begin);
  const auto last = std::lower_bound(cu.begin(), cu.end(), end);
  HLM_CHECK(first != cu.end() && *first == begin && last != cu.end() && *last == end,
            "packed batch: rows are not sequence boundaries");
  out.batch.cu_seqlens.clear();
  for (auto it = first; it <= last; ++it) out.batch.cu_seqlens.push_back(*it - begin);
  return out;
}

Tensor forward_final_hidden(Model& model, const TokenBatch& batch) {
  Tensor hidden;
  model.forward(batch, {}, [&](CapturePoint point, int, const Tensor& value) {
    if (point == CapturePoint::FinalHidden) hidden = value.clone();
  });
  HLM_CHECK(hidden.defined(), "forward produced no final hidden states");
  return hidden;
}

LmHead<float> lm_head_of(const Model& model) {
  const ModelConfig& c = model.config();
  return {model.weights().lm_head.weight.f32(), c.vocab_size, c.hidden_size, c.logits_scaling};
}

BatchLoss train_batch_gradient(Model& student, Model* teacher, const PackedBatch& batch, int64_t micro_rows,
                               double tau, DecoderWeights& grads, size_t num_languages, Recompute recompute,
                               int64_t weight_count) {
  HLM_CHECK(micro_rows > 0 && batch.rows % micro_rows == 0, "batch of ", batch.rows, " rows, micro-batch ",
            micro_rows);
  const int64_t H = student.config().hidden_size;
  BatchLoss out;
  out.sum_by_language.assign(num_languages, 0.0);
  out.count_by_language.assign(num_languages, 0);
  // Loss weights of the full batch, so that the micro-batch gradients add up to the full-batch mean.
  if (teacher == nullptr) {
    out.counted = std::count_if(batch.targets.begin(), batch.targets.end(), [](int32_t t) { return t >= 0; });
  } else {
    out.counted = batch.batch.total_tokens();
  }
  const int64_t whole = weight_count > 0 ? weight_count : out.counted;
  const float weight = whole > 0 ? static_cast<float>(1.0 / static_cast<double>(whole)) : 0.0f;

  for (int64_t r = 0; r < batch.rows; r += micro_rows) {
    const PackedBatch micro = batch.rows == micro_rows ? batch : packed_batch_rows(batch, r, r + micro_rows);
    const int64_t N = micro.batch.total_tokens();
    Tensor teacher_hidden;
    if (teacher != nullptr) teacher_hidden = forward_final_hidden(*teacher, micro.batch);
    const ForwardTrace trace = model_forward_train(student, micro.batch, recompute);
    out.kept_bytes = std::max(out.kept_bytes, trace.kept_bytes());
    Tensor d_hidden = Tensor::zeros({N, H});
    const LmHeadGrad<float> grad{d_hidden.f32(), grads.lm_head.weight.f32()};
    std::vector<float> weights(static_cast<size_t>(N), weight), per_token(static_cast<size_t>(N));
    TokenLossResult result;
    if (teacher == nullptr) {
      result = lm_head_cross_entropy(per_token.data(), trace.final_hidden.f32(), N, lm_head_of(student),
                                     micro.targets.data(), weights.data(), &grad);
    } else {
      result = lm_head_forward_kl(per_token.data(), teacher_hidden.f32(), lm_head_of(*teacher),
                                  trace.final_hidden.f32(), lm_head_of(student), N, tau, weights.data(), &grad);
    }
    out.loss += result.loss;
    for (int64_t t = 0; t < N; ++t) {
      if (teacher == nullptr && micro.targets[t] < 0) continue;
      const auto lang = static_cast<size_t>(micro.language[t]);
      HLM_CHECK(lang < num_languages, "token language ", lang, " outside the corpus's ", num_languages);
      out.sum_by_language[lang] += per_token[t];
      ++out.count_by_language[lang];
    }
    model_backward(student, micro.batch, trace, d_hidden, grads);
  }
  return out;
}

}  // namespace hlm
