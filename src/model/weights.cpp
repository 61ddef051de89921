#include "model/weights.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf_dequant.h"
#include "io/gguf_quantize.h"
#include "model/fp8_weights.h"

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

std::optional<kernels::QuantType> quant_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0:
      return kernels::QuantType::kQ8_0;
    case GgmlType::kQ4_0:
      return kernels::QuantType::kQ4_0;
    case GgmlType::kQ4_1:
      return kernels::QuantType::kQ4_1;
    case GgmlType::kQ4_K:
      return kernels::QuantType::kQ4_K;
    case GgmlType::kQ5_K:
      return kernels::QuantType::kQ5_K;
    case GgmlType::kQ6_K:
      return kernels::QuantType::kQ6_K;
    default:
      return std::nullopt;
  }
}

// Uploads tensors into one device buffer, converting where the backend wants another dtype.
class Uploader {
 public:
  Uploader(const Checkpoint& ckpt, Backend& backend, ModelWeights& out,
           std::optional<GgmlType> quantize_to, const Fp8CheckpointFormat* fp8_format,
           Fp8Load fp8)
      : ckpt_(ckpt),
        backend_(backend),
        out_(out),
        quantize_to_(quantize_to),
        fp8_format_(fp8_format),
        fp8_(fp8) {}

  // A linear weight from `names` concatenated along dim 0: kept in its quantized blocks when
  // every part is quantized in a type the backend reads (no copy: the parts point into the
  // checkpoint's blocks, which the weights then hold), else a float matrix().
  // FP8: e4m3 rows with per-row scales when the checkpoint stores any part in FP8 or
  // `quantizable` weights are quantized at load (Fp8Load), and the backend reads them.
  Result<LinearWeight> linear(const std::vector<std::string>& names,
                              const std::vector<int64_t>& rows, int64_t cols,
                              bool quantizable = true) {
    bool any_fp8 = false;
    for (const std::string& name : names) {
      any_fp8 = any_fp8 || (fp8_format_ != nullptr && is_fp8_tensor(ckpt_, name));
    }
    if (backend_.reads_fp8(cols) && ((any_fp8 && fp8_ != Fp8Load::kDequantize) ||
                                     (fp8_ == Fp8Load::kQuantize && quantizable))) {
      return fp8_linear(names, rows, cols);
    }
    LinearWeight lw;
    auto q = std::make_shared<kernels::QuantMatrix>();
    q->cols = cols;
    for (size_t i = 0; i < names.size(); ++i) {
      const QuantizedTensorInfo* info = ckpt_.find_quantized(names[i]);
      const std::optional<kernels::QuantType> type =
          info ? quant_type_of(info->type) : std::nullopt;
      if (!type || !backend_.reads_quantized(*type)) {
        q.reset();
        break;
      }
      if (info->rows != rows[i] || info->cols != cols) {
        return invalid_argument("{} in {} has shape [{}, {}], expected [{}, {}]", info->name,
                                info->file, info->rows, info->cols, rows[i], cols);
      }
      q->parts.push_back(kernels::QuantPart{*type, info->data, info->rows});
      q->rows += info->rows;
    }
    if (q) {
      lw.w = TensorView(nullptr, DType::kF32, {q->rows, cols});
      out_.bytes += q->bytes();
      if (out_.keep_alive.empty()) out_.keep_alive = ckpt_.keep_alive();
      lw.quant = std::move(q);
      return lw;
    }
    if (quantize_to_) {
      const std::optional<kernels::QuantType> qt = quant_type_of(*quantize_to_);
      if (qt && backend_.reads_quantized(*qt) && cols % kernels::quant_block_elems(*qt) == 0) {
        return quantized(names, rows, cols, *quantize_to_, *qt);
      }
    }
    LS_ASSIGN_OR_RETURN(lw.w, matrix(names, rows, cols));
    return lw;
  }

