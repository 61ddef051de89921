#include "io/gguf_convert.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/log.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"
#include "io/gguf_quantize.h"
#include "io/gguf_tokenizer.h"
#include "io/gguf_writer.h"
#include "io/model_config.h"

namespace ls {
namespace {

struct Arch {
  std::string_view hf;
  std::string_view gguf;
  bool permute_qk;
};
constexpr Arch kArchs[] = {{"LlamaForCausalLM", "llama", true},
                           {"MistralForCausalLM", "llama", true},
                           {"Qwen2ForCausalLM", "qwen2", false},
                           {"Qwen3ForCausalLM", "qwen3", false}};

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The GGUF name of a Hugging Face tensor name; empty for one the converter drops.
std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string pre = "model.layers.";
  if (hf.rfind(pre, 0) != 0) return {};
  const size_t dot = hf.find('.', pre.size());
  const std::string layer = hf.substr(pre.size(), dot - pre.size());
  const std::string rest = hf.substr(dot + 1);
  static const std::pair<const char*, const char*> kMap[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate_proj.bias", "ffn_gate.bias"},
      {"mlp.up_proj.bias", "ffn_up.bias"},
      {"mlp.down_proj.bias", "ffn_down.bias"},
  };
  for (const auto& [h, g] : kMap) {
    if (rest == h) return "blk." + layer + "." + g;
  }
  return {};
}

GgmlType fallback(GgmlType t) {
  if (t == GgmlType::kQ4_K) return GgmlType::kQ4_1;
  if (t == GgmlType::kQ6_K) return GgmlType::kQ8_0;
  return t;
}

}  // namespace

Result<GgmlType> parse_quant_type(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "q8_0") return GgmlType::kQ8_0;
  if (n == "q4_0") return GgmlType::kQ4_0;
  if (n == "q4_1") return GgmlType::kQ4_1;
  if (n == "q4_k") return GgmlType::kQ4_K;
  if (n == "q6_k") return GgmlType::kQ6_K;
  return invalid_argument("unknown quantization type '{}' (q8_0, q4_0, q4_1, q4_k, q6_k)", name);
}

