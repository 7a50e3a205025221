// OLMo-Hybrid GDN conv weights in both checkpoint layouts (families.md §7): q/k/v_conv1d cut at [Dk, Dk, Dv] (the Hub
// converter, FLA, our writer) and cut into three EQUAL torch.chunk pieces of the fused [2Dk + Dv] conv (what
// transformers 5.x save_pretrained writes). With d_v = 2·d_k (the real model's shape) the two differ; both must load
// into the same weights, so the forward is bit-identical. A cut that does not add up to the fused conv is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "models/checkpoint.h"
#include "models/model.h"
#include "support/run_binary.h"

using namespace hlm;

namespace {

// d_v = 2·d_k as in OLMo-Hybrid's config class default; 3 GDN layers + 1 attention layer (the class's pattern).
nlohmann::json dv2_config() {
  return {{"model_type", "olmo_hybrid"},     {"vocab_size", 96},           {"hidden_size", 32},
          {"intermediate_size", 64},         {"num_hidden_layers", 4},     {"num_attention_heads", 4},
          {"num_key_value_heads", 2},        {"linear_num_key_heads", 2},  {"linear_num_value_heads", 2},
          {"linear_key_head_dim", 8},        {"linear_value_head_dim", 16}};
}

// torch.chunk(x, 3, dim=0) row counts: pieces of ceil(C/3), the last one shorter.
std::vector<int64_t> torch_chunk3_rows(int64_t C) {
  const int64_t piece = (C + 2) / 3;
  return {piece, piece, C - 2 * piece};
}

// Rows [begin, begin + n) of a [C, 1, K] tensor.
Tensor rows_of(const Tensor& t, int64_t begin, int64_t n) {
  const int64_t row = t.numel() / t.dim(0);
  Tensor out = Tensor::zeros({n, t.dim(1), t.dim(2)});
  std::copy_n(t.f32() + begin * row, n * row, out.f32());
  return out;
}

// Copies `from` into `to`, re-cutting each GDN layer's [q | k | v] conv into pieces of `rows` (HF names kept).
void write_recut(const std::filesystem::path& from, const std::filesystem::path& to, const ModelConfig& c,
                 const std::vector<int64_t>& rows) {
  const Checkpoint ck = Checkpoint::open(from);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : ck.names())
    if (name.find("_conv1d.weight") == std::string::npos) tensors.emplace_back(name, ck.tensor_f32(name));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    if (c.layer_kinds[static_cast<size_t>(i)] != LayerKind::LinearAttention) continue;
    const std::string prefix = "model.layers." + std::to_string(i) + ".linear_attn.";
    std::vector<float> fused;
    int64_t C = 0, K = 0;
    for (const char* part : {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}) {
      const Tensor t = ck.tensor_f32(prefix + part);
      fused.insert(fused.end(), t.f32(), t.f32() + t.numel());
      C += t.dim(0);
      K = t.dim(2);
    }
    Tensor all = Tensor::zeros({C, 1, K});
    std::copy(fused.begin(), fused.end(), all.f32());
    int64_t begin = 0;
    const char* names[] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
    for (size_t p = 0; p < 3; ++p) {
      tensors.emplace_back(prefix + names[p], rows_of(all, begin, rows[p]));
      begin += rows[p];
    }
  }
  checkpoint_write(to, tensors);
  std::filesystem::copy_file(from / "config.json", to / "config.json");
}

TokenBatch batch() {
  TokenBatch b;
  b.add_sequence({5, 17, 90, 3, 44, 42, 7, 8, 61});
  b.add_sequence({1, 2, 3, 4, 5, 6});
  return b;
}

}  // namespace

