#include "model/model_stack.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attention/policy_registry.h"
#include "backend/backend_factory.h"
#include "core/log.h"
#include "io/model_config.h"
#include "model/dummy_weights.h"
#include "model/tensor_parallel.h"

namespace ls {

namespace {

struct PoolSizes {
  int32_t retrieval_blocks = 0;
  int32_t streaming_blocks = 0;
};

// Streaming heads hold a bounded number of blocks per sequence: the sink and decode ring for
// every running sequence, plus the larger prefill ring for two sequences prefilling at once
// (more prefills simply wait for blocks). Retrieval blocks get the rest of the budget.
// Streaming blocks for max_num_seqs sequences: each holds its sinks and decode ring; up to two
// prefills at a time hold the larger prefill ring.
int32_t streaming_blocks_for(const KvGeometry& g, int32_t max_num_seqs) {
  if (g.roles.num_streaming() == 0) return 0;
  const int32_t per_seq = g.num_sink_pages() + g.decode_ring_pages();
  const int32_t prefill_extra = std::max(0, g.prefill_ring_pages() - g.decode_ring_pages());
  return max_num_seqs * per_seq + 2 * prefill_extra;
}

Result<PoolSizes> size_pools(const KvGeometry& g, const ModelStackOptions& o, int32_t max_model_len,
                             int64_t budget_bytes) {
  PoolSizes sizes;
  sizes.streaming_blocks = streaming_blocks_for(g, o.max_num_seqs);
  const int64_t streaming_bytes =
      static_cast<int64_t>(sizes.streaming_blocks) * g.streaming_block_bytes();
  if (g.roles.num_retrieval() > 0) {
    const int64_t left = budget_bytes - streaming_bytes;
    const int64_t blocks = left / g.retrieval_block_bytes();
    const int64_t one_seq = (max_model_len + g.page_tokens - 1) / g.page_tokens;
    if (blocks < one_seq) {
      return resource_exhausted(
          "the KV budget of {:.1f} MB holds {} retrieval pages, fewer than one sequence of "
          "--max-model-len {} needs ({}); raise --kv-cache-bytes or lower --max-model-len",
          static_cast<double>(budget_bytes) / 1e6, std::max<int64_t>(0, blocks), max_model_len,
          one_seq);
    }
    sizes.retrieval_blocks = static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX / 2));
  } else if (streaming_bytes > budget_bytes) {
    return resource_exhausted("the KV budget of {:.1f} MB is below the {:.1f} MB streaming heads need",
                              static_cast<double>(budget_bytes) / 1e6,
                              static_cast<double>(streaming_bytes) / 1e6);
  }
  return sizes;
}

// Refuses a K/V page format the backend's kernels cannot read, at start-up, instead of computing
// attention wrongly. The CPU kernels read every format. The CUDA kernels keep float pages in the
// activation dtype, and read quantized pages at head_dim 64 and 128 (kernels/cuda/attention.cu:
// the decode kernel and the mma.sync prefill kernel have quantized instantiations there only).
Status check_kv_format(const KvGeometry& g, const Backend& backend) {
  if (backend.device() == Device::kCpu) return {};
  if (g.quant() != kernels::KvQuant::kNone) {
    if (g.head_dim != 64 && g.head_dim != 128) {
      return unimplemented(
          "--kv-cache-dtype {}: the CUDA attention kernels read {} pages at head_dim 64 and 128, "
          "the model has head_dim {}; use --kv-cache-dtype auto (or --device cpu, which reads "
          "every format)",
          kv_cache_dtype_name(g.cache_dtype), g.page_format_name(), g.head_dim);
    }
    return {};
  }
  if (g.page_dtype() != g.dtype) {
    return unimplemented(
        "--kv-cache-dtype {}: the CUDA kernels keep K/V in the activation dtype ({}); use "
        "--kv-cache-dtype auto (or --device cpu, whose kernels read f32, bf16 and f16 pages)",
        kv_cache_dtype_name(g.cache_dtype), dtype_name(g.dtype));
  }
  return {};
}

int64_t activation_bytes(const ModelConfig& c, int32_t tokens, int32_t rows, DType act) {
  const int64_t per_token = 3 * c.hidden_size() + 3 * c.num_attention_heads() * c.head_dim() +
                            4 * c.num_key_value_heads() * c.head_dim() + 3 * c.intermediate_size();
  // Logits: [rows, vocab] act and f32; a vocabulary slice also gathers every rank's slices.
  const int64_t parts = c.vocab_slice().parts;
  const int64_t logits = static_cast<int64_t>(rows) * c.vocab_size();
  return dtype_nbytes(act, per_token * tokens) + logits * dtype_size(act) +
         (parts > 1 ? parts * logits * (dtype_size(act) + 4) : logits * 4);
}


