#include "io/gguf_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "io_test_util.h"

namespace ls {
namespace {

using io_test::GgufBuilder;
using io_test::TempDir;

constexpr int kHidden = 8, kHeads = 2, kKvHeads = 1, kHeadDim = 4, kInter = 16, kVocab = 10;

std::vector<float> iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

// llama.cpp's convert_hf_to_gguf.py permute(): within each head, HF row t*hd/2 + j goes to GGUF
// row 2j + t, i.e. reshape(heads, 2, hd/2, cols).swapaxes(1, 2).
std::vector<float> llama_cpp_permute(const std::vector<float>& hf, int heads, int cols) {
  std::vector<float> out(hf.size());
  const int hd = static_cast<int>(hf.size()) / cols / heads;
  for (int h = 0; h < heads; ++h) {
    for (int t = 0; t < 2; ++t) {
      for (int j = 0; j < hd / 2; ++j) {
        const int src = h * hd + t * (hd / 2) + j;
        const int dst = h * hd + 2 * j + t;
        std::memcpy(&out[static_cast<size_t>(dst * cols)], &hf[static_cast<size_t>(src * cols)],
                    static_cast<size_t>(cols) * 4);
      }
    }
  }
  return out;
}

std::vector<uint8_t> bytes(const std::vector<float>& v) { return GgufBuilder::bytes_of_vec(v); }

// One llama layer in F32, q and k permuted as llama.cpp's converter does.
GgufBuilder tiny_llama(const std::string& arch, bool permute) {
  GgufBuilder b;
  b.kv_str("general.architecture", arch);
  b.kv_u32(arch + ".context_length", 256);
  b.kv_u32(arch + ".embedding_length", kHidden);
  b.kv_u32(arch + ".block_count", 1);
  b.kv_u32(arch + ".feed_forward_length", kInter);
  b.kv_u32(arch + ".attention.head_count", kHeads);
  b.kv_u32(arch + ".attention.head_count_kv", kKvHeads);
  b.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  b.kv_f32(arch + ".rope.freq_base", 5e5f);
  b.kv_u32(arch + ".rope.dimension_count", kHeadDim);
  b.kv_u32("tokenizer.ggml.bos_token_id", 1);
  b.kv_u32("tokenizer.ggml.eos_token_id", 2);
  b.kv_u32("tokenizer.ggml.eot_token_id", 3);
  const auto q = iota(kHeads * kHeadDim * kHidden, 0);
  const auto k = iota(kKvHeads * kHeadDim * kHidden, 1000);
  b.tensor("token_embd.weight", {kHidden, kVocab}, 0, bytes(iota(kHidden * kVocab, -5)));
  b.tensor("output_norm.weight", {kHidden}, 0, bytes(iota(kHidden, 1)));
  b.tensor("blk.0.attn_norm.weight", {kHidden}, 0, bytes(iota(kHidden, 2)));
  b.tensor("blk.0.ffn_norm.weight", {kHidden}, 0, bytes(iota(kHidden, 3)));
  b.tensor("blk.0.attn_q.weight", {kHidden, kHeads * kHeadDim}, 0,
           bytes(permute ? llama_cpp_permute(q, kHeads, kHidden) : q));
  b.tensor("blk.0.attn_k.weight", {kHidden, kKvHeads * kHeadDim}, 0,
           bytes(permute ? llama_cpp_permute(k, kKvHeads, kHidden) : k));
  b.tensor("blk.0.attn_v.weight", {kHidden, kKvHeads * kHeadDim}, 0,
           bytes(iota(kKvHeads * kHeadDim * kHidden, 2000)));
  b.tensor("blk.0.attn_output.weight", {kHeads * kHeadDim, kHidden}, 0,
           bytes(iota(kHeads * kHeadDim * kHidden, 3000)));
  b.tensor("blk.0.ffn_gate.weight", {kHidden, kInter}, 0, bytes(iota(kHidden * kInter, 4000)));
  b.tensor("blk.0.ffn_up.weight", {kHidden, kInter}, 0, bytes(iota(kHidden * kInter, 5000)));
  b.tensor("blk.0.ffn_down.weight", {kInter, kHidden}, 0, bytes(iota(kHidden * kInter, 6000)));
  return b;
}

std::vector<float> read_f32(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.nbytes / 4));
  std::memcpy(v.data(), t.data, static_cast<size_t>(t.nbytes));
  return v;
}

