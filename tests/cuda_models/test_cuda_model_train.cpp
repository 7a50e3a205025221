// CudaModel training (models/cuda/cuda_model_train.h) against the CPU's model_forward_train + model_backward
// (models/model_train.h), Recompute::Layer on both sides:
//   - for the models of the train goldens (tests/golden/train_*: qwen3_untied with biases and an untied head, granite
//     with its multipliers, olmo_hybrid_tiny with GDN and post-norm attention, qwen3_tied with a tied head) and a
//     qwen3_hybrid student converted here (GDN with neg_eigval): the golden batch (the student's: three odd-length
//     packed sequences), one random d_final_hidden given to both sides → the final hidden states, every parameter
//     gradient and d_embedding; GPU reruns are bit-identical, and a second backward into the same holder doubles
//     every gradient (gradients ACCUMULATE; kAccumulateBound);
//   - the CUDA LM-head losses end to end (CE on train_ce_qwen3_untied; forward KL τ = 2 from qwen3_untied into
//     qwen3_tied, whose head is the embedding): loss, per-token values and every gradient, the LM head's included.
//   - CudaModel::zeros_like (a gradient holder built without reading host memory): every byte zero, uploads after
//     it copy again.
//
// Bound: max |gpu − cpu| / max |cpu| ≤ kRelBound = 2e-4 per tensor. Both sides are fp32 and run the same operations
// in the same order; they differ in summation order only: cuBLASLt vs OpenBLAS GEMMs (~√K·u ≈ 1e-6 per product at
// K ≤ 256, u = 2^-24), fp32 block and column sums where the CPU uses double (norms, gates, conv weights), flash
// attention's online softmax and Dᵢ = dO·O, and the gated delta rule's fp32 state where the CPU keeps double. The
// forward already agrees to ≤ 4.4e-6 (test_cuda_model_forward.cpp); the backward adds one more pass through every
// layer, and small parameter gradients (biases, A_log, dt_bias: sums over tokens whose terms cancel) amplify the
// relative error, so expect up to ~1e-5. 2e-4 keeps a 20× margin; a dataflow mistake (a missing multiplier or
// norm, a gradient overwritten instead of added, a wrong head or sequence) moves a gradient by O(1e-2..1). Every
// comparison prints its worst ratio, so a passing log shows the margins.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "models/convert.h"
#include "models/cuda/cuda_model_train.h"
#include "models/model_train.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"
#include "support/golden.h"
#include "support/random.h"
#include "train/lm_head_loss.h"

using namespace hlm;
using namespace hlm::test;

