#pragma once
// EngineConfig: the user's knobs for one engine, validated once, immutable afterwards. Facts about
// the model live in ModelConfig; geometry derived from both lives in KvGeometry.

#include <cstdint>
#include <filesystem>
#include <string>

#include "attention/attention_config.h"
#include "core/status.h"
#include "model/tp_fault.h"

namespace ls {

struct EngineConfig {
  std::filesystem::path model_dir;
  std::string device = "cpu";        // cpu | cuda
  int32_t num_threads = 0;           // CPU threads (<= 0: every core)
  AttentionConfig attention;
  int32_t max_num_seqs = 16;             // sequences per step
  int32_t max_num_batched_tokens = 2048; // tokens per step: decode tokens + prefill chunks
  int32_t max_model_len = 0;             // context limit; 0 = the model's max_position_embeddings
  int64_t kv_cache_bytes = 0;            // 0 = automatic (see engine_core.cpp)
  bool enforce_eager = false;            // CUDA: never record decode steps as graphs
  double gpu_memory_utilization = 0.9;   // CUDA: share of device memory the engine may use
  uint64_t seed = 0;                     // draws seeds for requests that give none
  std::string served_model_name;         // empty: the model directory's name
  // Hierarchical KV memory (docs/hierarchical-kv.md).
  bool kv_offload = false;               // retrieval heads' KV in host memory, device page cache
  int64_t host_kv_cache_bytes = 0;       // host pool; 0: half of free RAM, capped at what fits
  int64_t device_kv_cache_bytes = 0;     // device page cache; 0: from offload_buffer_ratio
  double offload_buffer_ratio = 4.0;     // auto cache: decode steps' worth of pages per request
  std::string kv_cache_replacement = "bucketed-lru";  // bucketed-lru | lru
  // Per-request device budgets (docs/device-cache-budgets.md): even | elastic.
  std::string device_cache_budget = "even";
  int32_t device_budget_interval = 8;  // elastic: decode steps between re-plans
  // Admission control (docs/working-set-scheduling.md).
  double decode_reserve_ratio = 1.0 / 16;  // KV reserved for decode, share of a request's length
  bool working_set_admission = true;       // --kv-offload on: admit by working sets (SparseServe)
  int32_t working_set_window = 12;         // decode steps a working set spans
  // Prefill of long prompts (docs/layer-segmented-prefill.md): chunked | layer-segmented | auto
  // (layer-segmented with kv_offload, chunked without).
  std::string prefill_mode = "auto";
  int32_t layer_segmented_min_tokens = 8192;  // prompts this long or longer take it
  int32_t prefill_segment_tokens = 0;         // 0: max_num_batched_tokens (the chunk size)

  // Whether prefill_mode resolves to layer-segmented prefill.
  bool layer_segmented_prefill() const {
    return prefill_mode == "layer-segmented" || (prefill_mode == "auto" && kv_offload);
  }
  // K/V page format (docs/kv-quantization.md): auto (f16 on the CPU, whose f32 activations are
  // stored as f16, resolve_kv_cache_dtype; bf16 on CUDA) | f32 (CPU) | bf16 | f16 (CPU) | fp8 |
  // int8 | int4.
  std::string kv_cache_dtype = "auto";
  // Linear weights (docs/gguf.md): auto (GGUF blocks as stored where the backend reads them),
  // none (dequantize GGUF at load), or q8_0|q4_0|q4_1|q4_k|q6_k (quantize a safetensors
  // checkpoint at load; CPU), or fp8 (docs/fp8-weights.md: e4m3 weights quantized at load,
  // W8A8 on FP8 tensor cores; CUDA). FP8 checkpoints load as published under auto.
  std::string quantization = "auto";
  // Weights (vLLM's --load-format): auto reads the checkpoint; dummy generates every weight from
  // dummy_seed (docs/dummy-weights.md), so the directory needs only config.json and tokenizer.
  std::string load_format = "auto";
  uint64_t dummy_seed = 0;
  // Automatic prefix caching (docs/prefix-caching.md; vLLM's --enable-prefix-caching): full KV
  // pages are shared between requests with the same prefix and kept, LRU, after they end. On by
  // default: outputs equal caching off (tests/model/prefix_caching_test.cpp) and a miss costs
  // nothing measurable (docs/prefix-caching.md).
  bool enable_prefix_caching = true;
  // Tensor parallelism (docs/tensor-parallel.md): split every layer over this many GPUs (1, 2,
  // 4 or 8) of one process. On --device cpu the ranks are threads over the same cores: for
  // testing only (it is slower than one rank), and the engine warns.
  int32_t tensor_parallel_size = 1;
  // How the GPU ranks all-reduce (docs/p2p-all-reduce.md): auto (a one-shot kernel over
  // peer-to-peer memory for messages that fit its buffer when every pair of GPUs has peer
  // access, NCCL otherwise), nccl, or p2p (as auto, but refused where peer access is missing).
  std::string tp_all_reduce = "auto";
  // Tests only (no flag): one injected tensor-parallel rank failure (model/tp_fault.h).
  TpFault tp_fault;
  // Shared-prefix decode attention (docs/shared-prefix-attention.md): decode steps whose
  // sequences share prefix blocks (prefix-cache hits) attend the shared part once per group, in
  // layers whose heads all read every page. Without shared blocks it never engages.
  bool shared_prefix_attention = true;

  Status validate() const;
};

}  // namespace ls