Result<int64_t> convert_to_gguf(const std::filesystem::path& dir, const std::filesystem::path& out,
                                GgmlType type) {
  if (!ggml_type_quantizable(type)) {
    return invalid_argument("cannot quantize to {}", ggml_type_name(type));
  }
  LS_ASSIGN_OR_RETURN(ModelConfig c, load_model_config(dir));
  const Arch* arch = nullptr;
  for (const Arch& a : kArchs) {
    if (a.hf == c.architecture()) arch = &a;
  }
  if (arch == nullptr) {
    return unimplemented("{}: architecture '{}' cannot be converted to GGUF (Llama, Mistral, "
                         "Qwen2, Qwen3)", dir.string(), c.architecture());
  }
  const RopeConfig& rope = c.rope();
  if ((rope.type != RopeType::kDefault && rope.type != RopeType::kLinear &&
       rope.type != RopeType::kYarn) ||
      rope.partial_rotary_factor != 1.0) {
    return unimplemented("{}: RoPE scaling '{}' is not written to GGUF by this converter "
                         "(default, linear and yarn are)",
                         dir.string(), rope_type_name(rope.type));
  }
  LS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  LS_ASSIGN_OR_RETURN(GenerationConfig gen, load_generation_config(dir));

  GgufWriter w;
  const std::string a(arch->gguf);
  w.add_string("general.architecture", a);
  w.add_string("general.name", dir.filename().string());
  w.add_u32("general.file_type", static_cast<uint32_t>(type == GgmlType::kQ8_0   ? 7
                                                       : type == GgmlType::kQ4_0 ? 2
                                                       : type == GgmlType::kQ4_1 ? 3
                                                       : type == GgmlType::kQ4_K ? 15
                                                                                 : 18));
  w.add_u32(a + ".context_length", static_cast<uint32_t>(c.max_position_embeddings()));
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(c.hidden_size()));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(c.intermediate_size()));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(c.num_hidden_layers()));
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(c.num_attention_heads()));
  w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads()));
  w.add_u32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim()));
  w.add_u32(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim()));
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps()));
  w.add_f32(a + ".rope.freq_base", static_cast<float>(c.rope().theta));
  w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(c.rotary_dim()));
  w.add_u32(a + ".vocab_size", static_cast<uint32_t>(c.vocab_size()));
  if (rope.type != RopeType::kDefault) {
    w.add_string(a + ".rope.scaling.type", std::string(rope_type_name(rope.type)));
    w.add_f32(a + ".rope.scaling.factor", static_cast<float>(rope.factor));
    if (rope.type == RopeType::kYarn) {
      w.add_u32(a + ".rope.scaling.original_context_length",
                static_cast<uint32_t>(rope.original_max_position_embeddings > 0
                                          ? rope.original_max_position_embeddings
                                          : c.max_position_embeddings()));
    }
  }
  if (c.sliding_window()) {
    w.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(*c.sliding_window()));
  }
  const std::string tok = read_text(dir / "tokenizer.json");
  if (!tok.empty()) {
    std::optional<int64_t> bos = gen.bos_token_id ? gen.bos_token_id : c.bos_token_id();
    std::vector<int64_t> eos = !gen.eos_token_ids.empty() ? gen.eos_token_ids : c.eos_token_ids();
    Status s = write_gguf_tokenizer(tok, read_text(dir / "tokenizer_config.json"), bos, eos, w);
    if (s.code() == StatusCode::kUnimplemented) {
      // The weights are still useful (benchmarks, --model with a separate tokenizer).
      LS_LOG_WARN("{}: the tokenizer is not written to the GGUF file: {}", dir.string(),
                  s.message());
    } else if (!s.ok()) {
      return Status(s.code(), fmt::format("{}: {}", dir.string(), s.message()));
    }
  }

  int64_t fallbacks = 0;
  // convert_hf_to_gguf.py's order: embeddings, then each layer, then the final norm and output.
  std::vector<std::string> names = ckpt.names();
  auto rank = [&](const std::string& n) -> std::pair<int64_t, std::string> {
    if (n == "model.embed_tokens.weight") return {-1, n};
    if (n.rfind("model.layers.", 0) == 0) {
      return {std::stoll(n.substr(13, n.find('.', 13) - 13)), n};
    }
    return {1 << 30, n};
  };
  std::sort(names.begin(), names.end(),
            [&](const std::string& x, const std::string& y) { return rank(x) < rank(y); });
  std::vector<float> f32;
  for (const std::string& name : names) {
    const std::string g = gguf_name(name);
    if (g.empty()) continue;  // rotary_emb.inv_freq and the like
    LS_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.get(name));
    if (!t->dtype || (*t->dtype != DType::kF32 && *t->dtype != DType::kF16 && *t->dtype != DType::kBF16)) {
      return invalid_argument("{} in {}: not a float tensor", name, t->file);
    }
    int64_t numel = 1;
    for (int64_t d : t->shape) numel *= d;
    f32.resize(static_cast<size_t>(numel));
    std::vector<uint8_t> raw(static_cast<size_t>(t->nbytes));
    std::memcpy(raw.data(), t->data, raw.size());
    convert_to_f32(*t->dtype, raw.data(), f32.data(), numel);
    const bool is_q = name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias");
    const bool is_k = name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias");
    if (arch->permute_qk && (is_q || is_k)) {
      // GGUF row h*hd + 2j + s holds Hugging Face row h*hd + s*hd/2 + j.
      const int64_t hd = c.head_dim();
      const int64_t rows = t->shape[0];
      const int64_t cols = t->shape.size() == 2 ? t->shape[1] : 1;
      std::vector<float> p(f32.size());
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = r / hd, i = r % hd;
        const int64_t src = h * hd + (i % 2) * (hd / 2) + i / 2;
        std::memcpy(p.data() + r * cols, f32.data() + src * cols, static_cast<size_t>(cols) * 4);
      }
      f32.swap(p);
    }
    if (t->shape.size() == 2) {
      GgmlType tt = type;
      if (t->shape[1] % *ggml_block_elems(tt) != 0) {
        tt = fallback(tt);
        ++fallbacks;
      }
      if (t->shape[1] % *ggml_block_elems(tt) != 0) {
        return invalid_argument("{}: rows of {} are not a whole number of {} blocks", name,
                                t->shape[1], ggml_type_name(tt));
      }
      std::vector<uint8_t> q(static_cast<size_t>(numel / *ggml_block_elems(tt) *
                                                 *ggml_block_bytes(tt)));
      LS_RETURN_IF_ERROR(quantize_row(tt, f32.data(), numel, q.data()));
      LS_RETURN_IF_ERROR(w.add_tensor(g, tt, t->shape, std::move(q)));
    } else {
      std::vector<uint8_t> bytes(f32.size() * 4);
      std::memcpy(bytes.data(), f32.data(), bytes.size());
      LS_RETURN_IF_ERROR(w.add_tensor(g, GgmlType::kF32, t->shape, std::move(bytes)));
    }
  }
  LS_RETURN_IF_ERROR(w.write(out));
  return fallbacks;
}

}  // namespace ls
