#pragma once
// The shape of a KV cache, derived once from the model and the attention policy: which pool each
// (layer, kv head) lives in, page sizes, streaming windows, and the bytes of a block. Immutable.
//
// Two-way cache (LServe): retrieval heads keep every page (plus key min/max summaries per
// logical page when the policy selects pages); streaming heads keep their sink pages and a ring
// of local pages, so their memory does not grow with the context.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/kv_quant.h"

namespace ls {

enum class HeadPool : uint8_t { kRetrieval, kStreaming };

// Which pool each (layer, kv head) uses and its slot within a block of that pool.
class HeadRoles {
 public:
  HeadRoles() = default;
  // streaming[layer * num_kv_heads + head] says whether that head is a streaming head.
  HeadRoles(int32_t num_layers, int32_t num_kv_heads, const std::vector<bool>& streaming);

  int32_t num_layers() const { return num_layers_; }
  int32_t num_kv_heads() const { return num_kv_heads_; }
  HeadPool pool(int32_t layer, int32_t head) const { return pool_[index(layer, head)]; }
  int32_t slot(int32_t layer, int32_t head) const { return slot_[index(layer, head)]; }
  bool is_streaming(int32_t layer, int32_t head) const {
    return pool(layer, head) == HeadPool::kStreaming;
  }
  int32_t num_retrieval() const { return num_retrieval_; }  // head-pages per retrieval block
  int32_t num_streaming() const { return num_streaming_; }  // head-pages per streaming block
  // Streaming heads in one layer.
  int32_t num_streaming_in_layer(int32_t layer) const;
  // One line per layer, 'R' retrieval / 'S' streaming: "layer 0: RRSS".
  std::string describe() const;

 private:
  size_t index(int32_t layer, int32_t head) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(num_kv_heads_) +
           static_cast<size_t>(head);
  }
  int32_t num_layers_ = 0;
  int32_t num_kv_heads_ = 0;
  std::vector<HeadPool> pool_;  // [num_layers * num_kv_heads]
  std::vector<int32_t> slot_;   // [num_layers * num_kv_heads]
  int32_t num_retrieval_ = 0;
  int32_t num_streaming_ = 0;
};

// --kv-cache-dtype (vLLM's flag): the element format of K/V pages; the quantized formats are
// docs/kv-quantization.md. In a KvGeometry, kAuto means the activation dtype; the model stack
// resolves the flag's auto per backend first (resolve_kv_cache_dtype). f32 is the CPU's
// full-precision cache (the CUDA kernels refuse it). Page summaries always stay in the activation
// dtype, computed from the unquantized keys. f16 pages (llama.cpp's default cache type) are read
// by the CPU kernels; values past f16's range saturate at +-65504 when appended.
enum class KvCacheDtype : uint8_t { kAuto, kF32, kBF16, kFp8, kInt8, kInt4, kF16 };
std::string_view kv_cache_dtype_name(KvCacheDtype d);
Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name);
kernels::KvQuant kv_quant_of(KvCacheDtype d);
// The page format `requested` stands for on a backend with activations in `act`: auto is f16
// where activations are f32 (the CPU: half f32's bytes per decode step, llama.cpp's default
// cache type, 3 more significant bits than bf16 at the same speed; docs/kv-f16-cpu.md), the
// activation dtype otherwise (bf16 on CUDA). Any other value is kept.
KvCacheDtype resolve_kv_cache_dtype(KvCacheDtype requested, DType act);

struct KvGeometry {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::kF32;  // activation dtype: summaries, and K/V pages when cache_dtype is auto
  KvCacheDtype cache_dtype = KvCacheDtype::kAuto;  // element format of K/V pages

  int32_t page_tokens = 64;          // physical page (head-page) size
  int32_t logical_page_tokens = 16;  // summary granularity; divides page_tokens
  bool keep_summaries = false;       // retrieval heads keep key min/max per logical page
  int32_t summary_group_pages = 0;   // > 0: a coarse summary level per group of this many pages
  HeadRoles roles;

  int32_t sink_tokens = 128;
  int32_t prefill_local_tokens = 8192;
  int32_t decode_local_tokens = 256;
  int32_t max_chunk_tokens = 2048;  // largest prefill chunk: sizes the ring while prefilling

  int32_t logical_per_page() const { return page_tokens / logical_page_tokens; }
  int32_t num_sink_pages() const { return (sink_tokens + page_tokens - 1) / page_tokens; }
  // Ring capacity that lets queries of a chunk of `chunk_tokens` see `local_tokens` back:
  // ceil((chunk + local - 1) / page) + 1 pages (the window straddles page boundaries).
  int32_t ring_pages_for(int32_t chunk_tokens, int32_t local_tokens) const;
  // The prefill ring is never smaller than the decode ring: finish_prefill() only shrinks a
  // ring (keeping the newest pages), since growing it would change the column of pages already
  // written.
  int32_t prefill_ring_pages() const {
    return std::max(ring_pages_for(max_chunk_tokens, prefill_local_tokens), decode_ring_pages());
  }
  int32_t decode_ring_pages() const { return ring_pages_for(1, decode_local_tokens); }
  // Columns of a streaming block-table row: sink pages + the largest ring.
  int32_t streaming_table_stride() const;

  kernels::KvQuant quant() const { return kv_quant_of(cache_dtype); }
  // Float element type of unquantized pages (kU8 for quantized ones: bytes, see kv_quant.h).
  DType page_dtype() const;
  // "bf16", "f16", "f32", "fp8", "int8", "int4": what the pages hold.
  std::string_view page_format_name() const;
  int64_t page_bytes() const;  // one head-page of K (or of V), scales included
  // Pool bytes one token adds to the cache, all layers, K + V (+ summaries, amortised): the
  // retrieval heads' share; streaming heads are bounded per sequence and not counted.
  double retrieval_bytes_per_token() const;
  // One block of each pool, K + V (+ summaries for retrieval blocks).
  int64_t retrieval_block_bytes() const;
  int64_t streaming_block_bytes() const;

  Status validate() const;
};

}  // namespace ls
