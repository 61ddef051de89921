#include "model/tensor_parallel.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/safetensors.h"

namespace ls {

std::vector<int32_t> TpLayout::kv_heads_of(int32_t rank) const {
  std::vector<int32_t> ids;
  for (int64_t h = 0; h < kv_heads_per_rank; ++h) {
    ids.push_back(static_cast<int32_t>(first_kv_head(rank) + h));
  }
  return ids;
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
  return l;
}

ModelConfig shard_config(const ModelConfig& c, const TpLayout& l) {
  return c.with_shard_sizes(l.q_heads_per_rank, l.kv_heads_per_rank, l.inter_per_rank);
}

namespace {

// One output tensor of the shard: its bytes and header entry.
struct ShardTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// rows [begin, begin + count) of t viewed as [rows, row_elems] (a 1-D tensor: elements).
ShardTensor slice_rows(const TensorInfo& t, int64_t begin, int64_t count) {
  ShardTensor out{t.name, t.file_dtype, t.shape, {}};
  const int64_t row_elems = t.shape.size() > 1 ? t.shape[1] : 1;
  const int64_t row_bytes = row_elems * safetensors_dtype_size(t.file_dtype);
  out.shape[0] = count;
  out.bytes.resize(static_cast<size_t>(count * row_bytes));
  std::memcpy(out.bytes.data(), static_cast<const uint8_t*>(t.data) + begin * row_bytes,
              out.bytes.size());
  return out;
}

// columns [begin, begin + count) of the [rows, cols] tensor t.
ShardTensor slice_cols(const TensorInfo& t, int64_t begin, int64_t count) {
  ShardTensor out{t.name, t.file_dtype, t.shape, {}};
  const int64_t es = safetensors_dtype_size(t.file_dtype);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  out.shape[1] = count;
  out.bytes.resize(static_cast<size_t>(rows * count * es));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.bytes.data() + r * count * es,
                static_cast<const uint8_t*>(t.data) + (r * cols + begin) * es,
                static_cast<size_t>(count * es));
  }
  return out;
}

ShardTensor copy_whole(const TensorInfo& t, bool zero) {
  ShardTensor out{t.name, t.file_dtype, t.shape, {}};
  out.bytes.resize(static_cast<size_t>(t.nbytes), 0);
  if (!zero) std::memcpy(out.bytes.data(), t.data, out.bytes.size());
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The safetensors bytes of `tensors` (header padded to 8 bytes, data contiguous).
std::vector<uint8_t> serialize(const std::vector<ShardTensor>& tensors) {
  std::string header = "{";
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ShardTensor& t = tensors[i];
    const auto n = static_cast<int64_t>(t.bytes.size());
    header += fmt::format("{}\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          i ? "," : "", t.name, safetensors_dtype_name(t.dtype),
                          fmt::join(t.shape, ","), offset, offset + n);
    offset += n;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::vector<uint8_t> out(8 + header.size() + static_cast<size_t>(offset));
  const uint64_t len = header.size();
  for (int b = 0; b < 8; ++b) out[static_cast<size_t>(b)] = static_cast<uint8_t>(len >> (8 * b));
  std::memcpy(out.data() + 8, header.data(), header.size());
  size_t at = 8 + header.size();
  for (const ShardTensor& t : tensors) {
    if (!t.bytes.empty()) std::memcpy(out.data() + at, t.bytes.data(), t.bytes.size());
    at += t.bytes.size();
  }
  return out;
}

}  // namespace

Result<Checkpoint> shard_checkpoint(const Checkpoint& full, const ModelConfig& c,
                                    const TpLayout& l, int32_t rank) {
  const int64_t d = c.head_dim();
  const int64_t q0 = l.first_q_head(rank) * d, qn = l.q_heads_per_rank * d;
  const int64_t k0 = l.first_kv_head(rank) * d, kn = l.kv_heads_per_rank * d;
  const int64_t i0 = rank * l.inter_per_rank, in = l.inter_per_rank;
  std::vector<ShardTensor> out;
  for (const std::string& name : full.names()) {
    LS_ASSIGN_OR_RETURN(const TensorInfo* t, full.get(name));
    // The loader checks every shape later; here a sliced tensor only needs the rows or columns
    // it is sliced along.
    auto need = [&](size_t dims, int64_t dim, int64_t extent) -> Status {
      if (t->shape.size() != dims || t->shape[static_cast<size_t>(dim)] < extent) {
        return invalid_argument("{} in {}: shape [{}] cannot be split for tensor parallelism",
                                name, t->file, fmt::join(t->shape, ", "));
      }
      return {};
    };
    const bool weight = ends_with(name, ".weight");
    const size_t dims = weight ? 2 : 1;
    if (ends_with(name, "self_attn.q_proj.weight") || ends_with(name, "self_attn.q_proj.bias")) {
      LS_RETURN_IF_ERROR(need(dims, 0, q0 + qn));
      out.push_back(slice_rows(*t, q0, qn));
    } else if (ends_with(name, "self_attn.k_proj.weight") ||
               ends_with(name, "self_attn.k_proj.bias") ||
               ends_with(name, "self_attn.v_proj.weight") ||
               ends_with(name, "self_attn.v_proj.bias")) {
      LS_RETURN_IF_ERROR(need(dims, 0, k0 + kn));
      out.push_back(slice_rows(*t, k0, kn));
    } else if (ends_with(name, "mlp.gate_proj.weight") || ends_with(name, "mlp.gate_proj.bias") ||
               ends_with(name, "mlp.up_proj.weight") || ends_with(name, "mlp.up_proj.bias")) {
      LS_RETURN_IF_ERROR(need(dims, 0, i0 + in));
      out.push_back(slice_rows(*t, i0, in));
    } else if (ends_with(name, "self_attn.o_proj.weight")) {
      LS_RETURN_IF_ERROR(need(2, 1, q0 + qn));
      out.push_back(slice_cols(*t, q0, qn));
    } else if (ends_with(name, "mlp.down_proj.weight")) {
      LS_RETURN_IF_ERROR(need(2, 1, i0 + in));
      out.push_back(slice_cols(*t, i0, in));
    } else if (ends_with(name, "self_attn.o_proj.bias") || ends_with(name, "mlp.down_proj.bias")) {
      out.push_back(copy_whole(*t, rank != 0));  // added once, by rank 0, before the all-reduce
    } else {
      out.push_back(copy_whole(*t, false));  // replicated
    }
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                      SafetensorsFile::from_memory(
                          fmt::format("{} (tensor-parallel rank {} of {})",
                                      full.dir().string(), rank, l.size),
                          serialize(out)));
  return Checkpoint::from_file(full.dir(), std::move(file));
}

}  // namespace ls
