#include "model/model_stack.h"

#include <algorithm>

#include "attention/policy_registry.h"
#include "backend/backend_factory.h"
#include "core/log.h"

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

int64_t activation_bytes(const ModelConfig& c, int32_t tokens, int32_t rows, DType act) {
  const int64_t per_token = 3 * c.hidden_size() + 3 * c.num_attention_heads() * c.head_dim() +
                            4 * c.num_key_value_heads() * c.head_dim() + 3 * c.intermediate_size();
  return dtype_nbytes(act, per_token * tokens) +
         static_cast<int64_t>(rows) * c.vocab_size() * (dtype_size(act) + 4);
}

}  // namespace

Result<std::unique_ptr<ModelStack>> build_model_stack(const ModelStackOptions& o) {
  auto stack = std::make_unique<ModelStack>();
  LS_ASSIGN_OR_RETURN(stack->backend, make_backend(o.device, o.num_threads));
  Backend& backend = *stack->backend;
  LS_ASSIGN_OR_RETURN(stack->model, Model::load(o.model_dir, backend));
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
  LS_ASSIGN_OR_RETURN(stack->policy, make_attention_policy(o.attention, info));

  KvGeometry g = stack->policy->kv_geometry();
  g.dtype = backend.act_dtype();
  g.max_chunk_tokens = o.max_step_tokens;
  LS_RETURN_IF_ERROR(g.validate());

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
      const int64_t reserve = activation_bytes(c, o.max_step_tokens, logit_rows, g.dtype) +
                              (int64_t{1} << 30);  // workspace, metadata, fragmentation
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
  LS_ASSIGN_OR_RETURN(PoolSizes sizes, size_pools(g, o, stack->max_model_len, budget));
  LS_ASSIGN_OR_RETURN(KvPool pool, KvPool::create(g, backend, sizes.retrieval_blocks,
                                                  sizes.streaming_blocks));
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
  LS_ASSIGN_OR_RETURN(stack->runner, ModelRunner::create(*stack->model, *stack->kv, *stack->pool,
                                                         *stack->policy, rc));
  LS_LOG_INFO(
      "attention {}: {} retrieval + {} streaming kv heads, page {} (logical {}), KV cache {:.1f} "
      "MB ({} retrieval blocks, {} streaming blocks), max model len {}",
      stack->policy->name(), g.roles.num_retrieval(), g.roles.num_streaming(), g.page_tokens,
      g.logical_page_tokens, static_cast<double>(stack->pool->bytes()) / 1e6,
      sizes.retrieval_blocks, sizes.streaming_blocks, stack->max_model_len);
  return stack;
}

}  // namespace ls
