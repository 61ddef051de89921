#include "io/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf_dequant.h"
#include "io/json_util.h"

namespace ls {
namespace {

using io_json::Json;

struct ArchEntry {
  std::string_view gguf;  // general.architecture
  std::string_view hf;    // config.json architectures[0]
  bool permuted_qk;       // llama.cpp's converter permuted q/k rows for its interleaved RoPE
};

constexpr ArchEntry kArchitectures[] = {
    {"llama", "LlamaForCausalLM", true},
    {"mistral", "MistralForCausalLM", true},
    {"qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "Qwen3ForCausalLM", false},
};

const ArchEntry* find_arch(std::string_view gguf) {
  for (const ArchEntry& a : kArchitectures) {
    if (a.gguf == gguf) return &a;
  }
  return nullptr;
}

Result<const ArchEntry*> arch_of(const GgufFile& file) {
  LS_ASSIGN_OR_RETURN(std::string arch, file.get_string("general.architecture"));
  const ArchEntry* a = find_arch(arch);
  if (a == nullptr) {
    std::vector<std::string_view> names;
    for (const ArchEntry& e : kArchitectures) names.push_back(e.gguf);
    return unimplemented("{}: GGUF architecture \"{}\" is not supported (supported: {})",
                         file.name(), arch, fmt::join(names, ", "));
  }
  return a;
}

// GGUF name -> Hugging Face name (blk.N.* -> model.layers.N.*); nullopt for names it does not
// know, which then keep their GGUF name.
std::optional<std::string> hf_name(const std::string& name) {
  static const std::pair<std::string_view, std::string_view> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  for (const auto& [g, h] : kTop) {
    if (name == g) return std::string(h);
  }
  static const std::pair<std::string_view, std::string_view> kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate.bias", "mlp.gate_proj.bias"},
      {"ffn_up.bias", "mlp.up_proj.bias"},
      {"ffn_down.bias", "mlp.down_proj.bias"},
  };
  constexpr std::string_view kBlk = "blk.";
  if (name.compare(0, kBlk.size(), kBlk) != 0) return std::nullopt;
  const size_t dot = name.find('.', kBlk.size());
  if (dot == std::string::npos || dot == kBlk.size() || dot - kBlk.size() > 6) return std::nullopt;
  const std::string_view layer(name.data() + kBlk.size(), dot - kBlk.size());
  if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  if (layer.size() > 1 && layer[0] == '0') return std::nullopt;  // "blk.01" is not layer 1
  const std::string_view rest(name.data() + dot + 1, name.size() - dot - 1);
  for (const auto& [g, h] : kLayer) {
    if (rest == g) return fmt::format("model.layers.{}.{}", layer, h);
  }
  return std::nullopt;
}

}  // namespace

Result<std::optional<std::filesystem::path>> find_gguf_model(const std::filesystem::path& model) {
  using std::filesystem::path;
  std::error_code ec;
  if (std::filesystem::is_regular_file(model, ec)) {
    std::ifstream in(model, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
      return std::optional<path>(model);
    }
    if (model.extension() == ".gguf") {
      return data_loss("{}: not a GGUF file (it does not start with \"GGUF\")", model.string());
    }
    return std::optional<path>();
  }
  if (!std::filesystem::is_directory(model, ec)) return std::optional<path>();
  if (std::filesystem::exists(model / "config.json", ec)) return std::optional<path>();
  std::vector<path> found;
  for (const auto& entry : std::filesystem::directory_iterator(model, ec)) {
    if (entry.path().extension() == ".gguf" && entry.is_regular_file(ec)) {
      found.push_back(entry.path());
    }
  }
  if (found.empty()) return std::optional<path>();
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    std::vector<std::string> names;
    for (const path& p : found) names.push_back(p.filename().string());
    return invalid_argument("{}: holds {} GGUF files ({}); pass one of them as --model",
                            model.string(), found.size(), fmt::join(names, ", "));
  }
  return std::optional<path>(found[0]);
}