namespace {

constexpr double kRelBound = 2e-4;  // derivation in the header comment
// A second backward into the same holder must give 2·g. cuBLASLt computes dW = 1·(dyᵀx) + 1·dW in one call, and a
// split-K algorithm may add the old dW before its last partial sums, so the result can differ from 2·g by a few
// fp32 roundings of values of size |2g|: ≤ ~4·u relative to max|2g| (u = 2^-24 ≈ 6e-8). 1e-5 leaves a wide margin
// and still catches an overwrite (relative error 0.5) or a double add (0.5).
constexpr double kAccumulateBound = 1e-5;

SafetensorsFile open_cuda_golden(const std::string& case_name) {
  return SafetensorsFile::open(cuda_golden_dir(case_name) / "golden.safetensors");
}

Tensor host_tensor(const std::vector<float>& values, Shape shape) {
  Tensor t = Tensor::zeros(shape);
  std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

// Downloads a gradient holder into host tensors shaped like the CPU's.
DecoderWeights download_grads(const CudaModel& grads) {
  DecoderWeights host = zero_grads_like(grads.config());
  grads.download_into(host);
  return host;
}

// Compares every parameter gradient (named_parameters order); returns the worst ratio and prints it.
double expect_grads_match(Model& model, DecoderWeights& cpu, DecoderWeights& gpu, const std::string& label) {
  DecoderWeights& weights = model.mutable_weights();
  const std::vector<NamedParameter> a = named_parameters(model.config(), weights, cpu);
  const std::vector<NamedParameter> b = named_parameters(model.config(), weights, gpu);
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  std::string worst_name;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double rel = relative_max_diff(a[i].grad, b[i].grad);
    EXPECT_LE(rel, kRelBound) << label << " " << a[i].name;
    if (rel >= worst) worst = rel, worst_name = a[i].name;
  }
  std::printf("[check] cuda_train %s: %zu gradients, worst rel=%.3g (%s), bound %.0e\n", label.c_str(), a.size(),
              worst, worst_name.c_str(), kRelBound);
  return worst;
}

// Model backward parity from one random d_final_hidden, plus determinism and accumulation.
void expect_backward_match(Model& cpu_model, const TokenBatch& batch, const std::string& label) {
  const ModelConfig& c = cpu_model.config();
  const int64_t T = batch.total_tokens(), H = c.hidden_size;
  const Tensor d_final = host_tensor(random_vector(static_cast<size_t>(T * H), /*stream=*/7, 0.05f), {T, H});

  const ForwardTrace trace = model_forward_train(cpu_model, batch);
  DecoderWeights cpu_grads = zero_grads_like(c);
  model_backward(cpu_model, batch, trace, d_final, cpu_grads);

  CudaContext& ctx = cuda_context();
  CudaModel gpu_model = CudaModel::upload(cpu_model, ctx);
  CudaModel gpu_grads = CudaModel::zeros_like(c, ctx);
  const CudaTrainTrace gpu_trace = gpu_model.forward_train(batch);
  ASSERT_EQ(gpu_trace.layer_in.size(), trace.layer_in.size()) << label;
  const double rel_hidden = relative_max_diff(trace.final_hidden, cuda_download(ctx, gpu_trace.final_hidden));
  EXPECT_LE(rel_hidden, kRelBound) << label << " final hidden";
  const CudaTensor d_final_gpu = cuda_upload(ctx, d_final);
  gpu_model.backward(gpu_trace, d_final_gpu.data<float>(), gpu_grads);
  DecoderWeights once = download_grads(gpu_grads);
  std::printf("[check] cuda_train %s: final hidden rel=%.3g\n", label.c_str(), rel_hidden);
  expect_grads_match(cpu_model, cpu_grads, once, label);

  // Accumulation: a second backward into the same holder gives 2·g (kAccumulateBound).
  gpu_model.backward(gpu_trace, d_final_gpu.data<float>(), gpu_grads);
  DecoderWeights twice = download_grads(gpu_grads);
  // Determinism: a fresh forward and backward into a zeroed holder gives the same bits as the first.
  gpu_grads.set_zero();
  const CudaTrainTrace again_trace = gpu_model.forward_train(batch);
  gpu_model.backward(again_trace, d_final_gpu.data<float>(), gpu_grads);
  DecoderWeights again = download_grads(gpu_grads);
  DecoderWeights& weights = cpu_model.mutable_weights();
  const std::vector<NamedParameter> p1 = named_parameters(c, weights, once);
  const std::vector<NamedParameter> p2 = named_parameters(c, weights, twice);
  const std::vector<NamedParameter> p3 = named_parameters(c, weights, again);
  double worst_accumulate = 0.0;
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(p1[i].grad.raw(), p3[i].grad.raw(), p1[i].grad.nbytes()))
        << label << " " << p1[i].name << ": GPU rerun not bit-identical";
    Tensor doubled = p1[i].grad.clone();
    for (int64_t j = 0; j < doubled.numel(); ++j) doubled.f32()[j] *= 2.0f;  // exact
    const double rel = relative_max_diff(doubled, p2[i].grad);
    worst_accumulate = std::max(worst_accumulate, rel);
    EXPECT_LE(rel, kAccumulateBound) << label << " " << p1[i].name << ": a second backward did not add";
  }
  std::printf("[check] cuda_train %s: rerun bit-identical, second backward vs 2g worst rel=%.3g (bound %.0e)\n",
              label.c_str(), worst_accumulate, kAccumulateBound);
}