TEST(GgufModel, ConfigFromMetadata) {
  auto f = GgufFile::from_memory("tiny.gguf", tiny_llama("llama", true).build());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto c = gguf_model_config(**f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture(), "LlamaForCausalLM");
  EXPECT_EQ(c->hidden_size(), kHidden);
  EXPECT_EQ(c->intermediate_size(), kInter);
  EXPECT_EQ(c->num_hidden_layers(), 1);
  EXPECT_EQ(c->num_attention_heads(), kHeads);
  EXPECT_EQ(c->num_key_value_heads(), kKvHeads);
  EXPECT_EQ(c->head_dim(), kHeadDim);
  EXPECT_EQ(c->vocab_size(), kVocab);
  EXPECT_EQ(c->max_position_embeddings(), 256);
  EXPECT_FLOAT_EQ(static_cast<float>(c->rms_norm_eps()), 1e-6f);
  EXPECT_FLOAT_EQ(static_cast<float>(c->rope().theta), 5e5f);
  EXPECT_TRUE(c->tie_word_embeddings());  // no output.weight
  EXPECT_EQ(c->attention_bias(), false);
  EXPECT_EQ(c->bos_token_id(), 1);
  EXPECT_EQ(c->eos_token_ids(), (std::vector<int64_t>{2}));
  EXPECT_EQ(c->source(), "tiny.gguf");
  auto g = gguf_generation_config(**f);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{2, 3}));
}

TEST(GgufModel, MissingOrUnsupportedMetadata) {
  auto b = tiny_llama("gemma", false);
  auto f = GgufFile::from_memory("g.gguf", b.build());
  ASSERT_TRUE(f.ok());
  auto c = gguf_model_config(**f);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("\"gemma\""), std::string::npos);

  GgufBuilder partial;
  partial.kv_str("general.architecture", "llama");
  partial.kv_u32("llama.embedding_length", 8);
  auto p = GgufFile::from_memory("p.gguf", partial.build());
  ASSERT_TRUE(p.ok());
  auto pc = gguf_model_config(**p);
  ASSERT_FALSE(pc.ok());
  EXPECT_NE(pc.status().message().find("p.gguf"), std::string::npos);
  EXPECT_NE(pc.status().message().find("llama.attention.head_count"), std::string::npos);
}

TEST(GgufModel, LlamaQkPermutationUndone) {
  auto f = GgufFile::from_memory("tiny.gguf", tiny_llama("llama", true).build());
  ASSERT_TRUE(f.ok());
  auto c = gguf_model_config(**f);
  ASSERT_TRUE(c.ok());
  auto ckpt = gguf_checkpoint(**f, *c, DType::kF32);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const TensorInfo* q = ckpt->find("model.layers.0.self_attn.q_proj.weight");
  const TensorInfo* k = ckpt->find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(q, nullptr);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{kHeads * kHeadDim, kHidden}));
  EXPECT_EQ(read_f32(*q), iota(kHeads * kHeadDim * kHidden, 0));
  EXPECT_EQ(read_f32(*k), iota(kKvHeads * kHeadDim * kHidden, 1000));
  // Everything else is passed through, renamed.
  const TensorInfo* e = ckpt->find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{kVocab, kHidden}));
  EXPECT_EQ(read_f32(*e), iota(kHidden * kVocab, -5));
  EXPECT_EQ(read_f32(*ckpt->find("model.layers.0.mlp.down_proj.weight")),
            iota(kHidden * kInter, 6000));
  EXPECT_EQ(read_f32(*ckpt->find("model.layers.0.post_attention_layernorm.weight")),
            iota(kHidden, 3));
}

TEST(GgufModel, Qwen2IsNotPermutedAndBf16Storage) {
  auto f = GgufFile::from_memory("q.gguf", tiny_llama("qwen2", false).build());
  ASSERT_TRUE(f.ok());
  auto c = gguf_model_config(**f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture(), "Qwen2ForCausalLM");
  auto ckpt = gguf_checkpoint(**f, *c, DType::kBF16);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const TensorInfo* q = ckpt->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_EQ(q->dtype, DType::kBF16);
  std::vector<uint16_t> raw(static_cast<size_t>(q->nbytes / 2));
  std::memcpy(raw.data(), q->data, static_cast<size_t>(q->nbytes));
  const auto want = iota(kHeads * kHeadDim * kHidden, 0);
  for (size_t i = 0; i < raw.size(); ++i) EXPECT_EQ(bf16_to_f32(raw[i]), want[i]) << i;
  // Norms stay f32.
  EXPECT_EQ(ckpt->find("model.norm.weight")->dtype, DType::kF32);
}

