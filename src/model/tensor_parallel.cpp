#include "model/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/fp8_format.h"
#include "io/safetensors.h"
#include "model/fp8_weights.h"

namespace ls {

int64_t TpLayout::kv_head(int64_t layer, int32_t rank, int64_t j) const {
  if (kv_replicas > 1) return rank / kv_replicas;
  if (kv_order.empty()) return rank * kv_heads_per_rank + j;
  return kv_order[static_cast<size_t>(layer * num_kv_heads + rank * kv_heads_per_rank + j)];
}

int64_t TpLayout::q_head(int64_t layer, int32_t rank, int64_t j) const {
  if (kv_replicas > 1) return rank * q_heads_per_rank + j;
  return kv_head(layer, rank, j / group) * group + j % group;
}

std::vector<int32_t> TpLayout::kv_heads_of(int32_t rank) const {
  std::vector<int32_t> ids;
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t j = 0; j < kv_heads_per_rank; ++j) {
      ids.push_back(static_cast<int32_t>(kv_head(l, rank, j)));
    }
  }
  return ids;
}

void TpLayout::balance_roles(const std::vector<bool>& streaming) {
  kv_order.clear();
  if (kv_replicas > 1 || size == 1) return;
  bool mixed = false;
  for (int64_t l = 0; l < num_layers && !mixed; ++l) {
    for (int64_t h = 1; h < num_kv_heads; ++h) {
      mixed |= streaming[static_cast<size_t>(l * num_kv_heads + h)] !=
               streaming[static_cast<size_t>(l * num_kv_heads)];
    }
  }
  if (!mixed) return;
  kv_order.resize(static_cast<size_t>(num_layers * num_kv_heads));
  std::vector<std::vector<int32_t>> per_rank(static_cast<size_t>(size));
  for (int64_t l = 0; l < num_layers; ++l) {
    // Retrieval heads first, then streaming ones, dealt round-robin from a rank that moves on
    // every layer, so no rank collects every layer's odd retrieval head.
    for (auto& v : per_rank) v.clear();
    int64_t dealt = 0;
    for (const bool want_streaming : {false, true}) {
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        if (streaming[static_cast<size_t>(l * num_kv_heads + h)] != want_streaming) continue;
        // The next rank (from the layer's first) that still has room.
        int64_t r = (l + dealt) % size;
        while (static_cast<int64_t>(per_rank[static_cast<size_t>(r)].size()) == kv_heads_per_rank) {
          r = (r + 1) % size;
        }
        per_rank[static_cast<size_t>(r)].push_back(static_cast<int32_t>(h));
        ++dealt;
      }
    }
    for (int32_t r = 0; r < size; ++r) {
      auto& heads = per_rank[static_cast<size_t>(r)];
      std::sort(heads.begin(), heads.end());
      for (size_t j = 0; j < heads.size(); ++j) {
        kv_order[static_cast<size_t>(l * num_kv_heads + r * kv_heads_per_rank) + j] = heads[j];
      }
    }
  }
}

Result<TpLayout> make_tp_layout(const ModelConfig& c, int32_t size) {
  if (size != 1 && size != 2 && size != 4 && size != 8) {
    return invalid_argument("--tensor-parallel-size {}: must be 1, 2, 4 or 8", size);
  }
  const int64_t hq = c.num_attention_heads();
  const int64_t hkv = c.num_key_value_heads();
  const int64_t inter = c.intermediate_size();
  if (hq % size != 0) {
    return invalid_argument(
        "--tensor-parallel-size {}: the model's {} attention heads (num_attention_heads) do not "
        "split evenly over {} ranks",
        size, hq, size);
  }
  if (hkv >= size ? hkv % size != 0 : size % hkv != 0) {
    return invalid_argument(
        "--tensor-parallel-size {}: the model's {} kv heads (num_key_value_heads) must be a "
        "multiple of {} or divide it",
        size, hkv, size);
  }
  if (inter % size != 0) {
    return invalid_argument(
        "--tensor-parallel-size {}: the MLP width {} (intermediate_size) does not split evenly "
        "over {} ranks",
        size, inter, size);
  }
  TpLayout l;
  l.size = size;
  l.q_heads_per_rank = hq / size;
  l.kv_heads_per_rank = hkv >= size ? hkv / size : 1;
  l.kv_replicas = hkv >= size ? 1 : size / hkv;
  l.inter_per_rank = inter / size;
  l.vocab_size = c.vocab_size();
  l.vocab_per_rank = l.vocab_size;
  if (size > 1) {
    const int64_t even = (l.vocab_size + size - 1) / size;
    l.vocab_per_rank = (even + kVocabAlign - 1) / kVocabAlign * kVocabAlign;
  }
  l.num_layers = c.num_hidden_layers();
  l.num_kv_heads = hkv;
  l.group = hq / hkv;
  return l;
}

