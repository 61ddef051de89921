#pragma once
// The knobs a ModelStack is built from (no backend headers: the engine fills these).

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "attention/attention_config.h"
#include "kv/kv_geometry.h"
#include "model/tp_fault.h"

namespace ls {

struct ModelStackOptions {
  std::filesystem::path model_dir;
  std::string device = "cpu";
  int32_t num_threads = 0;
  AttentionConfig attention;
  int32_t max_num_seqs = 16;
  int32_t max_step_tokens = 2048;
  int32_t max_logit_rows = 0;      // rows of logits one step may return; 0: max_num_seqs
  int32_t max_model_len = 0;       // 0: the model's max_position_embeddings
  int64_t kv_cache_bytes = 0;      // 0: automatic
  double gpu_memory_utilization = 0.9;
  bool record_decode_steps = true;  // replay decode steps as recorded graphs where the backend can
  bool shared_prefix_attention = true;  // RunnerConfig::shared_prefix_attention
  // Hierarchical KV memory (docs/hierarchical-kv.md): retrieval heads' pages in host memory with a
  // device page cache partitioned per request.
  bool kv_offload = false;
  int64_t host_kv_cache_bytes = 0;    // the homes; 0: a share of free RAM (capped at what fits)
  // The automatic host pool's share of RAM (host_kv_cache_bytes 0): 0 takes half of the RAM free
  // when the stack is built; the tensor-parallel builder reads that half once and gives each of
  // its N ranks 1/N of it, so that ranks built at once do not each claim the same half.
  int64_t auto_host_kv_share_bytes = 0;
  int64_t device_kv_cache_bytes = 0;  // the page cache; 0: from offload_buffer_ratio
  double offload_buffer_ratio = 4.0;  // auto cache per request: this many decode steps' pages
  bool kv_plain_lru = false;          // plain LRU instead of Spin's bucketed LRU
  bool elastic_device_budgets = false;  // partitions sized per request (device-cache-budgets.md)
  // Layer-segmented prefill (docs/layer-segmented-prefill.md): the runner keeps a hidden-state
  // arena of max_model_len rows for one prompt at a time.
  bool layer_segmented_prefill = false;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;  // K/V page format (docs/kv-quantization.md)
  std::string quantization = "auto";  // EngineConfig::quantization
  // --load-format dummy: weights generated from dummy_seed instead of read (model/dummy_weights.h).
  std::string load_format = "auto";
  uint64_t dummy_seed = 0;
  // Tensor parallelism (docs/tensor-parallel.md): ranks, one device each (cuda:0 .. N-1; on the
  // CPU, threads of this process, for tests).
  int32_t tensor_parallel_size = 1;
  std::string tp_all_reduce = "auto";  // EngineConfig::tp_all_reduce
  TpFault tp_fault;                    // tests only: one injected rank failure (model/tp_fault.h)
  // Set by the tensor-parallel builder when it builds one rank's own stack: rank tp_rank of
  // tp_ranks (its backend on device tp_rank, its model shard, its heads' policy and KV pool).
  int32_t tp_rank = 0;
  int32_t tp_ranks = 1;
  std::vector<int32_t> tp_kv_order;  // TpLayout::kv_order (empty: the default layout)
};

}  // namespace ls
