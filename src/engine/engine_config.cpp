#include "engine/engine_config.h"

#include "kv/kv_geometry.h"

namespace ls {

Status EngineConfig::validate() const {
  if (model_dir.empty()) return invalid_argument("--model is required");
  if (device != "cpu" && device != "cuda") {
    return invalid_argument("--device must be cpu or cuda (got '{}')", device);
  }
  if (max_num_seqs <= 0) return invalid_argument("--max-num-seqs must be positive (got {})", max_num_seqs);
  if (max_num_batched_tokens <= 0) {
    return invalid_argument("--max-num-batched-tokens must be positive (got {})",
                            max_num_batched_tokens);
  }
  if (max_num_batched_tokens < max_num_seqs) {
    return invalid_argument(
        "--max-num-batched-tokens ({}) must be at least --max-num-seqs ({}): every running "
        "sequence needs a token each step",
        max_num_batched_tokens, max_num_seqs);
  }
  if (max_model_len < 0) return invalid_argument("--max-model-len must be >= 0");
  if (kv_cache_bytes < 0) return invalid_argument("--kv-cache-bytes must be >= 0");
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }
  if (host_kv_cache_bytes < 0 || device_kv_cache_bytes < 0) {
    return invalid_argument("--host-kv-cache-bytes and --device-kv-cache-bytes must be >= 0");
  }
  if (!(offload_buffer_ratio >= 0.0)) return invalid_argument("--offload-buffer-ratio must be >= 0");
  if (kv_cache_replacement != "bucketed-lru" && kv_cache_replacement != "lru") {
    return invalid_argument("--kv-cache-replacement must be bucketed-lru or lru (got '{}')",
                            kv_cache_replacement);
  }
  if (device_cache_budget != "even" && device_cache_budget != "elastic") {
    return invalid_argument("--device-cache-budget must be even or elastic (got '{}')",
                            device_cache_budget);
  }
  if (device_budget_interval < 1) {
    return invalid_argument("--device-budget-interval must be at least 1 (got {})",
                            device_budget_interval);
  }
  if (!(decode_reserve_ratio >= 0.0 && decode_reserve_ratio <= 1.0)) {
    return invalid_argument("--decode-reserve-ratio must be in [0, 1] (got {})", decode_reserve_ratio);
  }
  if (working_set_window < 1) {
    return invalid_argument("--working-set-window must be at least 1 (got {})", working_set_window);
  }
  if (prefill_mode != "chunked" && prefill_mode != "layer-segmented" && prefill_mode != "auto") {
    return invalid_argument("--prefill-mode must be chunked, layer-segmented or auto (got '{}')",
                            prefill_mode);
  }
  if (layer_segmented_min_tokens < 1) {
    return invalid_argument("--layer-segmented-min-tokens must be >= 1 (got {})",
                            layer_segmented_min_tokens);
  }
  if (prefill_segment_tokens < 0 || prefill_segment_tokens > max_num_batched_tokens) {
    return invalid_argument(
        "--prefill-segment-tokens must be in [0, --max-num-batched-tokens = {}] (got {})",
        max_num_batched_tokens, prefill_segment_tokens);
  }
  LS_RETURN_IF_ERROR(parse_kv_cache_dtype(kv_cache_dtype).status());
  if (tensor_parallel_size != 1 && tensor_parallel_size != 2 && tensor_parallel_size != 4 &&
      tensor_parallel_size != 8) {
    return invalid_argument("--tensor-parallel-size must be 1, 2, 4 or 8 (got {})",
                            tensor_parallel_size);
  }
  if (tp_all_reduce != "auto" && tp_all_reduce != "nccl" && tp_all_reduce != "p2p") {
    return invalid_argument("--tp-all-reduce must be auto, nccl or p2p (got '{}')", tp_all_reduce);
  }
  if (tp_all_reduce == "p2p" && device == "cpu") {
    return invalid_argument(
        "--tp-all-reduce p2p needs GPUs with peer access (--device cuda); the CPU ranks sum "
        "through shared memory");
  }
  if (quantization != "auto" && quantization != "none" && quantization != "fp8" &&
      quantization != "q8_0" &&
      quantization != "q4_0" && quantization != "q4_1" && quantization != "q4_k" &&
      quantization != "q6_k") {
    return invalid_argument("--quantization must be auto, none, fp8, q8_0, q4_0, q4_1, q4_k or q6_k "
                            "(got '{}')", quantization);
  }
  if (load_format != "auto" && load_format != "dummy") {
    return invalid_argument("--load-format must be auto or dummy (got '{}')", load_format);
  }
  return attention.validate();
}

}  // namespace ls
