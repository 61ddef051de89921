#pragma once
// Plain-data views of the paged KV cache and of one layer's attention plan, consumed by the
// CPU kernels (kernels/cpu) and the CUDA kernels (kernels/cuda) alike. Every pointer is in the
// memory of the device that runs the kernel. Nothing here decides policy: attention/ builds
// these structs from an AttentionPlan, kv/ owns the memory.
//
// Head-wise pages. A *head-page* holds `page_tokens` consecutive tokens of ONE kv head of ONE
// layer: K and V each [page_tokens, head_dim]. A pool stores head-pages in blocks: block b holds
// one head-page for each of the pool's `heads_per_block` (layer, kv head) pairs, so
//   head_page(b, slot) = b * heads_per_block + slot
// and one block table per sequence (logical block -> physical block) serves every layer and
// head of that pool. The head-page is the unit of selection and of transfer between tiers; the
// block is the unit of allocation (all heads of a pool grow in lockstep).

#include <cstdint>

#include "core/dtype.h"
#include "kernels/kv_quant.h"

namespace ls::kernels {

// One pool of head-pages (retrieval pool or streaming pool).
struct PagedKvPool {
  void* k = nullptr;  // [num_blocks * heads_per_block, page_tokens, head_dim] dtype, or quantized
                      //   head-pages of kv_quant_page_bytes() bytes each (kernels/kv_quant.h)
  void* v = nullptr;  // same
  DType dtype = DType::kF32;  // element type when quant == kNone (kU8 when quantized)
  int32_t num_blocks = 0;
  int32_t heads_per_block = 0;
  int32_t page_tokens = 0;
  int32_t head_dim = 0;
  // Tiered pool (hierarchical KV, docs/hierarchical-kv.md). With page_slot set, `k`/`v` are the
  // device page cache, [num_cache_slots, page_tokens, head_dim] dtype each, and head-page h is
  // read from slot page_slot[h] (-1: not resident; readers skip it, the residency op makes every
  // page a kernel reads resident first). Every head-page also has its home in home_k/home_v,
  // [num_blocks * heads_per_block, page_tokens, head_dim] dtype (host memory on GPU backends):
  // writers (kv_append) write the home and, when resident, the slot. page_slot == nullptr: the
  // untiered pool, k/v indexed by head-page; the home fields are then unused.
  // Ordering: the GPU decode kernel may read page_slot before its programmatic-launch wait (like
  // the block tables), so the op that writes page_slot (page_residency) must not be the kernel
  // launched right before attention; the tier runs copy_pages in between.
  const int32_t* page_slot = nullptr;  // [num_blocks * heads_per_block]
  void* home_k = nullptr;
  void* home_v = nullptr;
  int32_t num_cache_slots = 0;
  // Page format (kernels/kv_quant.h); kNone: plain `dtype` elements. Last, so positional
  // initialisers of the fields above stay valid.
  KvQuant quant = KvQuant::kNone;
};

// Monotone map of a float to an unsigned key, a > b iff coarse_key(a) > coarse_key(b) (no NaN;
// -0 < +0), and back. Coarse summaries are stored as these keys (PageSummaries).
inline uint32_t coarse_key(float f) {
  uint32_t u = 0;
  __builtin_memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline float coarse_value(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  float f = 0.0f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// Bytes of one head-page of K (or of V) in `pool`.
inline int64_t pool_page_bytes(const PagedKvPool& pool) {
  return pool.quant == KvQuant::kNone
             ? dtype_nbytes(pool.dtype, int64_t{pool.page_tokens} * pool.head_dim)
             : kv_quant_page_bytes(pool.quant, pool.page_tokens, pool.head_dim);
}

// Where a kernel reads head-page `head_page` of `pool`: its index into pool.k / pool.v, or -1
// when the tiered pool does not hold it on the device.
inline int64_t storage_page(const PagedKvPool& pool, int64_t head_page) {
  return pool.page_slot == nullptr ? head_page : pool.page_slot[head_page];
}

// Key min/max summaries of retrieval head-pages, per logical page (LServe hierarchical paging).
// Indexed by head-page id like the pool; lives in its own arrays so it can stay resident when
// pages move between tiers.
struct PageSummaries {
  void* kmin = nullptr;  // [num_head_pages, logical_per_page, head_dim] dtype
  void* kmax = nullptr;  // [num_head_pages, logical_per_page, head_dim] dtype
  DType dtype = DType::kF32;
  int32_t logical_page_tokens = 0;  // tokens per logical page; page_tokens % this == 0
  int32_t logical_per_page = 0;     // page_tokens / logical_page_tokens

  // Two-level summaries (docs/two-level-summaries.md). group_pages > 0 adds a coarse level: per
  // sequence row, per retrieval head-page slot, per group of `group_pages` consecutive physical
  // pages of the sequence (group j = pages [j * group_pages, (j + 1) * group_pages)), the
  // element-wise min of the members' kmin and max of their kmax as stored (so exactly), hence a
  // Quest bound that dominates every member logical page's bound. The coarse level is indexed by
  // the sequence's row (`rows`, set per step by the runner) rather than by head-page, so it is
  // sized by rows x groups of the longest context, not by the pool. Stored as order keys
  // (coarse_key below) that only ever grow: coarse_kmax holds key(max), coarse_kmin key(-min);
  // 0 is "empty", so a row is reset by zeroing it (the runner does, when a sequence starts in
  // the row), and writers fold with a plain or atomic max, in any order. Writers fold every fine
  // summary they store into its group; page_select scores groups first and refines only the
  // groups whose bound can still reach the chosen pages (kernels/cpu/page_select.h).
  // group_pages == 0: one level, the coarse fields unused. The fine arrays above may live in
  // host memory (pinned on a GPU: kernels read them through unified addressing).
  void* coarse_kmin = nullptr;    // [num_rows, heads_per_block, max_groups, head_dim] u32
  void* coarse_kmax = nullptr;    // same
  int32_t group_pages = 0;        // physical pages per group; 0: one level
  int32_t max_groups = 0;         // groups per row (ceil(max pages per sequence / group_pages))
  int32_t num_rows = 0;           // rows of the coarse arrays
  const int32_t* rows = nullptr;  // [num_seqs] the coarse row of each sequence of the step
  bool two_level() const { return group_pages > 0 && coarse_kmin && coarse_kmax && rows; }
};

// How one kv head of a layer chooses the keys it attends to.
enum class HeadMode : int32_t {
  kCausal = 0,     // retrieval pool, every key at position <= the query's
  kStreaming = 1,  // streaming pool, keys in the sink or in the local window (Λ mask)
  kSelected = 2,   // retrieval pool, the pages listed in the sequence's `selected` row plus every
                   // page after the last listed one (pages started since a reused selection),
                   // causal within them; a sequence whose row is -1 or lists no page (prefill,
                   // context within the budget) is treated as kCausal
};

// Streaming heads keep `num_sink_pages` sink pages, then a ring of `ring_pages[s]` pages:
// logical page j >= num_sink_pages lives in ring slot (j - num_sink_pages) % ring_pages[s].
// The streaming block table row of sequence s is [sink blocks..., ring slot blocks...].
inline int32_t streaming_table_index(int32_t logical_page, int32_t num_sink_pages,
                                     int32_t ring_pages) {
  return logical_page < num_sink_pages
             ? logical_page
             : num_sink_pages + (logical_page - num_sink_pages) % ring_pages;
}

// Λ mask: may a query at position q see the key at position k (both absolute)?
inline bool streaming_visible(int64_t q, int64_t k, int32_t sink_tokens, int32_t local_tokens) {
  return k <= q && (k < sink_tokens || q - k < local_tokens);
}

// Everything one layer's attention needs for a batch of sequences. Queries of sequence s are
// rows [q_indptr[s], q_indptr[s+1]) of q; they sit at absolute positions
// kv_lens[s] - q_len .. kv_lens[s] - 1 (this step's K/V are already appended).
struct AttentionParams {
  // queries / output
  const void* q = nullptr;  // [num_tokens, num_q_heads, head_dim] q_dtype
  void* out = nullptr;      // [num_tokens, num_q_heads, head_dim] q_dtype
  DType q_dtype = DType::kF32;
  int32_t num_tokens = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;  // query head h uses kv head h / (num_q_heads / num_kv_heads)
  int32_t head_dim = 0;
  float scale = 1.0f;  // softmax scale, usually 1/sqrt(head_dim)

  // batch
  int32_t num_seqs = 0;
  const int32_t* q_indptr = nullptr;  // [num_seqs + 1]
  const int32_t* kv_lens = nullptr;   // [num_seqs] tokens in the cache, including this step's

  // per kv head of this layer
  const int32_t* head_mode = nullptr;  // [num_kv_heads] HeadMode
  const int32_t* head_slot = nullptr;  // [num_kv_heads] slot of the head-page within a block of
                                       //   its pool (retrieval or streaming, by head_mode)

  // retrieval pool
  PagedKvPool retrieval;
  const int32_t* retrieval_blocks = nullptr;  // [num_seqs, retrieval_blocks_stride]
  int32_t retrieval_blocks_stride = 0;

  // streaming pool
  PagedKvPool streaming;
  const int32_t* streaming_blocks = nullptr;  // [num_seqs, streaming_blocks_stride]
  int32_t streaming_blocks_stride = 0;
  int32_t num_sink_pages = 0;
  const int32_t* ring_pages = nullptr;    // [num_seqs] ring capacity in pages
  int32_t sink_tokens = 0;
  const int32_t* local_tokens = nullptr;  // [num_seqs] local window of each sequence

  // selected pages (HeadMode::kSelected): logical page indices into retrieval_blocks, ascending.
  // Selections persist across decode steps (reuse interval), so they are stored per sequence
  // row (the sequence's slot), not per batch position.
  const int32_t* selected_rows = nullptr;  // [num_seqs] row of each sequence, or -1 (none)
  const int32_t* selected = nullptr;       // [num_rows, num_kv_heads, max_selected]
  const int32_t* num_selected = nullptr;   // [num_rows, num_kv_heads]
  int32_t max_selected = 0;
  // Whether the work enqueued just before this call may still be writing `selected` /
  // `num_selected` (the page selector ran on this stream this step). false lets the GPU decode
  // kernel read the selection, the block tables and the first pages' addresses while the
  // previous kernel drains (a programmatic dependent launch); everything else is step metadata
  // no kernel writes. The CPU backend runs in order and ignores it.
  bool selection_just_written = true;
};

// Append this step's keys/values into the pools (streaming heads into their ring).
// Token i of sequence s goes to absolute position kv_lens[s] - q_len + i.
// Optional index request: with summaries.kmin set, the same call also folds this step's keys
// into the retrieval heads' page summaries, with the result of page_summary_update on
// summary_update_of(params) (below). The attention policy places it (fill_append), so a layer
// appends and indexes in one launch; with kmin null the append touches no summary.
struct KvAppendParams {
  const void* k = nullptr;  // [num_tokens, num_kv_heads, head_dim] src_dtype (post-RoPE)
  const void* v = nullptr;  // [num_tokens, num_kv_heads, head_dim] src_dtype
  DType src_dtype = DType::kF32;
  int32_t num_tokens = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t num_seqs = 0;
  const int32_t* q_indptr = nullptr;   // [num_seqs + 1]
  const int32_t* kv_lens = nullptr;    // [num_seqs] after the append
  const int32_t* head_mode = nullptr;  // [num_kv_heads] kStreaming -> streaming pool, else retrieval
  const int32_t* head_slot = nullptr;  // [num_kv_heads]
  PagedKvPool retrieval;
  const int32_t* retrieval_blocks = nullptr;  // [num_seqs, retrieval_blocks_stride]
  int32_t retrieval_blocks_stride = 0;
  PagedKvPool streaming;
  const int32_t* streaming_blocks = nullptr;  // [num_seqs, streaming_blocks_stride]
  int32_t streaming_blocks_stride = 0;
  int32_t num_sink_pages = 0;
  const int32_t* ring_pages = nullptr;  // [num_seqs]
  PageSummaries summaries;              // index request, kept per retrieval head-page (retrieval's
                                        //   heads_per_block and page_tokens); kmin == nullptr: none
  // Tiered retrieval pool: false skips the write-through to the homes (only the resident slot is
  // written). For benchmarks only (what saving costs a step): the homes go stale, so a page
  // fetched later is wrong.
  bool write_homes = true;
};

// Fold this step's keys into the per-logical-page key min/max of retrieval heads (the "index"
// of Quest / LServe). A logical page whose first token arrives now is initialised from it, so
// summaries are exact for partly filled pages and never read stale memory.
struct SummaryUpdateParams {
  const void* k = nullptr;  // [num_tokens, num_kv_heads, head_dim] src_dtype (post-RoPE)
  DType src_dtype = DType::kF32;
  int32_t num_tokens = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t num_seqs = 0;
  const int32_t* q_indptr = nullptr;   // [num_seqs + 1]
  const int32_t* kv_lens = nullptr;    // [num_seqs] after the append
  const int32_t* head_mode = nullptr;  // [num_kv_heads]; kStreaming heads are skipped
  const int32_t* head_slot = nullptr;  // [num_kv_heads]
  int32_t page_tokens = 0;
  int32_t heads_per_block = 0;
  const int32_t* retrieval_blocks = nullptr;  // [num_seqs, retrieval_blocks_stride]
  int32_t retrieval_blocks_stride = 0;
  PageSummaries summaries;
};

// Two-level summaries with prefix caching: a sequence that starts from cached pages (a hit)
// finds their fine summaries stored with them, written by the sequence that computed them, but
// its own coarse row empty. This folds the stored fine summaries of its first num_pages pages
// into coarse row `row`, as the writers would have (max of order keys of the stored values), so
// the row bounds those pages exactly as if the sequence had appended them itself.
struct CoarseFoldParams {
  PageSummaries summaries;          // two_level() apart from `rows` (unused)
  int32_t row = -1;                 // coarse row of the sequence
  int32_t heads_per_block = 0;      // retrieval head-page slots per block (all layers)
  int32_t head_dim = 0;
  int32_t page_tokens = 0;
  const int32_t* blocks = nullptr;  // [num_pages] i32 on the device: the sequence's retrieval blocks
  int32_t num_pages = 0;
};

// The summary update an append's index request stands for: the append's keys, batch, heads and
// retrieval block table, on the retrieval pool's geometry. Kernels that fuse the two run this.
inline SummaryUpdateParams summary_update_of(const KvAppendParams& a) {
  SummaryUpdateParams p;
  p.k = a.k;
  p.src_dtype = a.src_dtype;
  p.num_tokens = a.num_tokens;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.num_seqs = a.num_seqs;
  p.q_indptr = a.q_indptr;
  p.kv_lens = a.kv_lens;
  p.head_mode = a.head_mode;
  p.head_slot = a.head_slot;
  p.page_tokens = a.retrieval.page_tokens;
  p.heads_per_block = a.retrieval.heads_per_block;
  p.retrieval_blocks = a.retrieval_blocks;
  p.retrieval_blocks_stride = a.retrieval_blocks_stride;
  p.summaries = a.summaries;
  return p;
}

// Quest / LServe page scoring and top-K for kSelected heads of one layer (decode: one query
// token per sequence). For each (sequence, kv head) with head_mode == kSelected:
//   bound_h(lp) = sum_d max(q_h[d] * kmax[lp][d], q_h[d] * kmin[lp][d])   per query head h
//   group score of logical page lp = max_h (bound_h(lp) - max_lp' bound_h(lp'))
//   physical page score = max over its logical pages (only logical pages holding tokens)
// then the top (k - 1) pages among all but the last, ranked by score (ties: lower page index
// first), plus the last page; k = min(max(3, budget_pages), num_pages). When
// num_pages <= budget_pages every page is listed. Output sorted ascending.
struct PageSelectParams {
  const void* q = nullptr;  // [num_tokens, num_q_heads, head_dim] q_dtype; sequence s scores
                            // with its newest query, row q_indptr[s + 1] - 1 (mixed batches
                            // need no gather)
  DType q_dtype = DType::kF32;
  int32_t num_seqs = 0;
  const int32_t* q_indptr = nullptr;  // [num_seqs + 1]
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  const int32_t* kv_lens = nullptr;    // [num_seqs]
  const int32_t* head_mode = nullptr;  // [num_kv_heads]
  const int32_t* head_slot = nullptr;  // [num_kv_heads]
  int32_t page_tokens = 0;
  const int32_t* retrieval_blocks = nullptr;  // [num_seqs, retrieval_blocks_stride]
  int32_t retrieval_blocks_stride = 0;
  int32_t heads_per_block = 0;
  PageSummaries summaries;
  int32_t budget_pages = 0;             // token budget / page_tokens
  int32_t keep_first_page = 0;          // 1: page 0 (the attention sink) is always chosen, like
                                        //   the last page, whatever its score
  const int32_t* out_rows = nullptr;    // [num_seqs] row to write for each sequence; -1: skip it
                                        //   (its selection is being reused, or it is prefilling)
  int32_t* selected = nullptr;          // [num_rows, num_kv_heads, max_selected] out
  int32_t* num_selected = nullptr;      // [num_rows, num_kv_heads] out
  int32_t max_selected = 0;             // >= max(3, budget_pages)
  float* page_scores = nullptr;         // optional [num_seqs, num_kv_heads, max_pages] out; with
                                        //   two levels, pages of groups not refined are -inf
  int32_t max_pages = 0;                // stride of page_scores
  int32_t* refined_pages = nullptr;     // optional [num_seqs, num_kv_heads] out: physical pages
                                        //   whose fine summaries were read (all, one level)
  int32_t max_bounds_blocks = 0;        // CUDA: > 0 caps the bounds kernels' blocks per (sequence,
                                        //   kv head), so each warp loops over many tiles (tests);
                                        //   0: as many as fill the device. The CPU ignores it.
};

}  // namespace ls::kernels
