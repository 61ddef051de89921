#include "model/weights.h"

#include <fmt/format.h>

#include <cstring>

namespace ls {

namespace {

std::string layer_name(int64_t layer, std::string_view suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

bool has_qkv_bias(const ModelConfig& config, const ArchitectureSpec& arch) {
  return arch.qkv_bias == ArchitectureSpec::QkvBias::kAlways || config.attention_bias().value_or(false);
}

bool has_o_bias(const ModelConfig& config, const ArchitectureSpec& arch) {
  return arch.qkv_bias == ArchitectureSpec::QkvBias::kFromConfig &&
         config.attention_bias().value_or(false);
}

bool has_mlp_bias(const ModelConfig& config) { return config.mlp_bias().value_or(false); }

// Uploads tensors into one device buffer, converting where the backend wants another dtype.
class Uploader {
 public:
  Uploader(const Checkpoint& ckpt, Backend& backend, ModelWeights& out)
      : ckpt_(ckpt), backend_(backend), out_(out) {}

  // Concatenates `names` along dim 0 into one [sum(rows), cols] tensor of the linear dtype.
  Result<TensorView> matrix(const std::vector<std::string>& names,
                            const std::vector<int64_t>& rows, int64_t cols) {
    std::vector<const TensorInfo*> parts;
    DType stored = DType::kF32;
    int64_t total_rows = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      LS_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(names[i]));
      LS_RETURN_IF_ERROR(ckpt_.check_tensor(*t, {rows[i], cols},
                                            {DType::kF32, DType::kF16, DType::kBF16}));
      if (i == 0) stored = *t->dtype;  // check_tensor guaranteed a float dtype
      if (*t->dtype != stored) stored = DType::kF32;  // mixed parts: compute in f32
      parts.push_back(t);
      total_rows += rows[i];
    }
    const DType target = backend_.weight_dtype_for(stored);
    LS_ASSIGN_OR_RETURN(Buffer buf, backend_.allocate(dtype_nbytes(target, total_rows * cols)));
    char* dst = static_cast<char*>(buf.data());
    for (const TensorInfo* t : parts) {
      const int64_t n = t->nbytes / dtype_size(*t->dtype);
      if (*t->dtype == target) {
        backend_.copy_bytes(dst, t->data, t->nbytes);  // data may be unaligned: bytes only
      } else {
        std::vector<float> f32(static_cast<size_t>(n));
        std::vector<uint8_t> staged(static_cast<size_t>(dtype_nbytes(target, n)));
        std::vector<uint8_t> src(static_cast<size_t>(t->nbytes));
        std::memcpy(src.data(), t->data, static_cast<size_t>(t->nbytes));
        convert_to_f32(*t->dtype, src.data(), f32.data(), n);
        convert_from_f32(f32.data(), target, staged.data(), n);
        backend_.copy_bytes(dst, staged.data(), static_cast<int64_t>(staged.size()));
      }
      dst += dtype_nbytes(target, n);
    }
    TensorView view = buf.view(target, {total_rows, cols});
    out_.bytes += buf.bytes();
    out_.storage.push_back(std::move(buf));
    return view;
  }

  // A vector converted to f32 (norm weights, biases); concatenates `names`.
  Result<TensorView> vector_f32(const std::vector<std::string>& names,
                                const std::vector<int64_t>& sizes) {
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    std::vector<float> host(static_cast<size_t>(total));
    int64_t offset = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      LS_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(names[i]));
      LS_RETURN_IF_ERROR(
          ckpt_.check_tensor(*t, {sizes[i]}, {DType::kF32, DType::kF16, DType::kBF16}));
      std::vector<uint8_t> src(static_cast<size_t>(t->nbytes));
      std::memcpy(src.data(), t->data, static_cast<size_t>(t->nbytes));
      convert_to_f32(*t->dtype, src.data(), host.data() + offset, sizes[i]);
      offset += sizes[i];
    }
    LS_ASSIGN_OR_RETURN(Buffer buf, backend_.allocate(total * 4));
    backend_.copy_bytes(buf.data(), host.data(), total * 4);
    TensorView view = buf.view(DType::kF32, {total});
    out_.bytes += buf.bytes();
    out_.storage.push_back(std::move(buf));
    return view;
  }

 private:
  const Checkpoint& ckpt_;
  Backend& backend_;
  ModelWeights& out_;
};

}  // namespace