  // The float parts of `names` quantized at load into one owned block matrix.
  Result<LinearWeight> quantized(const std::vector<std::string>& names,
                                 const std::vector<int64_t>& rows, int64_t cols, GgmlType type,
                                 kernels::QuantType qt) {
    int64_t total_rows = 0;
    for (int64_t r : rows) total_rows += r;
    const int64_t row_bytes = cols / kernels::quant_block_elems(qt) * kernels::quant_block_bytes(qt);
    auto blocks = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(total_rows * row_bytes));
    std::vector<float> f32;
    int64_t row0 = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      LS_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(names[i]));
      LS_RETURN_IF_ERROR(ckpt_.check_tensor(*t, {rows[i], cols},
                                            {DType::kF32, DType::kF16, DType::kBF16}));
      f32.resize(static_cast<size_t>(rows[i] * cols));
      std::vector<uint8_t> src(static_cast<size_t>(t->nbytes));
      std::memcpy(src.data(), t->data, src.size());
      convert_to_f32(*t->dtype, src.data(), f32.data(), rows[i] * cols);
      LS_RETURN_IF_ERROR(quantize_row(type, f32.data(), rows[i] * cols,
                                      blocks->data() + row0 * row_bytes));
      row0 += rows[i];
    }
    auto q = std::make_shared<kernels::QuantMatrix>();
    q->cols = cols;
    q->rows = total_rows;
    q->parts.push_back(kernels::QuantPart{qt, blocks->data(), total_rows});
    LinearWeight lw;
    lw.w = TensorView(nullptr, DType::kF32, {total_rows, cols});
    out_.bytes += q->bytes();
    out_.keep_alive.push_back(std::move(blocks));
    lw.quant = std::move(q);
    return lw;
  }

  // `names` as one [sum(rows), cols] e4m3 matrix with per-row scales: FP8 parts as the checkpoint
  // stores them (block scales requantized per row), float parts uploaded as stored and quantized
  // by the backend (quantize_fp8_rows: the host quantizer's bits, an 8B model in seconds rather
  // than a minute of host cores).
  Result<LinearWeight> fp8_linear(const std::vector<std::string>& names,
                                  const std::vector<int64_t>& rows, int64_t cols) {
    int64_t total_rows = 0;
    for (int64_t r : rows) total_rows += r;
    LS_ASSIGN_OR_RETURN(Buffer wbuf, backend_.allocate(total_rows * cols));  // [total_rows, cols]
    LS_ASSIGN_OR_RETURN(Buffer sbuf, backend_.allocate(total_rows * 4));     // [total_rows] f32
    auto* codes = static_cast<uint8_t*>(wbuf.data());
    auto* scales = static_cast<float*>(sbuf.data());
    int64_t row0 = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      uint8_t* part_codes = codes + row0 * cols;
      float* part_scales = scales + row0;
      row0 += rows[i];
      if (fp8_format_ != nullptr && is_fp8_tensor(ckpt_, names[i])) {
        LS_ASSIGN_OR_RETURN(Fp8Rows part,
                            read_fp8_rows(ckpt_, *fp8_format_, names[i], rows[i], cols));
        backend_.copy_bytes(part_codes, part.codes.data(), rows[i] * cols);
        backend_.copy_bytes(part_scales, part.scales.data(), rows[i] * 4);
        LS_RETURN_IF_ERROR(backend_.take_error());
        continue;
      }
      LS_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(names[i]));
      LS_RETURN_IF_ERROR(
          ckpt_.check_tensor(*t, {rows[i], cols}, {DType::kF32, DType::kF16, DType::kBF16}));
      LS_ASSIGN_OR_RETURN(Buffer stored, backend_.allocate(t->nbytes));  // [rows[i], cols]
      backend_.copy_bytes(stored.data(), t->data, t->nbytes);
      LS_RETURN_IF_ERROR(backend_.take_error());
      LS_RETURN_IF_ERROR(backend_.quantize_fp8_rows(
          stored.view(*t->dtype, {rows[i], cols}),
          TensorView(part_codes, DType::kU8, {rows[i], cols}, backend_.device()),
          TensorView(part_scales, DType::kF32, {rows[i]}, backend_.device())));
      backend_.synchronize();
      LS_RETURN_IF_ERROR(backend_.take_error());
    }
    LinearWeight lw;
    lw.w = wbuf.view(DType::kU8, {total_rows, cols});
    lw.scale = sbuf.view(DType::kF32, {total_rows});
    out_.bytes += wbuf.bytes() + sbuf.bytes();
    out_.storage.push_back(std::move(wbuf));
    out_.storage.push_back(std::move(sbuf));
    return lw;
  }

  // Concatenates `names` along dim 0 into one [sum(rows), cols] tensor of the linear dtype.
  // Parts kept only quantized (a backend that reads some block types but not this one, or a
  // fused matrix mixing types) are dequantized to f32 here.
  Result<TensorView> matrix(const std::vector<std::string>& names,
                            const std::vector<int64_t>& rows, int64_t cols) {
    std::vector<const TensorInfo*> parts;
    std::vector<TensorInfo> dequantized;  // owns the infos of dequantized parts
    std::vector<std::vector<float>> dequantized_data;
    dequantized.reserve(names.size());
    dequantized_data.reserve(names.size());
    DType stored = DType::kF32;
    int64_t total_rows = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const QuantizedTensorInfo* qi =
          ckpt_.find(names[i]) == nullptr ? ckpt_.find_quantized(names[i]) : nullptr;
      if (qi != nullptr) {
        std::vector<float>& data = dequantized_data.emplace_back(
            static_cast<size_t>(qi->rows * qi->cols));
        Status s = dequantize_row(qi->type, qi->data, data.data(), qi->rows * qi->cols);
        if (!s.ok()) return Status(s.code(), fmt::format("{} in {}: {}", qi->name, qi->file, s.message()));
        TensorInfo& t = dequantized.emplace_back();
        t.name = qi->name;
        t.dtype = DType::kF32;
        t.shape = {qi->rows, qi->cols};
        t.data = data.data();
        t.nbytes = qi->rows * qi->cols * 4;
        t.file = qi->file;
      } else if (is_fp8_tensor(ckpt_, names[i])) {
        // An FP8 checkpoint's weight on a backend that computes in floats: dequantized to f32.
        if (fp8_format_ == nullptr) {
          return invalid_argument("{} is stored as F8_E4M3 but {}/config.json has no FP8 "
                                  "quantization_config",
                                  names[i], ckpt_.dir().string());
        }
        LS_ASSIGN_OR_RETURN(std::vector<float> deq,
                            read_fp8_dequantized(ckpt_, *fp8_format_, names[i], rows[i], cols));
        std::vector<float>& data = dequantized_data.emplace_back(std::move(deq));
        TensorInfo& t = dequantized.emplace_back();
        t.name = names[i];
        t.dtype = DType::kF32;
        t.shape = {rows[i], cols};
        t.data = data.data();
        t.nbytes = rows[i] * cols * 4;
        t.file = ckpt_.dir().string();
      }
      const bool was_dequantized = qi != nullptr || is_fp8_tensor(ckpt_, names[i]);
      LS_ASSIGN_OR_RETURN(const TensorInfo* t,
                          was_dequantized ? Result<const TensorInfo*>(&dequantized.back())
                                          : ckpt_.get(names[i]));
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
  std::optional<GgmlType> quantize_to_;
  const Fp8CheckpointFormat* fp8_format_;  // null unless config.json describes an FP8 checkpoint
  Fp8Load fp8_;
};

}  // namespace