void expect_golden_backward_match(const std::string& train_case) {
  const SafetensorsFile golden = open_cuda_golden(train_case);
  Model student = Model::load(cuda_golden_dir(golden.metadata().at("student")));
  expect_backward_match(student, golden_batch(golden), train_case + " (" + golden.metadata().at("student") + ")");
}

// Next-token targets inside each packed sequence; the last token of a sequence predicts nothing (-100).
std::vector<int32_t> next_token_targets(const TokenBatch& b) {
  std::vector<int32_t> t(b.ids.size(), -100);
  for (int64_t s = 0; s < b.num_sequences(); ++s)
    for (int64_t i = b.cu_seqlens[s]; i + 1 < b.cu_seqlens[s + 1]; ++i) t[static_cast<size_t>(i)] = b.ids[i + 1];
  return t;
}

TokenLossCudaResult download_result(CudaContext& ctx, const CudaTensor& device) {
  TokenLossCudaResult r;
  cuda_copy_to_host(ctx, &r, device.raw(), sizeof(r));
  return r;
}

// Loss → d_final_hidden → model backward on both sides, for CE (teacher == nullptr) or forward KL at tau.
void expect_loss_and_grads_match(Model& student, Model* teacher, const TokenBatch& batch, double tau,
                                 const std::string& label) {
  const ModelConfig& c = student.config();
  const int64_t N = batch.total_tokens(), H = c.hidden_size, V = c.vocab_size;
  const LmHeadChunking chunking{.vocab_chunk = 96, .row_block = 16};  // several chunks each way, as the CPU test
  const LmHeadCudaChunking gpu_chunking{.vocab_chunk = 96, .row_block = 16};
  const std::vector<int32_t> targets = next_token_targets(batch);

  // CPU.
  const ForwardTrace trace = model_forward_train(student, batch);
  DecoderWeights cpu_grads = zero_grads_like(c);
  Tensor d_hidden = Tensor::zeros({N, H});
  LmHeadGrad<float> grad{d_hidden.f32(), cpu_grads.lm_head.weight.f32()};
  const LmHead<float> head{student.weights().lm_head.weight.f32(), V, H, c.logits_scaling};
  std::vector<float> cpu_values(static_cast<size_t>(N));
  TokenLossResult cpu_result;
  ForwardTrace teacher_trace;
  if (teacher == nullptr) {
    cpu_result = lm_head_cross_entropy(cpu_values.data(), trace.final_hidden.f32(), N, head, targets.data(),
                                       static_cast<const float*>(nullptr), &grad, chunking);
  } else {
    teacher_trace = model_forward_train(*teacher, batch);
    const LmHead<float> teacher_head{teacher->weights().lm_head.weight.f32(), teacher->config().vocab_size,
                                     teacher->config().hidden_size, teacher->config().logits_scaling};
    cpu_result = lm_head_forward_kl(cpu_values.data(), teacher_trace.final_hidden.f32(), teacher_head,
                                    trace.final_hidden.f32(), head, N, tau, static_cast<const float*>(nullptr), &grad,
                                    chunking);
  }
  model_backward(student, batch, trace, d_hidden, cpu_grads);

  // GPU.
  CudaContext& ctx = cuda_context();
  CudaModel gpu_student = CudaModel::upload(student, ctx);
  CudaModel gpu_grads = CudaModel::zeros_like(c, ctx);
  const CudaTrainTrace gpu_trace = gpu_student.forward_train(batch);
  CudaTensor values = CudaTensor::empty(ctx, {N});
  CudaTensor result = cuda_scratch_bytes(ctx, sizeof(TokenLossCudaResult));
  CudaTensor d_hidden_gpu = CudaTensor::empty(ctx, {N, H});
  const LmHeadGradCuda gpu_grad{d_hidden_gpu.data<float>(), gpu_grads.lm_head_weight()};
  const LmHeadCuda gpu_head{gpu_student.lm_head_weight(), V, H, c.logits_scaling};
  if (teacher == nullptr) {
    Tensor targets_host = Tensor::zeros({N}, DType::I32);
    std::memcpy(targets_host.raw(), targets.data(), targets.size() * sizeof(int32_t));
    const CudaTensor targets_gpu = cuda_upload(ctx, targets_host);
    const size_t bytes = lm_head_cross_entropy_cuda_workspace_bytes(N, V, gpu_chunking);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    lm_head_cross_entropy_cuda(ctx.blaslt(), values.data<float>(), static_cast<TokenLossCudaResult*>(result.raw()),
                               gpu_trace.final_hidden.data<float>(), N, gpu_head, targets_gpu.data<int32_t>(),
                               nullptr, &gpu_grad, gpu_chunking, ws.raw(), bytes, nullptr);
  } else {
    CudaModel gpu_teacher = CudaModel::upload(*teacher, ctx);
    const CudaTrainTrace teacher_gpu_trace = gpu_teacher.forward_train(batch);
    const LmHeadCuda teacher_head{gpu_teacher.lm_head_weight(), teacher->config().vocab_size,
                                  teacher->config().hidden_size, teacher->config().logits_scaling};
    const size_t bytes = lm_head_forward_kl_cuda_workspace_bytes(N, V, gpu_chunking);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    lm_head_forward_kl_cuda(ctx.blaslt(), values.data<float>(), static_cast<TokenLossCudaResult*>(result.raw()),
                            teacher_gpu_trace.final_hidden.data<float>(), teacher_head,
                            gpu_trace.final_hidden.data<float>(), gpu_head, N, tau, nullptr, &gpu_grad, gpu_chunking,
                            ws.raw(), bytes);
  }
  gpu_student.backward(gpu_trace, d_hidden_gpu.data<float>(), gpu_grads);
  const TokenLossCudaResult gpu_result = download_result(ctx, result);
  const Tensor gpu_values = cuda_download(ctx, values);

  const double loss_rel = std::abs(gpu_result.loss - cpu_result.loss) / std::abs(cpu_result.loss);
  EXPECT_LE(loss_rel, kRelBound) << label << " loss " << gpu_result.loss << " vs " << cpu_result.loss;
  EXPECT_EQ(gpu_result.count, cpu_result.count) << label;
  const double values_rel = relative_max_diff(host_tensor(cpu_values, {N}), gpu_values);
  EXPECT_LE(values_rel, kRelBound) << label << " per-token values";
  const double d_hidden_rel = relative_max_diff(d_hidden, cuda_download(ctx, d_hidden_gpu));
  EXPECT_LE(d_hidden_rel, kRelBound) << label << " d_final_hidden";
  std::printf("[check] cuda_train %s: loss %.8f vs cpu %.8f (rel %.3g), per-token rel=%.3g, d_hidden rel=%.3g\n",
              label.c_str(), gpu_result.loss, cpu_result.loss, loss_rel, values_rel, d_hidden_rel);
  DecoderWeights gpu_host = download_grads(gpu_grads);
  expect_grads_match(student, cpu_grads, gpu_host, label + " (loss + backward)");
}

}  // namespace

