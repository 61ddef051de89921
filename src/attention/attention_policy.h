#pragma once
// AttentionPolicy: the algorithm's part of the sparse-attention pipeline (Spin's Index / Select;
// the Attention kernel is shared). A policy decides
//  - once, which kv heads are streaming heads and how the KV cache is paged (kv_geometry());
//  - each step, on the host, what every sequence does (plan_step): its local window, whether it
//    reselects pages now or reuses its last selection;
//  - each layer, on the device, how page summaries are kept (index) and which pages each
//    (sequence, kv head) visits (select), written into the plan the attention kernel consumes
//    (fill_attention).
// Index rides on the KV append: a policy that keeps summaries places its index request in the
// append's params (fill_append), so one launch per layer writes the new K/V rows and folds their
// keys into the summaries. There is no separate index call, so no summary is updated twice.
// Policies are injected, never branched on: adding one adds files (policies/) and a line in
// policy_registry.cpp.

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "kernels/paged_kv.h"
#include "attention/step_plan.h"
#include "kv/kv_geometry.h"

namespace ls {

// Device pointers of one layer's step, filled by the model.
struct LayerAttentionContext {
  int32_t layer = 0;
  int32_t num_seqs = 0;
  int32_t num_tokens = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  const void* q = nullptr;  // [num_tokens, num_q_heads, head_dim] act dtype, post-RoPE
  DType act_dtype = DType::kF32;
  const int32_t* q_indptr = nullptr;          // [num_seqs + 1]
  const int32_t* kv_lens = nullptr;           // [num_seqs]
  const int32_t* retrieval_blocks = nullptr;  // [num_seqs, retrieval_blocks_stride]
  int32_t retrieval_blocks_stride = 0;
  const int32_t* selected_rows = nullptr;     // [num_seqs]
  const int32_t* select_rows = nullptr;       // [num_seqs]
  kernels::PagedKvPool retrieval;
  kernels::PageSummaries summaries;
};

class AttentionPolicy {
 public:
  virtual ~AttentionPolicy() = default;

  virtual std::string_view name() const = 0;
  // Head roles, page sizes, windows and whether summaries are kept. dtype and max_chunk_tokens
  // are left for the caller (they belong to the backend and the scheduler).
  virtual const KvGeometry& kv_geometry() const = 0;
  // Most retrieval pages one kv head reads in a decode step (0: every page of the context). The
  // hierarchical KV tier sizes its device cache from it; the policy's choices stay its own.
  virtual int32_t decode_pages_per_head() const { return 0; }
  // The longest context (kv_len) at which a decode step attends exactly the keys a prefill of
  // the same token attends, so the K/V it writes are what a prefill would write up to kernel
  // rounding (a decode step's GEMMs see fewer rows than a prefill chunk's, so not the same bits):
  // unlimited while every head reads every page; streaming heads' windows (sinks + the smaller
  // local window) and selecting heads' token budget bound it. Prefix caching keys the pages
  // decode steps fill only up to there (docs/prefix-caching.md).
  virtual int64_t exact_decode_len() const = 0;

  // Allocates per-layer device state (head modes, the selection store for max_seqs rows).
  virtual Status bind(Backend& backend, int32_t max_seqs) = 0;

  // Host, once per step, before the forward: fills `plan` for `seqs`.
  virtual void plan_step(std::span<const StepSequence> seqs, StepAttentionPlan& plan) = 0;

  // Device, per layer, after this step's K/V were appended (and indexed).
  virtual void select(Backend& backend, const LayerAttentionContext& ctx) = 0;

  // Writes this layer's head modes/slots and selection store into the kernel params.
  virtual void fill_attention(int32_t layer, kernels::AttentionParams& params) const = 0;
  // Writes this layer's head modes/slots into the KV append's params and, for a policy that
  // keeps page summaries, its index request: `summaries` (the KV memory's, all layers share the
  // head-page indexing) become params.summaries. Left null, the append indexes nothing.
  virtual void fill_append(int32_t layer, const kernels::PageSummaries& summaries,
                           kernels::KvAppendParams& params) const = 0;
};

// Facts about the model a policy needs to lay out its heads.
struct PolicyModelInfo {
  int32_t num_layers = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  // Tensor parallelism (docs/tensor-parallel.md): the model's kv heads per layer, and the global
  // ids of this rank's num_kv_heads heads in each layer ([num_layers * num_kv_heads], layer by
  // layer). A head pattern is chosen over the whole model and each rank keeps its heads' roles.
  // Empty / 0: the policy sees the whole model.
  int32_t global_num_kv_heads = 0;
  std::vector<int32_t> kv_head_ids;
};

}  // namespace ls