void expected_tensor_names(const ModelConfig& c, const ArchitectureSpec& arch,
                           std::vector<std::string>& required,
                           std::vector<std::string>& optional) {
  required.push_back("model.embed_tokens.weight");
  required.push_back("model.norm.weight");
  (c.tie_word_embeddings() ? optional : required).push_back("lm_head.weight");
  if (c.fp8_weights()) optional.push_back(fp8_scale_name(*c.fp8_weights(), "lm_head.weight"));
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
    // An FP8 checkpoint's scale beside each linear weight it quantized (io/fp8_format.h); the
    // loader demands it for every weight stored as F8_E4M3.
    if (c.fp8_weights()) {
      for (const char* s : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                            "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
        optional.push_back(fp8_scale_name(*c.fp8_weights(), layer_name(l, s)));
      }
    }
    // Old checkpoints saved RoPE's inverse frequencies as a buffer; we recompute them.
    optional.push_back(layer_name(l, "self_attn.rotary_emb.inv_freq"));
  }
}

Result<ModelWeights> load_weights(const Checkpoint& ckpt, const ModelConfig& c,
                                  const ArchitectureSpec& arch, Backend& backend,
                                  std::optional<GgmlType> quantize_to, Fp8Load fp8) {
  std::vector<std::string> required, optional;
  expected_tensor_names(c, arch, required, optional);
  LS_RETURN_IF_ERROR(ckpt.check_names(required, optional));

  ModelWeights w;
  Uploader up(ckpt, backend, w, quantize_to,
              c.fp8_weights() ? &*c.fp8_weights() : nullptr, fp8);
  const int64_t hidden = c.hidden_size();
  const int64_t q_out = c.num_attention_heads() * c.head_dim();
  const int64_t kv_out = c.num_key_value_heads() * c.head_dim();
  const int64_t inter = c.intermediate_size();

  LS_ASSIGN_OR_RETURN(w.embed, up.matrix({"model.embed_tokens.weight"}, {c.vocab_size()}, hidden));
  if (quantize_to) {
    // A model quantized at load behaves as the GGUF `longserve quantize` writes for it, whose
    // embedding table is quantized too: round the table's rows through the type.
    const std::optional<kernels::QuantType> qt = quant_type_of(*quantize_to);
    if (qt && backend.reads_quantized(*qt) && hidden % kernels::quant_block_elems(*qt) == 0) {
      // The table becomes f32 (the dtype a GGUF table is dequantized to on the CPU).
      const int64_t n = c.vocab_size() * hidden;
      std::vector<uint8_t> stored(static_cast<size_t>(w.embed.nbytes()));
      backend.copy_bytes(stored.data(), w.embed.data, w.embed.nbytes());
      std::vector<float> table(static_cast<size_t>(n));
      convert_to_f32(w.embed.dtype, stored.data(), table.data(), n);
      std::vector<uint8_t> blocks(static_cast<size_t>(
          n / kernels::quant_block_elems(*qt) * kernels::quant_block_bytes(*qt)));
      LS_RETURN_IF_ERROR(quantize_row(*quantize_to, table.data(), n, blocks.data()));
      LS_RETURN_IF_ERROR(dequantize_row(*quantize_to, blocks.data(), table.data(), n));
      LS_ASSIGN_OR_RETURN(Buffer buf, backend.allocate(n * 4));
      backend.copy_bytes(buf.data(), table.data(), n * 4);
      w.bytes += buf.bytes() - w.embed.nbytes();
      w.embed = buf.view(DType::kF32, {c.vocab_size(), hidden});
      w.storage.back() = std::move(buf);  // the table was the first (and so far last) upload
    }
  }
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers()));
  for (int64_t l = 0; l < c.num_hidden_layers(); ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    auto n = [&](std::string_view s) { return layer_name(l, s); };
    LS_ASSIGN_OR_RETURN(L.input_norm, up.vector_f32({n("input_layernorm.weight")}, {hidden}));
    LS_ASSIGN_OR_RETURN(L.post_norm,
                        up.vector_f32({n("post_attention_layernorm.weight")}, {hidden}));
    LS_ASSIGN_OR_RETURN(L.qkv, up.linear({n("self_attn.q_proj.weight"), n("self_attn.k_proj.weight"),
                                            n("self_attn.v_proj.weight")},
                                           {q_out, kv_out, kv_out}, hidden));
    LS_ASSIGN_OR_RETURN(L.o, up.linear({n("self_attn.o_proj.weight")}, {hidden}, q_out));
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
    LS_ASSIGN_OR_RETURN(L.gate_up, up.linear({n("mlp.gate_proj.weight"), n("mlp.up_proj.weight")},
                                               {inter, inter}, hidden));
    LS_ASSIGN_OR_RETURN(L.down, up.linear({n("mlp.down_proj.weight")}, {hidden}, inter));
    if (has_mlp_bias(c)) {
      LS_ASSIGN_OR_RETURN(L.gate_up.bias, up.vector_f32({n("mlp.gate_proj.bias"), n("mlp.up_proj.bias")},
                                                        {inter, inter}));
      LS_ASSIGN_OR_RETURN(L.down.bias, up.vector_f32({n("mlp.down_proj.bias")}, {hidden}));
    }
  }
  LS_ASSIGN_OR_RETURN(w.final_norm, up.vector_f32({"model.norm.weight"}, {hidden}));
  const bool tied = c.tie_word_embeddings();
  // A tied lm_head reads the embedding table's quantized blocks when they were kept (GGUF on
  // the CPU); otherwise it views the (dequantized) table.
  const QuantizedTensorInfo* qembed = ckpt.find_quantized("model.embed_tokens.weight");
  const std::optional<kernels::QuantType> qembed_type =
      qembed != nullptr ? quant_type_of(qembed->type) : std::nullopt;
  bool quantize_lm_head = false;  // --quantization TYPE on load: a tied lm_head too
  if (quantize_to) {
    if (const std::optional<kernels::QuantType> t = quant_type_of(*quantize_to)) {
      const kernels::QuantType lt = *t;
      quantize_lm_head = backend.reads_quantized(lt) && hidden % kernels::quant_block_elems(lt) == 0;
    }
  }
  if (tied && ((qembed_type && backend.reads_quantized(*qembed_type)) || quantize_lm_head)) {
    LS_ASSIGN_OR_RETURN(w.lm_head,
                        up.linear({"model.embed_tokens.weight"}, {c.vocab_size()}, hidden, false));
  } else if (tied) {
    w.lm_head.w = w.embed;
  }
  if (!tied) {
    LS_ASSIGN_OR_RETURN(w.lm_head, up.linear({"lm_head.weight"}, {c.vocab_size()}, hidden, false));
  }
  // Per decoded token every parameter is read once, except the embedding table (one row) —
  // unless the lm_head views it.
  const int64_t row = w.embed.nbytes() / std::max<int64_t>(1, c.vocab_size());
  w.bytes_per_token = w.bytes - w.embed.nbytes() + row;
  if (w.lm_head.w.data == w.embed.data) w.bytes_per_token += w.embed.nbytes() - row;
  return w;
}

}  // namespace ls