TEST(OlmoHybridConvLayout, EqualThirdsAsTransformersSavesLoadLikeExactCut) {
  const ModelConfig c = parse_model_config(dv2_config(), "test");
  ASSERT_EQ(c.linear->value_head_dim, 2 * c.linear->key_head_dim);
  const int64_t Dk = c.linear->num_key_heads * c.linear->key_head_dim;
  const int64_t Dv = c.linear->num_value_heads * c.linear->value_head_dim;
  const std::vector<int64_t> thirds = torch_chunk3_rows(2 * Dk + Dv);
  ASSERT_NE(thirds[0], Dk) << "the test needs a cut that differs from [Dk, Dk, Dv]";

  test::ScratchDir scratch("olmo-conv");
  const auto exact_dir = scratch.path() / "exact", hf_dir = scratch.path() / "hf";
  Model created = Model::create(c, 11);
  created.save(exact_dir);
  write_recut(exact_dir, hf_dir, c, thirds);
  {  // the HF-layout file really holds the equal pieces
    const Checkpoint hf = Checkpoint::open(hf_dir);
    EXPECT_EQ(hf.find("model.layers.0.linear_attn.q_conv1d.weight")->shape, (Shape{thirds[0], 1, 4}));
    EXPECT_EQ(hf.find("model.layers.0.linear_attn.v_conv1d.weight")->shape, (Shape{thirds[2], 1, 4}));
  }

  Model exact = Model::load(exact_dir);
  Model hf = Model::load(hf_dir);
  EXPECT_TRUE(hf.unused_tensors().empty());
  for (int i = 0; i < 3; ++i) {  // the GDN layers' conv weights are the created ones, element for element
    const GdnWeights& a = created.weights().layers[static_cast<size_t>(i)].linear_attn;
    const GdnWeights& b = hf.weights().layers[static_cast<size_t>(i)].linear_attn;
    const std::pair<const Tensor*, const Tensor*> convs[] = {
        {&a.q_conv, &b.q_conv}, {&a.k_conv, &b.k_conv}, {&a.v_conv, &b.v_conv}};
    for (const auto& [x, y] : convs) {
      ASSERT_EQ(x->shape(), y->shape());
      for (int64_t j = 0; j < x->numel(); ++j) ASSERT_EQ(x->f32()[j], y->f32()[j]) << "layer " << i << " at " << j;
    }
  }
  // `inspect` lists the stored pieces and says they were re-cut.
  const auto inspect = test::run_hybridlm("inspect " + hf_dir.string() + " --json");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  bool listed = false;
  const nlohmann::json report = nlohmann::json::parse(inspect.out);
  for (const auto& t : report["tensors"])
    if (t["name"] == "model.layers.0.linear_attn.q_conv1d.weight") {
      EXPECT_EQ(t["shape"], nlohmann::json({thirds[0], 1, 4}));
      EXPECT_EQ(t["recut_from"].size(), 3u);
      listed = true;
    }
  EXPECT_TRUE(listed) << inspect.out;
  const Tensor la = exact.forward(batch(), {.all_logits = true});
  const Tensor lb = hf.forward(batch(), {.all_logits = true});
  ASSERT_EQ(la.numel(), lb.numel());
  for (int64_t j = 0; j < la.numel(); ++j) ASSERT_EQ(la.f32()[j], lb.f32()[j]) << j;
}

TEST(OlmoHybridConvLayout, CutThatDoesNotAddUpIsRefusedNamingTheTensor) {
  const ModelConfig c = parse_model_config(dv2_config(), "test");
  const int64_t Dk = c.linear->num_key_heads * c.linear->key_head_dim;
  const int64_t Dv = c.linear->num_value_heads * c.linear->value_head_dim;
  test::ScratchDir scratch("olmo-conv-bad");
  Model::create(c, 3).save(scratch.path() / "exact");
  write_recut(scratch.path() / "exact", scratch.path() / "bad", c, {Dk, Dk, Dv - 1});  // one v row lost
  try {
    Model::load(scratch.path() / "bad");
    FAIL() << "a conv cut one row short loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("v_conv1d.weight"), std::string::npos) << e.what();
  }
}