// The hierarchical tier's sizes: host pool (homes) and the per-request cache partition.
struct TierSizes {
  KvTierConfig config;
  int32_t retrieval_blocks = 0;
};

Result<TierSizes> size_tier(const KvGeometry& g, const ModelStackOptions& o, int32_t max_model_len,
                            int32_t decode_pages_per_head) {
  TierSizes t;
  const int64_t page_bytes = g.page_bytes();
  const int64_t home_block_bytes = 2 * static_cast<int64_t>(g.roles.num_retrieval()) * page_bytes;
  const int64_t one_seq = (max_model_len + g.page_tokens - 1) / g.page_tokens;
  int64_t host = o.host_kv_cache_bytes;
  if (host == 0) {
    const int64_t share =
        o.auto_host_kv_share_bytes > 0 ? o.auto_host_kv_share_bytes : free_ram_bytes() / 2;
    const int64_t want = static_cast<int64_t>(o.max_num_seqs) * one_seq * home_block_bytes;
    host = std::min(share, want);
    LS_LOG_INFO("--host-kv-cache-bytes not given: {:.1f} MB ({} {:.1f} MB of free RAM, capped "
                "at {:.1f} MB for {} sequences of {} tokens)",
                static_cast<double>(host) / 1e6,
                o.auto_host_kv_share_bytes > 0 ? "this tensor-parallel rank's share of"
                                               : "half of the",
                static_cast<double>(free_ram_bytes()) / 1e6, static_cast<double>(want) / 1e6,
                o.max_num_seqs, max_model_len);
  }
  const int64_t blocks = host / home_block_bytes;
  if (blocks < one_seq) {
    return resource_exhausted(
        "the host KV pool of {:.1f} MB holds {} retrieval blocks, fewer than one sequence of "
        "--max-model-len {} needs ({}); raise --host-kv-cache-bytes or lower --max-model-len",
        static_cast<double>(host) / 1e6, std::max<int64_t>(0, blocks), max_model_len, one_seq);
  }
  t.retrieval_blocks = static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX / 2));

  const int32_t layer_need = tier_slots_for_layer(g, max_model_len);
  int64_t per_row = 0;
  if (o.device_kv_cache_bytes > 0) {
    per_row = o.device_kv_cache_bytes / (2 * page_bytes) / o.max_num_seqs;
  } else {
    const int64_t step_need = tier_slots_for_step(g, max_model_len, decode_pages_per_head);
    per_row = std::max<int64_t>(
        layer_need, static_cast<int64_t>(std::ceil(o.offload_buffer_ratio * static_cast<double>(step_need))));
  }
  // More slots than the request can ever have pages buys nothing.
  per_row = std::min<int64_t>(per_row, one_seq * g.roles.num_retrieval());
  if (per_row < layer_need) {
    return resource_exhausted(
        "the device KV cache gives each of --max-num-seqs {} requests {} head-pages, fewer than "
        "one layer of a --max-model-len {} request needs ({}, {:.1f} MB for all requests); raise "
        "--device-kv-cache-bytes or lower --max-model-len / --max-num-seqs",
        o.max_num_seqs, per_row, max_model_len, layer_need,
        static_cast<double>(int64_t{layer_need} * o.max_num_seqs * 2 * page_bytes) / 1e6);
  }
  t.config.enabled = true;
  t.config.num_rows = o.max_num_seqs;
  t.config.slots_per_row = static_cast<int32_t>(std::min<int64_t>(per_row, INT32_MAX / 2 / o.max_num_seqs));
  t.config.replacement = o.kv_plain_lru ? KvReplacement::kPlainLru : KvReplacement::kBucketedLru;
  t.config.budget = o.elastic_device_budgets ? KvBudgetMode::kElastic : KvBudgetMode::kEven;
  t.config.bucket_ticks = std::max(1, g.num_layers);
  t.config.num_buckets = 64;
  LS_RETURN_IF_ERROR(t.config.validate());
  return t;
}

}  // namespace

int64_t free_ram_bytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