Result<TpLayout> make_tp_layout(const ModelConfig& c, const TpShard& shard) {
  LS_ASSIGN_OR_RETURN(TpLayout l, make_tp_layout(c, shard.size));
  if (!shard.kv_order.empty()) {
    if (l.kv_replicas > 1 ||
        static_cast<int64_t>(shard.kv_order.size()) != l.num_layers * l.num_kv_heads) {
      return invalid_argument("tensor-parallel kv head order of {} entries does not fit {} layers "
                              "x {} kv heads over {} ranks",
                              shard.kv_order.size(), l.num_layers, l.num_kv_heads, l.size);
    }
    for (int64_t layer = 0; layer < l.num_layers; ++layer) {
      std::vector<bool> seen(static_cast<size_t>(l.num_kv_heads), false);
      for (int64_t h = 0; h < l.num_kv_heads; ++h) {
        const int32_t id = shard.kv_order[static_cast<size_t>(layer * l.num_kv_heads + h)];
        if (id < 0 || id >= l.num_kv_heads || seen[static_cast<size_t>(id)]) {
          return invalid_argument("tensor-parallel kv head order: layer {} is not a permutation "
                                  "of its {} kv heads",
                                  layer, l.num_kv_heads);
        }
        seen[static_cast<size_t>(id)] = true;
      }
    }
    l.kv_order = shard.kv_order;
  }
  return l;
}

ModelConfig shard_config(const ModelConfig& c, const TpLayout& l, int32_t rank, Fp8Shard fp8) {
  ModelConfig heads =
      c.with_shard_sizes(l.q_heads_per_rank, l.kv_heads_per_rank, l.inter_per_rank);
  if (c.fp8_weights()) {
    if (fp8 == Fp8Shard::kDequantize) {
      heads = heads.with_fp8_weights(std::nullopt);
    } else {
      Fp8CheckpointFormat rows = *c.fp8_weights();
      rows.layout = Fp8ScaleLayout::kChannel;
      rows.block_rows = rows.block_cols = 0;
      heads = heads.with_fp8_weights(std::move(rows));
    }
  }
  if (l.size == 1) return heads;
  return heads.with_vocab_slice(rank * l.vocab_per_rank, l.vocab_per_rank, l.size);
}

int64_t tensor_layer_index(std::string_view name) {
  constexpr std::string_view prefix = "model.layers.";
  if (name.substr(0, prefix.size()) != prefix) return -1;
  int64_t l = 0;
  size_t i = prefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) l = l * 10 + (name[i] - '0');
  return l;
}

namespace {

// One tensor of the shard: a view of the source tensor's bytes where the slice is one span of
// them (whole tensors, a rank's contiguous rows), else bytes of its own (column slices, rows from
// several places, zero padding, converted FP8 weights).
struct ShardTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;   // owned; empty for a view
  const void* view = nullptr;   // into the source checkpoint's memory
  int64_t view_bytes = 0;

  const void* data() const { return view != nullptr ? view : bytes.data(); }
  int64_t nbytes() const {
    return view != nullptr ? view_bytes : static_cast<int64_t>(bytes.size());
  }
};

// [begin, count) ranges of rows or columns, concatenated in order.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

int64_t total(const Ranges& ranges) {
  int64_t n = 0;
  for (const auto& r : ranges) n += r.second;
  return n;
}

// `ranges` with each range that starts where the previous one ends merged into it.
Ranges coalesce(const Ranges& ranges) {
  Ranges out;
  for (const auto& [begin, count] : ranges) {
    if (!out.empty() && out.back().first + out.back().second == begin) {
      out.back().second += count;
    } else {
      out.emplace_back(begin, count);
    }
  }
  return out;
}

// Whether the source tensor's memory outlives the shard (the checkpoint's, not a converted copy).
enum class Source : uint8_t { kCheckpoint, kTemporary };

ShardTensor view_of(const TensorInfo& t, std::vector<int64_t> shape, int64_t byte_offset,
                    int64_t nbytes) {
  ShardTensor out{t.name, t.file_dtype, std::move(shape), {}};
  out.view = static_cast<const uint8_t*>(t.data) + byte_offset;
  out.view_bytes = nbytes;
  return out;
}