TEST(CudaModelBackward, Qwen3UntiedBiases) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_backward_match("train_ce_qwen3_untied");
}

TEST(CudaModelBackward, GraniteMultipliers) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_backward_match("train_ce_granite");
}

TEST(CudaModelBackward, OlmoHybridPostNormAndGdn) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_backward_match("train_ce_olmo_hybrid");
}

TEST(CudaModelBackward, Qwen3TiedHead) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_backward_match("train_kl_qwen3_tied");
}

TEST(CudaModelBackward, ConvertedQwen3HybridStudent) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = Model::load(cuda_golden_dir("qwen3_untied"));
  // Layer 1 keeps attention, layers 0 and 2 become GDN; neg_eigval exercises β = 2σ(b).
  Model student = convert_to_hybrid(teacher, {1}, {.neg_eigval = true, .seed = 3});
  expect_backward_match(student, odd_length_batch(student.config().vocab_size), "qwen3_hybrid student");
}

TEST(CudaLmHeadLossTraining, CrossEntropyQwen3Untied) {
  HLM_REQUIRE_CUDA_MODEL();
  const SafetensorsFile golden = open_cuda_golden("train_ce_qwen3_untied");
  Model student = Model::load(cuda_golden_dir(golden.metadata().at("student")));
  expect_loss_and_grads_match(student, nullptr, golden_batch(golden), 1.0, "CE qwen3_untied");
}