ModelStack::~ModelStack() {
  tp_executor.reset();  // joins the rank threads before the ranks' stacks go
  // Recorded decode steps hold the ranks' NCCL collectives, and NCCL's teardown waits until
  // every CUDA graph that captured a collective of a communicator is destroyed: the ranks'
  // runners go, and the recordings, which the backends own (CudaBackend::graphs_), are dropped
  // before the communicators, or destroying those waits forever. The backends go last.
  for (size_t r = tp_ranks.size(); r-- > 0;) {
    if (!tp_ranks[r]->backend) continue;
    tp_ranks[r]->backend->bind_thread();
    tp_ranks[r]->runner.reset();
    tp_ranks[r]->backend->drop_graphs();
  }
  // Each rank's communicator and stack are freed with the rank's device current (CUDA handles
  // and memory belong to a device).
  for (size_t r = tp_comms.size(); r-- > 0;) {
    if (r < tp_ranks.size() && tp_ranks[r]->backend) tp_ranks[r]->backend->bind_thread();
    tp_comms[r].reset();
  }
  while (!tp_ranks.empty()) {
    if (tp_ranks.back()->backend) tp_ranks.back()->backend->bind_thread();
    tp_ranks.pop_back();
  }
}

Result<std::unique_ptr<ModelStack>> build_model_stack(const ModelStackOptions& o) {
  if (o.tensor_parallel_size > 1) return build_tensor_parallel_stack(o);
  auto stack = std::make_unique<ModelStack>();
  LS_ASSIGN_OR_RETURN(stack->backend, make_backend(o.device, o.num_threads, o.tp_rank));
  Backend& backend = *stack->backend;
  const TpShard shard{o.tp_rank, o.tp_ranks, o.tp_kv_order};
  LS_ASSIGN_OR_RETURN(const LoadFormat load_format, parse_load_format(o.load_format));
  LS_ASSIGN_OR_RETURN(stack->model, Model::load(o.model_dir, backend, o.quantization, shard,
                                                load_format, o.dummy_seed));
  const ModelConfig& c = stack->model->config();

  const auto max_pos = static_cast<int32_t>(std::min<int64_t>(c.max_position_embeddings(), INT32_MAX / 2));
  stack->max_model_len = o.max_model_len > 0 ? o.max_model_len : max_pos;
  if (stack->max_model_len > max_pos) {
    LS_LOG_WARN("--max-model-len {} exceeds the model's max_position_embeddings {}",
                stack->max_model_len, max_pos);
  }
  if (c.sliding_window().has_value() && *c.sliding_window() < stack->max_model_len) {
    return unimplemented(
        "{}: sliding-window attention (sliding_window = {}) is not supported yet; run with "
        "--max-model-len {} or less",
        c.source(), *c.sliding_window(), *c.sliding_window());
  }

  PolicyModelInfo info;
  info.num_layers = static_cast<int32_t>(c.num_hidden_layers());
  info.num_q_heads = static_cast<int32_t>(c.num_attention_heads());
  info.num_kv_heads = static_cast<int32_t>(c.num_key_value_heads());
  info.head_dim = static_cast<int32_t>(c.head_dim());
  if (shard.size > 1) {  // this rank's kv heads: the policy keeps their roles in the whole model
    LS_ASSIGN_OR_RETURN(ModelConfig full, load_model_config(o.model_dir));
    LS_ASSIGN_OR_RETURN(TpLayout layout, make_tp_layout(full, shard));
    info.global_num_kv_heads = static_cast<int32_t>(full.num_key_value_heads());
    info.kv_head_ids = layout.kv_heads_of(shard.rank);
  }
  LS_ASSIGN_OR_RETURN(stack->policy, make_attention_policy(o.attention, info));

  KvGeometry g = stack->policy->kv_geometry();
  g.dtype = backend.act_dtype();
  g.max_chunk_tokens = o.max_step_tokens;
  g.cache_dtype = resolve_kv_cache_dtype(o.kv_cache_dtype, g.dtype);
  LS_RETURN_IF_ERROR(g.validate());
  LS_RETURN_IF_ERROR(check_kv_format(g, backend));

  const int32_t logit_rows = o.max_logit_rows > 0 ? o.max_logit_rows : o.max_num_seqs;
  int64_t budget = o.kv_cache_bytes;
  if (budget == 0) {
    const int64_t pages = (stack->max_model_len + g.page_tokens - 1) / g.page_tokens;
    const int64_t want =
        static_cast<int64_t>(o.max_num_seqs) * pages * g.retrieval_block_bytes() +
        static_cast<int64_t>(streaming_blocks_for(g, o.max_num_seqs)) * g.streaming_block_bytes();
    if (backend.device() == Device::kCpu) {
      budget = std::min(want, backend.device_memory_total_bytes() / 4);
    } else {
      const int64_t arena =
          o.layer_segmented_prefill
              ? dtype_nbytes(g.dtype, int64_t{stack->max_model_len} * c.hidden_size())
              : 0;  // the layer-segmented prefill's hidden states
      const int64_t reserve = activation_bytes(c, o.max_step_tokens, logit_rows, g.dtype) +
                              arena + (int64_t{1} << 30);  // workspace, metadata, fragmentation
      const int64_t usable = static_cast<int64_t>(
          static_cast<double>(backend.device_memory_total_bytes()) * o.gpu_memory_utilization);
      const int64_t used = backend.device_memory_total_bytes() - backend.device_memory_free_bytes();
      budget = std::min(want, usable - used - reserve);
      if (budget <= 0) {
        return resource_exhausted(
            "--gpu-memory-utilization {} lets the engine use {:.2f} GB of the GPU's {:.2f} GB, but "
            "{:.2f} GB are in use already (weights and other processes) and activations need "
            "{:.2f} GB more, leaving nothing for the KV cache; raise --gpu-memory-utilization or "
            "lower --max-num-batched-tokens",
            o.gpu_memory_utilization, static_cast<double>(usable) / 1e9,
            static_cast<double>(backend.device_memory_total_bytes()) / 1e9,
            static_cast<double>(used) / 1e9, static_cast<double>(reserve) / 1e9);
      }
    }
  }
  if (g.summary_group_pages > 0) {
    // The coarse summaries (per request row, u32 order keys) come out of the same device budget.
    const int64_t pages = (stack->max_model_len + g.page_tokens - 1) / g.page_tokens;
    const int64_t groups = (pages + g.summary_group_pages - 1) / g.summary_group_pages;
    budget -= 2 * int64_t{o.max_num_seqs} * g.roles.num_retrieval() * groups * g.head_dim * 4;
  }
  KvTierConfig tier;
  PoolSizes sizes;
  if (o.kv_offload && g.roles.num_retrieval() > 0) {
    LS_ASSIGN_OR_RETURN(TierSizes t, size_tier(g, o, stack->max_model_len,
                                               stack->policy->decode_pages_per_head()));
    tier = t.config;
    sizes.retrieval_blocks = t.retrieval_blocks;
    sizes.streaming_blocks = streaming_blocks_for(g, o.max_num_seqs);
  } else {
    if (o.kv_offload) LS_LOG_INFO("--kv-offload on: {} has no retrieval heads, nothing to offload",
                                  stack->policy->name());
    LS_ASSIGN_OR_RETURN(sizes, size_pools(g, o, stack->max_model_len, budget));
  }
  const int64_t requested_host_blocks = sizes.retrieval_blocks;
  SummaryPlacement summaries;
  if (g.summary_group_pages > 0) {
    summaries.num_rows = o.max_num_seqs;
    summaries.max_pages_per_seq =
        static_cast<int32_t>((stack->max_model_len + g.page_tokens - 1) / g.page_tokens);
    const std::string& where = o.attention.fine_summary_memory;
    summaries.fine_on_host = where == "host" || (where == "auto" && tier.enabled);
  }
  Result<KvPool> created = KvPool::create(g, backend, sizes.retrieval_blocks,
                                          sizes.streaming_blocks, tier, summaries);
  // A host pool that cannot be pinned whole (locked-memory limits, fragmentation) shrinks by
  // halves, with a warning, while it still holds one sequence of max_model_len; never silently.
  const int32_t one_seq = (stack->max_model_len + g.page_tokens - 1) / g.page_tokens;
  while (tier.enabled && !created.ok() &&
         created.status().code() == StatusCode::kResourceExhausted &&
         sizes.retrieval_blocks / 2 >= one_seq) {
    LS_LOG_WARN("KV offload: allocating the {:.1f} MB host KV pool failed ({}); trying half",
                static_cast<double>(int64_t{sizes.retrieval_blocks} * 2 * g.roles.num_retrieval() *
                                    g.page_bytes()) / 1e6,
                created.status().message());
    sizes.retrieval_blocks /= 2;
    created = KvPool::create(g, backend, sizes.retrieval_blocks, sizes.streaming_blocks, tier,
                             summaries);
  }
  LS_ASSIGN_OR_RETURN(KvPool pool, std::move(created));
  if (tier.enabled) {
    const int64_t block_bytes = 2 * int64_t{g.roles.num_retrieval()} * g.page_bytes();
    if (sizes.retrieval_blocks < requested_host_blocks) {
      LS_LOG_WARN("KV offload: the host KV pool is {:.1f} MB, not the {:.1f} MB asked for: "
                  "pinning more host memory failed (see above); fewer or shorter requests fit. "
                  "/metrics reports longserve:host_pinned_bytes and longserve:kv_offload_host_bytes",
                  static_cast<double>(int64_t{sizes.retrieval_blocks} * block_bytes) / 1e6,
                  static_cast<double>(requested_host_blocks * block_bytes) / 1e6);
    }
    // The GPU reads homes through unified virtual addressing: pageable homes would fail every
    // tiered step, so refuse them at start-up instead.
    if (backend.device() != Device::kCpu && backend.host_memory_stats().pageable_bytes > 0) {
      return resource_exhausted(
          "KV offload: the host KV pool could not be pinned (page-locked), and the GPU reads it "
          "directly; raise the locked-memory limit (ulimit -l), lower --host-kv-cache-bytes, or "
          "run with --kv-offload off");
    }
  }
  stack->pool = std::make_unique<KvPool>(std::move(pool));
  stack->kv = std::make_unique<KvManager>(g, sizes.retrieval_blocks, sizes.streaming_blocks,
                                          o.max_num_seqs);
  LS_RETURN_IF_ERROR(stack->policy->bind(backend, o.max_num_seqs));

  RunnerConfig rc;
  rc.max_step_tokens = o.max_step_tokens;
  rc.max_seqs = o.max_num_seqs;
  rc.max_logit_rows = logit_rows;
  rc.max_model_len = stack->max_model_len;
  rc.record_decode_steps = o.record_decode_steps;
  rc.shared_prefix_attention = o.shared_prefix_attention;
  rc.layer_segment_rows = o.layer_segmented_prefill ? stack->max_model_len : 0;
  LS_ASSIGN_OR_RETURN(stack->runner, ModelRunner::create(*stack->model, *stack->kv, *stack->pool,
                                                         *stack->policy, rc));
  LS_LOG_INFO(
      "attention {}: {} retrieval + {} streaming kv heads, page {} (logical {}), KV cache {:.1f} "
      "MB ({} retrieval blocks, {} streaming blocks), max model len {}",
      stack->policy->name(), g.roles.num_retrieval(), g.roles.num_streaming(), g.page_tokens,
      g.logical_page_tokens, static_cast<double>(stack->pool->bytes()) / 1e6,
      sizes.retrieval_blocks, sizes.streaming_blocks, stack->max_model_len);
  if (g.summary_group_pages > 0) {
    LS_LOG_INFO("page summaries in two levels: coarse per {} pages ({} tokens) on the device "
                "{:.1f} MB, fine per logical page in {} {:.1f} MB",
                g.summary_group_pages, g.summary_group_pages * g.page_tokens,
                static_cast<double>(stack->pool->coarse_summary_bytes()) / 1e6,
                stack->pool->fine_summaries_on_host() ? "host memory" : "device memory",
                static_cast<double>(stack->pool->fine_summary_bytes()) / 1e6);
  }
  LS_LOG_INFO("KV pages {} (--kv-cache-dtype {}): {:.0f} bytes per token of context (retrieval "
              "heads, all layers, K + V + key summaries{}), {} bytes per head-page",
              g.page_format_name(), kv_cache_dtype_name(o.kv_cache_dtype),
              g.retrieval_bytes_per_token(),
              g.quant() != kernels::KvQuant::kNone ? ", per-token scales" : "", g.page_bytes());
  if (stack->pool->tiered()) {
    LS_LOG_INFO("KV offload on: host pool {:.1f} MB ({}), device page cache {} head-pages per "
                "request x {} requests ({:.1f} MB), {} LRU, {} budgets",
                static_cast<double>(stack->pool->host_bytes()) / 1e6,
                backend.device() == Device::kCpu ? "host RAM" : "pinned", tier.slots_per_row,
                tier.num_rows,
                static_cast<double>(int64_t{tier.num_cache_slots()} * 2 * g.page_bytes()) / 1e6,
                o.kv_plain_lru ? "plain" : "bucketed",
                o.elastic_device_budgets ? "elastic" : "even");
  }
  return stack;
}

}  // namespace ls