Result<ModelConfig> gguf_model_config(const GgufFile& f) {
  LS_ASSIGN_OR_RETURN(const ArchEntry* arch, arch_of(f));
  const std::string a(arch->gguf);
  auto key = [&](std::string_view k) { return fmt::format("{}.{}", a, k); };
  try {
    Json c = Json::object();
    c["architectures"] = Json::array({std::string(arch->hf)});
    c["model_type"] = a;
    LS_ASSIGN_OR_RETURN(int64_t hidden, f.get_int(key("embedding_length")));
    LS_ASSIGN_OR_RETURN(int64_t heads, f.get_int(key("attention.head_count")));
    c["hidden_size"] = hidden;
    c["num_attention_heads"] = heads;
    LS_ASSIGN_OR_RETURN(c["intermediate_size"], f.get_int(key("feed_forward_length")));
    LS_ASSIGN_OR_RETURN(c["num_hidden_layers"], f.get_int(key("block_count")));
    LS_ASSIGN_OR_RETURN(c["max_position_embeddings"], f.get_int(key("context_length")));
    LS_ASSIGN_OR_RETURN(c["rms_norm_eps"], f.get_float(key("attention.layer_norm_rms_epsilon")));
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads, f.opt_int(key("attention.head_count_kv")));
    if (kv_heads) c["num_key_value_heads"] = *kv_heads;
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, f.opt_int(key("attention.key_length")));
    if (head_dim) c["head_dim"] = *head_dim;
    LS_ASSIGN_OR_RETURN(std::optional<double> theta, f.opt_float(key("rope.freq_base")));
    if (theta) c["rope_theta"] = *theta;
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> rot, f.opt_int(key("rope.dimension_count")));
    const int64_t hd = head_dim ? *head_dim : (heads > 0 ? hidden / heads : 0);
    if (rot && hd > 0 && *rot != hd) c["partial_rotary_factor"] = static_cast<double>(*rot) / hd;
    LS_ASSIGN_OR_RETURN(std::optional<std::string> scaling, f.opt_string(key("rope.scaling.type")));
    if (scaling && *scaling != "none") {
      Json rs = Json::object();
      rs["rope_type"] = *scaling;
      LS_ASSIGN_OR_RETURN(std::optional<double> factor, f.opt_float(key("rope.scaling.factor")));
      if (factor) rs["factor"] = *factor;
      LS_ASSIGN_OR_RETURN(std::optional<int64_t> orig,
                          f.opt_int(key("rope.scaling.original_context_length")));
      if (orig) rs["original_max_position_embeddings"] = *orig;
      c["rope_scaling"] = std::move(rs);
    }
    if (f.find_tensor("rope_freqs.weight") != nullptr) {
      return unimplemented("{}: tensor \"rope_freqs.weight\" (llama3-style RoPE frequency factors) "
                           "is not supported",
                           f.name());
    }
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> window, f.opt_int(key("attention.sliding_window")));
    if (window) c["sliding_window"] = *window;

    const GgufTensor* embd = f.find_tensor("token_embd.weight");
    if (embd == nullptr) {
      return not_found("{}: tensor \"token_embd.weight\" (the embedding table) is missing",
                       f.name());
    }
    if (embd->ne.size() != 2) {
      return data_loss("{}: tensor \"token_embd.weight\" has {} dims, expected 2", f.name(),
                       embd->ne.size());
    }
    c["vocab_size"] = embd->ne[1];
    c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
    if (arch->gguf != "qwen2") c["attention_bias"] = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    if (f.find_tensor("blk.0.ffn_gate.bias") != nullptr) c["mlp_bias"] = true;
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> bos, f.opt_int("tokenizer.ggml.bos_token_id"));
    if (bos) c["bos_token_id"] = *bos;
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> eos, f.opt_int("tokenizer.ggml.eos_token_id"));
    if (eos) c["eos_token_id"] = *eos;
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> pad, f.opt_int("tokenizer.ggml.padding_token_id"));
    if (pad) c["pad_token_id"] = *pad;
    return parse_model_config(c.dump(), f.name());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory", f.name());
  } catch (const Json::exception&) {
    // dump() refuses strings that are not UTF-8 (a metadata value copied into the config).
    return data_loss("{}: a metadata string used for the config is not valid UTF-8", f.name());
  }
}

