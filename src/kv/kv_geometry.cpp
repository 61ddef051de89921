#include "kv/kv_geometry.h"

#include <fmt/format.h>

#include <algorithm>

namespace ls {

HeadRoles::HeadRoles(int32_t num_layers, int32_t num_kv_heads, const std::vector<bool>& streaming)
    : num_layers_(num_layers), num_kv_heads_(num_kv_heads) {
  const size_t n = static_cast<size_t>(num_layers) * static_cast<size_t>(num_kv_heads);
  pool_.resize(n);
  slot_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const bool s = i < streaming.size() && streaming[i];
    pool_[i] = s ? HeadPool::kStreaming : HeadPool::kRetrieval;
    slot_[i] = s ? num_streaming_++ : num_retrieval_++;
  }
}

int32_t HeadRoles::num_streaming_in_layer(int32_t layer) const {
  int32_t n = 0;
  for (int32_t h = 0; h < num_kv_heads_; ++h) n += is_streaming(layer, h) ? 1 : 0;
  return n;
}

std::string HeadRoles::describe() const {
  std::string out;
  for (int32_t l = 0; l < num_layers_; ++l) {
    out += fmt::format("layer {:>2}: ", l);
    for (int32_t h = 0; h < num_kv_heads_; ++h) out += is_streaming(l, h) ? 'S' : 'R';
    out += '\n';
  }
  return out;
}

int32_t KvGeometry::ring_pages_for(int32_t chunk_tokens, int32_t local_tokens) const {
  const int32_t span = std::max(1, chunk_tokens) + std::max(1, local_tokens) - 1;
  return (span + page_tokens - 1) / page_tokens + 1;
}

int32_t KvGeometry::streaming_table_stride() const {
  if (roles.num_streaming() == 0) return 0;
  return num_sink_pages() + std::max(prefill_ring_pages(), decode_ring_pages());
}

std::string_view kv_cache_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kF32:
      return "f32";
    case KvCacheDtype::kBF16:
      return "bf16";
    case KvCacheDtype::kF16:
      return "f16";
    case KvCacheDtype::kFp8:
      return "fp8";
    case KvCacheDtype::kInt8:
      return "int8";
    case KvCacheDtype::kInt4:
      return "int4";
    default:
      return "auto";
  }
}

Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name) {
  for (KvCacheDtype d : {KvCacheDtype::kAuto, KvCacheDtype::kF32, KvCacheDtype::kBF16,
                         KvCacheDtype::kF16, KvCacheDtype::kFp8, KvCacheDtype::kInt8,
                         KvCacheDtype::kInt4}) {
    if (name == kv_cache_dtype_name(d)) return d;
  }
  if (name == "fp8_e4m3") return KvCacheDtype::kFp8;  // vLLM's explicit spelling
  return invalid_argument(
      "--kv-cache-dtype must be auto, f32, bf16, f16, fp8, int8 or int4 (got '{}')", name);
}

kernels::KvQuant kv_quant_of(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kFp8:
      return kernels::KvQuant::kFp8;
    case KvCacheDtype::kInt8:
      return kernels::KvQuant::kInt8;
    case KvCacheDtype::kInt4:
      return kernels::KvQuant::kInt4;
    default:
      return kernels::KvQuant::kNone;
  }
}

KvCacheDtype resolve_kv_cache_dtype(KvCacheDtype requested, DType act) {
  if (requested != KvCacheDtype::kAuto) return requested;
  return act == DType::kF32 ? KvCacheDtype::kF16 : KvCacheDtype::kAuto;
}

DType KvGeometry::page_dtype() const {
  switch (cache_dtype) {
    case KvCacheDtype::kAuto:
      return dtype;
    case KvCacheDtype::kF32:
      return DType::kF32;
    case KvCacheDtype::kBF16:
      return DType::kBF16;
    case KvCacheDtype::kF16:
      return DType::kF16;
    default:
      return DType::kU8;
  }
}

std::string_view KvGeometry::page_format_name() const {
  return quant() == kernels::KvQuant::kNone ? dtype_name(page_dtype())
                                             : kernels::kv_quant_name(quant());
}

int64_t KvGeometry::page_bytes() const {
  if (quant() != kernels::KvQuant::kNone) {
    return kernels::kv_quant_page_bytes(quant(), page_tokens, head_dim);
  }
  return dtype_nbytes(page_dtype(), static_cast<int64_t>(page_tokens) * head_dim);
}

double KvGeometry::retrieval_bytes_per_token() const {
  return static_cast<double>(retrieval_block_bytes()) / page_tokens;
}

int64_t KvGeometry::retrieval_block_bytes() const {
  const int64_t heads = roles.num_retrieval();
  int64_t bytes = 2 * heads * page_bytes();
  if (keep_summaries) {
    bytes += 2 * heads * dtype_nbytes(dtype, static_cast<int64_t>(logical_per_page()) * head_dim);
  }
  return bytes;
}

int64_t KvGeometry::streaming_block_bytes() const {
  return 2 * static_cast<int64_t>(roles.num_streaming()) * page_bytes();
}

Status KvGeometry::validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return invalid_argument("KV geometry needs positive layers/heads/head_dim, got {}/{}/{}",
                            num_layers, num_kv_heads, head_dim);
  }
  if (page_tokens <= 0 || logical_page_tokens <= 0 || page_tokens % logical_page_tokens != 0) {
    return invalid_argument(
        "--page-tokens ({}) must be a positive multiple of --logical-page-tokens ({})",
        page_tokens, logical_page_tokens);
  }
  if (roles.num_layers() != num_layers || roles.num_kv_heads() != num_kv_heads) {
    return internal_error("head roles cover {}x{} heads, model has {}x{}", roles.num_layers(),
                          roles.num_kv_heads(), num_layers, num_kv_heads);
  }
  if (sink_tokens < 0 || prefill_local_tokens <= 0 || decode_local_tokens <= 0) {
    return invalid_argument(
        "sink tokens must be >= 0 and local windows > 0 (sink {}, prefill local {}, decode "
        "local {})",
        sink_tokens, prefill_local_tokens, decode_local_tokens);
  }
  if (max_chunk_tokens <= 0) return invalid_argument("max chunk tokens must be positive");
  if (cache_dtype == KvCacheDtype::kInt4 && head_dim % 2 != 0) {
    return invalid_argument("--kv-cache-dtype int4 packs two elements per byte and needs an even "
                            "head_dim (the model has {})",
                            head_dim);
  }
  return {};
}

}  // namespace ls