TEST(GgufModel, WrongQShapeNamesTheTensor) {
  GgufBuilder b = tiny_llama("llama", false);
  b.kv_u32("llama.attention.key_length", 8);  // claims heads of 8: q would need 16 rows
  b.kv_u32("llama.attention.value_length", 8);
  auto f = GgufFile::from_memory("bad.gguf", b.build());
  ASSERT_TRUE(f.ok());
  auto c = gguf_model_config(**f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto ckpt = gguf_checkpoint(**f, *c, DType::kF32);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("blk.0.attn_q.weight"), std::string::npos);
}

TEST(GgufModel, UnknownTensorKeepsItsName) {
  GgufBuilder b = tiny_llama("llama", false);
  b.tensor("blk.0.mystery.weight", {4}, 0, bytes(iota(4, 0)));
  auto f = GgufFile::from_memory("m.gguf", b.build());
  ASSERT_TRUE(f.ok());
  auto c = gguf_model_config(**f);
  ASSERT_TRUE(c.ok());
  auto ckpt = gguf_checkpoint(**f, *c, DType::kF32);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_NE(ckpt->find("blk.0.mystery.weight"), nullptr);
}

TEST(GgufModel, NamesThatAreNotUtf8AreErrors) {
  // Found by fuzz_gguf: the names go into the in-memory checkpoint's JSON header.
  GgufBuilder b = tiny_llama("llama", false);
  b.tensor("blk.0.\xc3", {4}, 0, bytes(iota(4, 0)));
  auto f = GgufFile::from_memory("u.gguf", b.build());
  ASSERT_TRUE(f.ok());
  auto c = gguf_model_config(**f);
  ASSERT_TRUE(c.ok());
  auto ckpt = gguf_checkpoint(**f, *c, DType::kF32);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("UTF-8"), std::string::npos);

  GgufBuilder bad_type = tiny_llama("llama", false);
  bad_type.kv_str("llama.rope.scaling.type", "\xff");
  auto g = GgufFile::from_memory("v.gguf", bad_type.build());
  ASSERT_TRUE(g.ok());
  auto gc = gguf_model_config(**g);
  ASSERT_FALSE(gc.ok());
  EXPECT_NE(gc.status().message().find("v.gguf"), std::string::npos);
}

TEST(GgufModel, FindGgufModel) {
  TempDir dir;
  const auto bytes = tiny_llama("llama", true).build();
  // Not a GGUF model: nothing there, or a Hugging Face directory.
  EXPECT_FALSE(find_gguf_model(dir / "absent")->has_value());
  EXPECT_FALSE(find_gguf_model(dir.path())->has_value());
  io_test::write_bytes(dir / "a.gguf", bytes);
  // A directory holding one GGUF, or the file itself.
  EXPECT_EQ(**find_gguf_model(dir.path()), dir / "a.gguf");
  EXPECT_EQ(**find_gguf_model(dir / "a.gguf"), dir / "a.gguf");
  // A config.json makes it a Hugging Face directory again.
  io_test::write_text(dir / "config.json", "{}");
  EXPECT_FALSE(find_gguf_model(dir.path())->has_value());
  std::filesystem::remove(dir / "config.json");
  // Two GGUFs: ambiguous.
  io_test::write_bytes(dir / "b.gguf", bytes);
  auto two = find_gguf_model(dir.path());
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("a.gguf, b.gguf"), std::string::npos);
  // A .gguf that is not one.
  io_test::write_text(dir / "c.gguf", "nope");
  EXPECT_FALSE(find_gguf_model(dir / "c.gguf").ok());
  // load_model_config and load_generation_config follow the GGUF.
  auto c = load_model_config(dir / "a.gguf");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->hidden_size(), kHidden);
  auto g = load_generation_config(dir / "a.gguf");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->bos_token_id, 1);
}

}  // namespace
}  // namespace ls