TEST(CudaLmHeadLossTraining, ForwardKlTau2IntoTiedHead) {
  HLM_REQUIRE_CUDA_MODEL();
  const SafetensorsFile golden = open_cuda_golden("train_kl_qwen3_tied");
  Model student = Model::load(cuda_golden_dir(golden.metadata().at("student")));
  Model teacher = Model::load(cuda_golden_dir(golden.metadata().at("teacher")));
  expect_loss_and_grads_match(student, &teacher, golden_batch(golden), 2.0, "KL tau=2 qwen3_untied -> qwen3_tied");
}

// CudaModel::zeros_like builds its gradient holder without reading host memory (CudaZeroUploadScope: every device
// tensor zero-filled instead of uploaded from unfilled host tensors): every byte of every tensor must be zero, the
// shapes must be zero_grads_like's, a tied head must share the embedding, and an upload after the scope must copy
// again (the scope ends with its object). Models: a tied qwen3, granite (its multipliers) and a
// hybrid with GDN layers. (An MoE model's stacked experts have no per-tensor download, cuda_model_train.cpp, and CUDA
// training refuses MoE, so no MoE holder is built.)
TEST(CudaModelZerosLike, EveryByteZeroAndUploadsCopyAgainAfterIt) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext& ctx = cuda_context();
  for (const char* name : {"qwen3_tied", "granite", "olmo_hybrid_tiny"}) {
    Model m = Model::load(cuda_golden_dir(name));
    const ModelConfig& c = m.config();
    CudaModel zeros = CudaModel::zeros_like(c, ctx);
    DecoderWeights host = zero_grads_like(c);
    // Poison the host copy first, so that a download that skipped a tensor shows.
    for (const NamedParameter& p : named_parameters(c, host, host))
      std::fill(p.value.f32(), p.value.f32() + p.value.numel(), 7.0f);
    zeros.download_into(host);
    size_t tensors = 0, nonzero = 0;
    for (const NamedParameter& p : named_parameters(c, host, host)) {
      ++tensors;
      for (int64_t i = 0; i < p.value.numel(); ++i) nonzero += p.value.f32()[i] != 0.0f ? 1 : 0;
    }
    EXPECT_EQ(nonzero, 0u) << name << ": zeros_like left nonzero elements";
    if (c.tie_word_embeddings) {
      const CudaModel::NamedTensor* embed = nullptr;
      std::vector<CudaModel::NamedTensor> named = zeros.named_tensors();
      for (const CudaModel::NamedTensor& t : named)
        if (t.name == "model.embed_tokens.weight") embed = &t;
      ASSERT_NE(embed, nullptr) << name;
      EXPECT_EQ(static_cast<const void*>(zeros.lm_head_weight()), embed->tensor->raw()) << name << ": tied head";
    }
    // The scope is over: an upload copies the real weights, byte for byte.
    CudaModel copied = CudaModel::upload(m, ctx);
    DecoderWeights back = zero_grads_like(c);
    copied.download_into(back);
    size_t differing = 0;
    for (const NamedParameter& p : named_parameters(c, m.mutable_weights(), back))
      differing += std::memcmp(p.value.raw(), p.grad.raw(), p.value.nbytes()) != 0 ? 1 : 0;
    EXPECT_EQ(differing, 0u) << name << ": an upload after zeros_like did not copy";
    std::printf("[check] zeros_like %s: %zu tensors, %zu nonzero elements; upload after it: %zu tensors differ\n",
                name, tensors, nonzero, differing);
  }
}
