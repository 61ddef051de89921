#include "tools/engine_flags.h"

#include <cstdlib>

namespace ls {

std::string default_model_dir() {
  if (const char* env = std::getenv("LONGSERVE_MODEL")) return env;
  return LONGSERVE_DEFAULT_MODEL_DIR;
}

void add_engine_flags(CLI::App& app, EngineConfig& c) {
  app.add_option("--model", c.model_dir,
                 "Hugging Face model directory, or a GGUF file (or a directory holding one) (default: the bundled model)");
  app.add_option("--device", c.device, "cpu or cuda")->capture_default_str();
  app.add_option("--threads", c.num_threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_option("--tensor-parallel-size", c.tensor_parallel_size,
                 "Split every layer over this many GPUs (1, 2, 4, 8) of one process with NCCL "
                 "(docs/tensor-parallel.md); on --device cpu only for testing")
      ->capture_default_str();
  app.add_option("--tp-all-reduce", c.tp_all_reduce,
                 "How GPU ranks all-reduce: auto (a one-shot kernel over peer-to-peer memory for "
                 "messages up to 2 MB when the GPUs have peer access, NCCL otherwise), nccl, or "
                 "p2p (refused without peer access) (docs/p2p-all-reduce.md)")
      ->capture_default_str();
  app.add_option("--max-model-len", c.max_model_len,
                 "Context limit in tokens (0: the model's max_position_embeddings)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", c.max_num_seqs, "Sequences per step")->capture_default_str();
  app.add_option("--max-num-batched-tokens", c.max_num_batched_tokens,
                 "Tokens per step (decode tokens + prefill chunk)")
      ->capture_default_str();
  app.add_option("--kv-cache-bytes", c.kv_cache_bytes, "KV cache budget in bytes (0: automatic)")
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", c.gpu_memory_utilization,
                 "Share of GPU memory the engine may use")
      ->capture_default_str();
  app.add_flag("--enforce-eager", c.enforce_eager,
               "CUDA: run decode steps op by op instead of replaying recorded CUDA graphs");
  app.add_option("--engine-seed", c.seed, "Engine seed (requests without a seed draw from it)")
      ->capture_default_str();
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
               "Share full KV pages between requests with the same prefix and keep them (LRU) "
               "after their requests end (docs/prefix-caching.md); on by default, "
               "--no-enable-prefix-caching turns it off")
      ->capture_default_str();
  app.add_option("--shared-prefix-attention", c.shared_prefix_attention,
                 "on|off: decode steps whose sequences share cached prefix pages attend the "
                 "shared part once per group (dense layers; docs/shared-prefix-attention.md)")
      ->capture_default_str();
  app.add_option("--kv-offload", c.kv_offload,
                 "on|off: keep retrieval heads' KV in host memory with a device page cache "
                 "(docs/hierarchical-kv.md)")
      ->capture_default_str();
  app.add_option("--host-kv-cache-bytes", c.host_kv_cache_bytes,
                 "Host KV pool with --kv-offload on (0: half of free RAM, capped at what "
                 "--max-num-seqs x --max-model-len can use; printed at start-up)")
      ->capture_default_str();
  app.add_option("--device-kv-cache-bytes", c.device_kv_cache_bytes,
                 "Device page cache with --kv-offload on, split evenly per request (0: from "
                 "--offload-buffer-ratio)")
      ->capture_default_str();
  app.add_option("--offload-buffer-ratio", c.offload_buffer_ratio,
                 "Automatic device page cache per request, in decode steps' worth of selected "
                 "pages (at least one layer of a --max-model-len request)")
      ->capture_default_str();
  app.add_option("--quantization", c.quantization,
                 "Linear weights: auto (a GGUF's quantized blocks as stored, read by the CPU "
                 "kernels), none (dequantize a GGUF at load), or q8_0|q4_0|q4_1|q4_k|q6_k "
                 "(quantize a safetensors checkpoint at load, CPU), or fp8 (e4m3 weights with "
                 "per-channel scales and per-token activations on FP8 tensor cores, CUDA; "
                 "docs/fp8-weights.md). FP8 checkpoints load as published with auto")
      ->capture_default_str();
  app.add_option("--load-format", c.load_format,
                 "Weights: auto (read the checkpoint) or dummy (every weight generated from "
                 "--dummy-seed, no tensor read: config.json and the tokenizer suffice; for "
                 "benchmarks, docs/dummy-weights.md)")
      ->capture_default_str();
  app.add_option("--dummy-seed", c.dummy_seed, "Seed of --load-format dummy's weights")
      ->capture_default_str();
  app.add_option("--kv-cache-replacement", c.kv_cache_replacement,
                 "Device page cache replacement: bucketed-lru (Spin) or lru")
      ->capture_default_str();
  app.add_option("--device-cache-budget", c.device_cache_budget,
                 "With --kv-offload on, how the device page cache is split over the running "
                 "requests: even (fixed, equal) or elastic (sized from each request's measured "
                 "working set and hit ratio, docs/device-cache-budgets.md)")
      ->capture_default_str();
  app.add_option("--device-budget-interval", c.device_budget_interval,
                 "Elastic budgets: decode steps between re-plans (a request that needs more "
                 "for its next step is re-planned at once)")
      ->capture_default_str();
  app.add_option("--decode-reserve-ratio", c.decode_reserve_ratio,
                 "Admission reserves KV for min(output tokens left, max(one page, this share of "
                 "the request's length)) of decode per request (docs/working-set-scheduling.md)")
      ->capture_default_str();
  app.add_option("--working-set-admission", c.working_set_admission,
                 "on|off: with --kv-offload on, admit a request only if the running requests' "
                 "working sets and its own fit the device page cache")
      ->capture_default_str();
  app.add_option("--working-set-window", c.working_set_window,
                 "Decode steps a request's working set spans (the union of their selections)")
      ->capture_default_str();
  app.add_option("--prefill-mode", c.prefill_mode,
                 "Prefill of long prompts: chunked, layer-segmented (layer by layer over "
                 "segments, docs/layer-segmented-prefill.md) or auto (layer-segmented with "
                 "--kv-offload on, chunked otherwise)")
      ->capture_default_str();
  app.add_option("--layer-segmented-min-tokens", c.layer_segmented_min_tokens,
                 "Prompts of at least this many tokens take layer-segmented prefill")
      ->capture_default_str();
  app.add_option("--prefill-segment-tokens", c.prefill_segment_tokens,
                 "Tokens per segment of a layer-segmented prefill (0: --max-num-batched-tokens, "
                 "the chunk boundaries of chunked prefill)")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", c.kv_cache_dtype,
                 "K/V page format: auto (f16 on the CPU, bf16 on CUDA), f32 (CPU only), bf16, "
                 "f16 (CPU only; saturates at +-65504), fp8 (e4m3), int8 or int4, with per-token "
                 "scales (docs/kv-quantization.md)")
      ->capture_default_str();
  AttentionConfig& a = c.attention;
  app.add_option("--attention", a.policy, "Attention policy: dense, streaming, quest or lserve")
      ->capture_default_str();
  app.add_option("--head-pattern", a.head_pattern_path,
                 "DuoAttention full_attention_heads.tsv choosing streaming heads (lserve)");
  app.add_option("--streaming-ratio", a.streaming_ratio,
                 "Share of kv heads that become streaming heads (lserve)")
      ->capture_default_str();
  app.add_option("--token-budget", a.token_budget,
                 "Tokens a selecting head attends to per decode step (quest, lserve)")
      ->capture_default_str();
  app.add_option("--page-tokens", a.page_tokens,
                 "Physical page size (-1: the policy's default, 64; quest 16)")
      ->capture_default_str();
  app.add_option("--logical-page-tokens", a.logical_page_tokens,
                 "Logical page size of the key summaries (-1: 16; quest uses the page)")
      ->capture_default_str();
  app.add_option("--select-interval", a.select_interval,
                 "Decode steps a page selection is reused for")
      ->capture_default_str();
  app.add_option("--keep-first-page", a.keep_first_page,
                 "on|off: selecting heads (quest, lserve) always read page 0, the attention sink, "
                 "besides the last page; the rest of the budget goes by the page bound")
      ->capture_default_str();
  app.add_option("--page-summary-levels", a.page_summary_levels,
                 "Page summaries in 1 level, or 2: a coarse level per group of pages that page "
                 "selection scores first, refining only the groups that can matter (same pages)")
      ->capture_default_str();
  app.add_option("--summary-group-pages", a.summary_group_pages,
                 "Pages per coarse summary group with --page-summary-levels 2 (-1: 1024 tokens)")
      ->capture_default_str();
  app.add_option("--fine-summary-memory", a.fine_summary_memory,
                 "Where the per-logical-page summaries live with 2 levels: auto (host with "
                 "--kv-offload on), device or host")
      ->capture_default_str();
  app.add_option("--sink-tokens", a.sink_tokens, "Attention-sink tokens of streaming heads")
      ->capture_default_str();
  app.add_option("--prefill-local-tokens", a.prefill_local_tokens,
                 "Local window of streaming heads in prefill")
      ->capture_default_str();
  app.add_option("--decode-local-tokens", a.decode_local_tokens,
                 "Local window of streaming heads in decode")
      ->capture_default_str();
}

void finalize_engine_flags(EngineConfig& c) {
  if (c.model_dir.empty()) c.model_dir = default_model_dir();
}

}  // namespace ls