void expected_tensor_names(const ModelConfig& c, const ArchitectureSpec& arch,
                           std::vector<std::string>& required,
                           std::vector<std::string>& optional) {
  required.push_back("model.embed_tokens.weight");
  required.push_back("model.norm.weight");
  (c.tie_word_embeddings() ? optional : required).push_back("lm_head.weight");
  for (int64_t l = 0; l < c.num_hidden_layers(); ++l) {
    for (const char* s : {"input_layernorm.weight", "post_attention_layernorm.weight",
                          "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      required.push_back(layer_name(l, s));
    }
    if (has_qkv_bias(c, arch)) {
      for (const char* s : {"self_attn.q_proj.bias", "self_attn.k_proj.bias",
                            "self_attn.v_proj.bias"}) {
        required.push_back(layer_name(l, s));
      }
    }
    if (has_o_bias(c, arch)) required.push_back(layer_name(l, "self_attn.o_proj.bias"));
    if (has_mlp_bias(c)) {
      for (const char* s : {"mlp.gate_proj.bias", "mlp.up_proj.bias", "mlp.down_proj.bias"}) {
        required.push_back(layer_name(l, s));
      }
    }
    if (arch.qk_norm) {
      required.push_back(layer_name(l, "self_attn.q_norm.weight"));
      required.push_back(layer_name(l, "self_attn.k_norm.weight"));
    }
    // Old checkpoints saved RoPE's inverse frequencies as a buffer; we recompute them.
    optional.push_back(layer_name(l, "self_attn.rotary_emb.inv_freq"));
  }
}

Result<ModelWeights> load_weights(const Checkpoint& ckpt, const ModelConfig& c,
                                  const ArchitectureSpec& arch, Backend& backend) {
  std::vector<std::string> required, optional;
  expected_tensor_names(c, arch, required, optional);
  LS_RETURN_IF_ERROR(ckpt.check_names(required, optional));

  ModelWeights w;
  Uploader up(ckpt, backend, w);
  const int64_t hidden = c.hidden_size();
  const int64_t q_out = c.num_attention_heads() * c.head_dim();
  const int64_t kv_out = c.num_key_value_heads() * c.head_dim();
  const int64_t inter = c.intermediate_size();

  LS_ASSIGN_OR_RETURN(w.embed, up.matrix({"model.embed_tokens.weight"}, {c.vocab_size()}, hidden));
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers()));
  for (int64_t l = 0; l < c.num_hidden_layers(); ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    auto n = [&](std::string_view s) { return layer_name(l, s); };
    LS_ASSIGN_OR_RETURN(L.input_norm, up.vector_f32({n("input_layernorm.weight")}, {hidden}));
    LS_ASSIGN_OR_RETURN(L.post_norm,
                        up.vector_f32({n("post_attention_layernorm.weight")}, {hidden}));
    LS_ASSIGN_OR_RETURN(L.qkv.w, up.matrix({n("self_attn.q_proj.weight"), n("self_attn.k_proj.weight"),
                                            n("self_attn.v_proj.weight")},
                                           {q_out, kv_out, kv_out}, hidden));
    LS_ASSIGN_OR_RETURN(L.o.w, up.matrix({n("self_attn.o_proj.weight")}, {hidden}, q_out));
    if (has_qkv_bias(c, arch)) {
      LS_ASSIGN_OR_RETURN(L.qkv.bias, up.vector_f32({n("self_attn.q_proj.bias"), n("self_attn.k_proj.bias"),
                                                     n("self_attn.v_proj.bias")},
                                                    {q_out, kv_out, kv_out}));
    }
    if (has_o_bias(c, arch)) {
      LS_ASSIGN_OR_RETURN(L.o.bias, up.vector_f32({n("self_attn.o_proj.bias")}, {hidden}));
    }
    if (arch.qk_norm) {
      LS_ASSIGN_OR_RETURN(L.q_norm, up.vector_f32({n("self_attn.q_norm.weight")}, {c.head_dim()}));
      LS_ASSIGN_OR_RETURN(L.k_norm, up.vector_f32({n("self_attn.k_norm.weight")}, {c.head_dim()}));
    }
    LS_ASSIGN_OR_RETURN(L.gate_up.w, up.matrix({n("mlp.gate_proj.weight"), n("mlp.up_proj.weight")},
                                               {inter, inter}, hidden));
    LS_ASSIGN_OR_RETURN(L.down.w, up.matrix({n("mlp.down_proj.weight")}, {hidden}, inter));
    if (has_mlp_bias(c)) {
      LS_ASSIGN_OR_RETURN(L.gate_up.bias, up.vector_f32({n("mlp.gate_proj.bias"), n("mlp.up_proj.bias")},
                                                        {inter, inter}));
      LS_ASSIGN_OR_RETURN(L.down.bias, up.vector_f32({n("mlp.down_proj.bias")}, {hidden}));
    }
  }
  LS_ASSIGN_OR_RETURN(w.final_norm, up.vector_f32({"model.norm.weight"}, {hidden}));
  if (c.tie_word_embeddings()) {
    w.lm_head.w = w.embed;
  } else {
    LS_ASSIGN_OR_RETURN(w.lm_head.w, up.matrix({"lm_head.weight"}, {c.vocab_size()}, hidden));
  }
  // Per decoded token every parameter is read once, except the embedding table (one row) —
  // unless it doubles as the lm_head.
  w.bytes_per_token = w.bytes;
  if (!c.tie_word_embeddings()) {
    w.bytes_per_token -= w.embed.nbytes() - w.embed.nbytes() / std::max<int64_t>(1, c.vocab_size());
  }
  return w;
}

}  // namespace ls