// The rows `ranges` of t viewed as [rows, row_elems] (a 1-D tensor: elements).
ShardTensor slice_rows(const TensorInfo& t, const Ranges& ranges, Source src) {
  const int64_t row_elems = t.shape.size() > 1 ? t.shape[1] : 1;
  const int64_t row_bytes = row_elems * safetensors_dtype_size(t.file_dtype);
  const Ranges spans = coalesce(ranges);
  std::vector<int64_t> shape = t.shape;
  shape[0] = total(spans);
  if (src == Source::kCheckpoint && spans.size() == 1) {
    return view_of(t, std::move(shape), spans[0].first * row_bytes, spans[0].second * row_bytes);
  }
  ShardTensor out{t.name, t.file_dtype, std::move(shape), {}};
  out.bytes.resize(static_cast<size_t>(out.shape[0] * row_bytes));
  int64_t at = 0;
  for (const auto& [begin, count] : spans) {
    std::memcpy(out.bytes.data() + at * row_bytes,
                static_cast<const uint8_t*>(t.data) + begin * row_bytes,
                static_cast<size_t>(count * row_bytes));
    at += count;
  }
  return out;
}

// The columns `ranges` of the [rows, cols] tensor t.
ShardTensor slice_cols(const TensorInfo& t, const Ranges& ranges, Source src) {
  const int64_t es = safetensors_dtype_size(t.file_dtype);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const Ranges spans = coalesce(ranges);
  const int64_t n = total(spans);
  if (src == Source::kCheckpoint && spans.size() == 1 && n == cols) {
    return view_of(t, t.shape, 0, t.nbytes);
  }
  ShardTensor out{t.name, t.file_dtype, t.shape, {}};
  out.shape[1] = n;
  out.bytes.resize(static_cast<size_t>(rows * n * es));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = 0;
    for (const auto& [begin, count] : spans) {
      std::memcpy(out.bytes.data() + (r * n + at) * es,
                  static_cast<const uint8_t*>(t.data) + (r * cols + begin) * es,
                  static_cast<size_t>(count * es));
      at += count;
    }
  }
  return out;
}

// Rows [begin, begin + count) of t viewed as [rows, row_elems]; rows past t's end are zeros.
ShardTensor slice_rows_padded(const TensorInfo& t, int64_t begin, int64_t count, Source src) {
  const int64_t row_elems = t.shape.size() > 1 ? t.shape[1] : 1;
  const int64_t row_bytes = row_elems * safetensors_dtype_size(t.file_dtype);
  std::vector<int64_t> shape = t.shape;
  shape[0] = count;
  const int64_t present = std::clamp<int64_t>(t.shape[0] - begin, 0, count);
  if (src == Source::kCheckpoint && present == count) {
    return view_of(t, std::move(shape), begin * row_bytes, count * row_bytes);
  }
  ShardTensor out{t.name, t.file_dtype, std::move(shape), {}};
  out.bytes.assign(static_cast<size_t>(count * row_bytes), 0);
  if (present > 0) {
    std::memcpy(out.bytes.data(), static_cast<const uint8_t*>(t.data) + begin * row_bytes,
                static_cast<size_t>(present * row_bytes));
  }
  return out;
}

ShardTensor copy_whole(const TensorInfo& t, bool zero, Source src) {
  if (src == Source::kCheckpoint && !zero) return view_of(t, t.shape, 0, t.nbytes);
  ShardTensor out{t.name, t.file_dtype, t.shape, {}};
  out.bytes.resize(static_cast<size_t>(t.nbytes), 0);
  if (!zero) std::memcpy(out.bytes.data(), t.data, out.bytes.size());
  return out;
}

// How one tensor of the checkpoint is cut for a rank.
struct SliceRule {
  enum class Kind : uint8_t { kRows, kCols, kVocabRows, kRank0, kWhole } kind = Kind::kWhole;
  Ranges ranges;  // kRows / kCols
};

ShardTensor apply_rule(const TensorInfo& t, const SliceRule& rule, const TpLayout& l,
                       int32_t rank, Source src) {
  switch (rule.kind) {
    case SliceRule::Kind::kRows:
      return slice_rows(t, rule.ranges, src);
    case SliceRule::Kind::kCols:
      return slice_cols(t, rule.ranges, src);
    case SliceRule::Kind::kVocabRows:
      return slice_rows_padded(t, rank * l.vocab_per_rank, l.vocab_per_rank, src);
    case SliceRule::Kind::kRank0:
      return copy_whole(t, rank != 0, src);  // added once, by rank 0, before the all-reduce
    case SliceRule::Kind::kWhole:
      break;
  }
  return copy_whole(t, false, src);  // replicated
}