Result<GenerationConfig> gguf_generation_config(const GgufFile& f) {
  GenerationConfig g;
  LS_ASSIGN_OR_RETURN(g.bos_token_id, f.opt_int("tokenizer.ggml.bos_token_id"));
  LS_ASSIGN_OR_RETURN(g.pad_token_id, f.opt_int("tokenizer.ggml.padding_token_id"));
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> id, f.opt_int(k));
    if (id && std::find(g.eos_token_ids.begin(), g.eos_token_ids.end(), *id) ==
                  g.eos_token_ids.end()) {
      g.eos_token_ids.push_back(*id);
    }
  }
  return g;
}

namespace {

bool is_linear_weight(std::string_view hf) {
  for (std::string_view s : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                             "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                             "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
    if (hf.ends_with(s)) return true;
  }
  return hf == "lm_head.weight";
}

Result<Checkpoint> gguf_checkpoint_impl(const GgufFile& f, const ModelConfig& config, DType dtype,
                                        const std::vector<GgmlType>& keep_quantized,
                                        const std::shared_ptr<const GgufFile>& owner) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return invalid_argument("{}: GGUF tensors dequantize to f32 or bf16, not {}", f.name(),
                            dtype_name(dtype));
  }
  LS_ASSIGN_OR_RETURN(const ArchEntry* arch, arch_of(f));
  struct Planned {
    const GgufTensor* t;
    std::string name;
    DType dtype;
    int64_t permute_heads;  // 0: rows stay in order
    int64_t offset;
    int64_t nbytes;
  };
  try {
    std::vector<Planned> plan;
    std::vector<QuantizedTensorInfo> quantized;
    std::vector<std::shared_ptr<const void>> holds;
    int64_t offset = 0;
    Json header = Json::object();
    for (const GgufTensor& t : f.tensors()) {
      if (!ggml_type_dequantizable(t.type)) {
        return unimplemented("{}: tensor \"{}\": ggml type {} cannot be loaded", f.name(), t.name,
                             ggml_type_name(t.type));
      }
      Planned p{&t, hf_name(t.name).value_or(t.name), t.ne.size() == 1 ? DType::kF32 : dtype, 0,
                offset, 0};
      const bool keep = t.ne.size() == 2 && t.rows > 0 &&
                        std::find(keep_quantized.begin(), keep_quantized.end(), t.type) !=
                            keep_quantized.end() &&
                        (is_linear_weight(p.name) || p.name == "model.embed_tokens.weight");
      if (arch->permuted_qk) {
        const bool is_q = p.name.ends_with("self_attn.q_proj.weight") ||
                          p.name.ends_with("self_attn.q_proj.bias");
        const bool is_k = p.name.ends_with("self_attn.k_proj.weight") ||
                          p.name.ends_with("self_attn.k_proj.bias");
        if (is_q || is_k) {
          const int64_t heads = is_q ? config.num_attention_heads() : config.num_key_value_heads();
          const int64_t want_rows = heads * config.head_dim();
          const bool is_bias = t.ne.size() == 1;
          const int64_t rows = is_bias ? t.ne[0] : (t.ne.size() == 2 ? t.ne[1] : -1);
          if (rows != want_rows || config.head_dim() % 2 != 0) {
            return data_loss("{}: tensor \"{}\" has shape [{}], expected {} rows ({} heads of {})",
                             f.name(), t.name, fmt::join(t.shape(), ", "), want_rows, heads,
                             config.head_dim());
          }
          p.permute_heads = heads;
        }
      }
      if (keep) {
        QuantizedTensorInfo q{p.name, t.type, t.data, t.rows, t.row_elems, t.nbytes, f.name()};
        if (p.permute_heads > 0) {
          // Whole rows of blocks move, as the dequantized path moves rows of floats.
          auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(t.nbytes));
          const int64_t row_bytes = t.nbytes / t.rows, hd = config.head_dim();
          for (int64_t r = 0; r < t.rows; ++r) {
            const int64_t h = r / hd, i = r % hd;
            const int64_t dst_row = h * hd + (i % 2) * (hd / 2) + i / 2;
            std::memcpy(copy->data() + dst_row * row_bytes, t.data + r * row_bytes,
                        static_cast<size_t>(row_bytes));
          }
          q.data = copy->data();
          quantized.push_back(std::move(q));
          holds.push_back(std::move(copy));
        } else {
          quantized.push_back(std::move(q));
        }
        // Linear weights are only kept quantized; the embedding table is also dequantized for
        // the lookup.
        if (p.name != "model.embed_tokens.weight") continue;
      }
      p.nbytes = dtype_nbytes(p.dtype, t.numel);
      header[p.name] = {{"dtype", p.dtype == DType::kF32 ? "F32" : "BF16"},
                        {"shape", t.shape()},
                        {"data_offsets", {offset, offset + p.nbytes}}};
      offset += p.nbytes;
      plan.push_back(std::move(p));
    }
    // Two GGUF names mapping to one Hugging Face name would collide in the header.
    if (header.size() != plan.size()) {
      return data_loss("{}: two tensors map to the same name", f.name());
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::vector<uint8_t> bytes(8 + text.size() + static_cast<size_t>(offset));
    uint64_t n = text.size();
    for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * i));
    std::memcpy(bytes.data() + 8, text.data(), text.size());
    uint8_t* data = bytes.data() + 8 + text.size();

    std::vector<float> row;
    for (const Planned& p : plan) {
      const GgufTensor& t = *p.t;
      if (t.numel == 0) continue;
      // A bias is one "row" of head-sized chunks for the permutation; treat it as rows of 1.
      const bool is_vector = t.ne.size() == 1;
      const int64_t row_elems = t.row_elems;
      const int64_t row_bytes = row_elems / *ggml_block_elems(t.type) * *ggml_block_bytes(t.type);
      row.resize(static_cast<size_t>(row_elems));
      if (is_vector && p.permute_heads > 0) {
        std::vector<float> v(static_cast<size_t>(row_elems));
        LS_RETURN_IF_ERROR(dequantize_row(t.type, t.data, v.data(), row_elems));
        const int64_t hd = config.head_dim(), half = hd / 2;
        for (int64_t h = 0; h < p.permute_heads; ++h) {
          for (int64_t j = 0; j < half; ++j) {
            for (int64_t s = 0; s < 2; ++s) row[h * hd + s * half + j] = v[h * hd + 2 * j + s];
          }
        }
        convert_from_f32(row.data(), p.dtype, data + p.offset, row_elems);
        continue;
      }
      for (int64_t r = 0; r < t.rows; ++r) {
        Status s = dequantize_row(t.type, t.data + r * row_bytes, row.data(), row_elems);
        if (!s.ok()) {
          return Status(s.code(), fmt::format("{}: tensor \"{}\": {}", f.name(), t.name,
                                              s.message()));
        }
        int64_t dst_row = r;
        if (p.permute_heads > 0) {
          // GGUF row h*hd + 2j + s holds Hugging Face row h*hd + s*hd/2 + j.
          const int64_t hd = config.head_dim();
          const int64_t h = r / hd, i = r % hd;
          dst_row = h * hd + (i % 2) * (hd / 2) + i / 2;
        }
        convert_from_f32(row.data(), p.dtype,
                         data + p.offset + dtype_nbytes(p.dtype, dst_row * row_elems), row_elems);
      }
    }
    LS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> st,
                        SafetensorsFile::from_memory(f.name(), std::move(bytes)));
    Checkpoint ckpt = Checkpoint::from_file(f.name(), std::move(st));
    for (QuantizedTensorInfo& q : quantized) ckpt.add_quantized(std::move(q));
    if (!quantized.empty()) ckpt.hold(owner);
    for (auto& h : holds) ckpt.hold(std::move(h));
    return ckpt;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory while dequantizing", f.name());
  } catch (const Json::exception&) {
    return data_loss("{}: a tensor name is not valid UTF-8", f.name());
  }
}

}  // namespace

Result<Checkpoint> gguf_checkpoint(const GgufFile& f, const ModelConfig& config, DType dtype) {
  return gguf_checkpoint_impl(f, config, dtype, {}, nullptr);
}

Result<Checkpoint> gguf_checkpoint(std::shared_ptr<const GgufFile> file, const ModelConfig& config,
                                   DType dtype, const std::vector<GgmlType>& keep_quantized) {
  return gguf_checkpoint_impl(*file, config, dtype, keep_quantized, file);
}

}  // namespace ls