// A view of host memory as a checkpoint tensor (the converted form of an FP8 weight).
TensorInfo memory_tensor(const TensorInfo& like, SafetensorsDType dtype,
                         std::vector<int64_t> shape, const void* data, int64_t nbytes) {
  TensorInfo t;
  t.name = like.name;
  t.file = like.file;
  t.file_dtype = dtype;
  if (dtype == SafetensorsDType::kF32) t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data = data;
  t.nbytes = nbytes;
  return t;
}

// An FP8 weight of `full` cut by `rule` in the form `fp8` says (Fp8Shard); appends the weight
// and, for kE4m3Rows, its per-row ("channel") scale tensor named as `rows_format` names it.
Status shard_fp8_weight(const Checkpoint& full, const Fp8CheckpointFormat& format,
                        const Fp8CheckpointFormat& rows_format, const TensorInfo& t,
                        const SliceRule& rule, const TpLayout& l, int32_t rank, Fp8Shard fp8,
                        std::vector<ShardTensor>& out) {
  if (t.shape.size() != 2) {
    return invalid_argument("{} in {}: an FP8 weight must be 2-D, not [{}]", t.name, t.file,
                            fmt::join(t.shape, ", "));
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  if (fp8 == Fp8Shard::kDequantize) {
    LS_ASSIGN_OR_RETURN(std::vector<float> w,
                        read_fp8_dequantized(full, format, t.name, rows, cols));
    const TensorInfo view = memory_tensor(t, SafetensorsDType::kF32, {rows, cols}, w.data(),
                                          static_cast<int64_t>(w.size() * sizeof(float)));
    out.push_back(apply_rule(view, rule, l, rank, Source::kTemporary));
    return {};
  }
  LS_ASSIGN_OR_RETURN(Fp8Rows r, read_fp8_rows(full, format, t.name, rows, cols));
  const TensorInfo codes = memory_tensor(t, SafetensorsDType::kF8E4M3, {rows, cols},
                                         r.codes.data(), static_cast<int64_t>(r.codes.size()));
  TensorInfo scales = memory_tensor(t, SafetensorsDType::kF32, {rows, 1}, r.scales.data(),
                                    static_cast<int64_t>(r.scales.size() * sizeof(float)));
  scales.name = fp8_scale_name(rows_format, t.name);
  out.push_back(apply_rule(codes, rule, l, rank, Source::kTemporary));
  // A row's scale covers the whole row: column slices keep every row's scale.
  SliceRule scale_rule = rule;
  if (rule.kind == SliceRule::Kind::kCols) scale_rule = SliceRule{};
  ShardTensor s = apply_rule(scales, scale_rule, l, rank, Source::kTemporary);
  if (rule.kind == SliceRule::Kind::kVocabRows) {
    // Padding rows past the vocabulary hold zero codes; their scale must still be a valid one.
    const int64_t present = std::clamp<int64_t>(rows - rank * l.vocab_per_rank, 0,
                                                l.vocab_per_rank);
    for (int64_t i = present; i < l.vocab_per_rank; ++i) {
      const float one = 1.0f;
      std::memcpy(s.bytes.data() + i * sizeof(float), &one, sizeof(float));
    }
  }
  out.push_back(std::move(s));
  return {};
}

}  // namespace

Result<Checkpoint> shard_checkpoint(const Checkpoint& full, const ModelConfig& c,
                                    const TpLayout& l, int32_t rank, Fp8Shard fp8) {
  const int64_t d = c.head_dim();
  const Ranges mlp = {{rank * l.inter_per_rank, l.inter_per_rank}};
  const std::optional<Fp8CheckpointFormat>& format = c.fp8_weights();
  const std::optional<Fp8CheckpointFormat> rows_format =
      format ? shard_config(c, l, rank, Fp8Shard::kE4m3Rows).fp8_weights() : std::nullopt;
  // The scale tensor of an FP8 weight travels with its weight (below), never on its own; one
  // beside a float weight (which TP = 1 ignores) is dropped, so the shard loads as TP = 1 does
  // whatever form it holds.
  auto is_weight_scale = [&](const std::string& name) {
    if (!format || !name.ends_with(format->scale_suffix)) return false;
    const std::string weight =
        name.substr(0, name.size() - format->scale_suffix.size()) + "weight";
    return full.find(weight) != nullptr;
  };
  std::vector<ShardTensor> out;
  for (const std::string& name : full.names()) {
    if (is_weight_scale(name)) continue;
    LS_ASSIGN_OR_RETURN(const TensorInfo* t, full.get(name));
    const int64_t layer = tensor_layer_index(name);
    // The rank's q heads and kv heads in this layer, as row (or column) ranges of head_dim.
    Ranges q, kv;
    if (layer >= 0) {
      for (int64_t j = 0; j < l.q_heads_per_rank; ++j) q.push_back({l.q_head(layer, rank, j) * d, d});
      for (int64_t j = 0; j < l.kv_heads_per_rank; ++j) {
        kv.push_back({l.kv_head(layer, rank, j) * d, d});
      }
    }
    // The loader checks every shape later; here a sliced tensor only needs the dimension it is
    // sliced along to hold every range.
    auto need = [&](size_t dims, int64_t dim, const Ranges& ranges) -> Status {
      int64_t end = 0;
      for (const auto& [b, n] : ranges) end = std::max(end, b + n);
      if (t->shape.size() != dims || t->shape[static_cast<size_t>(dim)] < end) {
        return invalid_argument("{} in {}: shape [{}] cannot be split for tensor parallelism",
                                name, t->file, fmt::join(t->shape, ", "));
      }
      return {};
    };
    const size_t dims = name.ends_with(".weight") ? 2 : 1;
    SliceRule rule;
    if (name.ends_with("self_attn.q_proj.weight") || name.ends_with("self_attn.q_proj.bias")) {
      LS_RETURN_IF_ERROR(need(dims, 0, q));
      rule = {SliceRule::Kind::kRows, q};
    } else if (name.ends_with("self_attn.k_proj.weight") ||
               name.ends_with("self_attn.k_proj.bias") ||
               name.ends_with("self_attn.v_proj.weight") ||
               name.ends_with("self_attn.v_proj.bias")) {
      LS_RETURN_IF_ERROR(need(dims, 0, kv));
      rule = {SliceRule::Kind::kRows, kv};
    } else if (name.ends_with("mlp.gate_proj.weight") || name.ends_with("mlp.gate_proj.bias") ||
               name.ends_with("mlp.up_proj.weight") || name.ends_with("mlp.up_proj.bias")) {
      LS_RETURN_IF_ERROR(need(dims, 0, mlp));
      rule = {SliceRule::Kind::kRows, mlp};
    } else if (name.ends_with("self_attn.o_proj.weight")) {
      LS_RETURN_IF_ERROR(need(2, 1, q));
      rule = {SliceRule::Kind::kCols, q};
    } else if (name.ends_with("mlp.down_proj.weight")) {
      LS_RETURN_IF_ERROR(need(2, 1, mlp));
      rule = {SliceRule::Kind::kCols, mlp};
    } else if (l.size > 1 && (name == "model.embed_tokens.weight" || name == "lm_head.weight")) {
      // Vocabulary-parallel: the rank's slice of rows, zero-padded past the vocabulary.
      if (t->shape.size() != 2 || t->shape[0] != l.vocab_size) {
        return invalid_argument("{} in {}: shape [{}] does not have the vocabulary's {} rows",
                                name, t->file, fmt::join(t->shape, ", "), l.vocab_size);
      }
      rule.kind = SliceRule::Kind::kVocabRows;
    } else if (name.ends_with("self_attn.o_proj.bias") || name.ends_with("mlp.down_proj.bias")) {
      rule.kind = SliceRule::Kind::kRank0;
    }
    if (format && t->file_dtype == SafetensorsDType::kF8E4M3) {
      LS_RETURN_IF_ERROR(
          shard_fp8_weight(full, *format, *rows_format, *t, rule, l, rank, fp8, out));
    } else {
      out.push_back(apply_rule(*t, rule, l, rank, Source::kCheckpoint));
    }
  }
  // The shard's tensors: views stay valid while `full` lives, owned bytes while the checkpoint
  // holds `owned`.
  auto owned = std::make_shared<const std::vector<ShardTensor>>(std::move(out));
  const std::string label =
      fmt::format("{} (tensor-parallel rank {} of {})", full.dir().string(), rank, l.size);
  static constexpr uint8_t kEmpty = 0;  // TensorInfo::data is never null
  std::vector<TensorInfo> tensors;
  tensors.reserve(owned->size());
  for (const ShardTensor& s : *owned) {
    TensorInfo t;
    t.name = s.name;
    t.file_dtype = s.dtype;
    t.dtype = core_dtype(s.dtype);
    t.shape = s.shape;
    t.nbytes = s.nbytes();
    t.data = t.nbytes > 0 ? s.data() : &kEmpty;
    t.file = label;
    if (t.numel() * safetensors_dtype_size(t.file_dtype) != t.nbytes) {
      return internal_error("{} in {}: a slice of shape [{}] holds {} bytes", t.name, label,
                            fmt::join(t.shape, ", "), t.nbytes);
    }
    tensors.push_back(std::move(t));
  }
  return Checkpoint::from_tensors(full.dir(), std::move(tensors), std::move(owned));
}

}  // namespace ls
