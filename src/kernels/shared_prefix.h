#pragma once
// Shared-prefix decode attention (Hydragen, docs/shared-prefix-attention.md): when G decoding
// sequences share the first tokens of their context (the same physical KV pages, e.g. a cached
// document every question is about), attention over the shared part is computed once for the
// whole group: the G x group query heads of one kv head are stacked into one matrix and multiplied
// against each prefix key block once (a matrix-matrix product, read once for the group), instead
// of G matrix-vector products that each read the prefix. Each sequence's own suffix is attended
// per sequence, and the parts are merged by log-sum-exp:
//   out = sum_j e^(lse_j - M) o_j / sum_j e^(lse_j - M),   M = max_j lse_j
// where part j holds o_j = softmax-weighted values over its keys and lse_j = log sum_k e^(s_k).
//
// The plan (host, built once per step): which rows attend which key range through whose block
// table. Its input is which sequences share how many prefix tokens (SharedPrefixGroups), which
// the KV manager knows (prefix caching gives the shared blocks); kernels read only the items.
// The kernels (kernels/cpu/shared_prefix_attention.h, kernels/cuda/shared_prefix_attention.h)
// take the decode step's AttentionParams (one query per sequence) plus the plan.
//
// Dense heads only: every kv head must visit every page (HeadMode::kCausal, or kSelected
// without a selection for any sequence of the step). With sparse policies the pages a sequence
// visits inside the prefix differ per sequence (its own selection) or are not the prefix at all
// (streaming heads: sinks + ring), so there is no shared product to compute: plan_shared_prefix
// refuses such a step and the caller runs the ordinary per-sequence attention.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/paged_kv.h"

namespace ls::kernels {

// Which sequences of a decode step share a prefix (host arrays). Group i is the batch positions
// seqs[group_indptr[i] .. group_indptr[i + 1]), sharing their first prefix_tokens[i] tokens:
// the retrieval block table entries of logical pages [0, prefix_tokens / page_tokens) are the
// same blocks for every member, and when the prefix ends inside a page, that page's first
// prefix_tokens % page_tokens rows hold the same keys for every member (one shared page, or
// copy-on-write copies of it); the kernels read the prefix through the first member's table.
// A sequence is in at most one group; sequences in no group are attended as usual.
struct SharedPrefixGroups {
  std::vector<int32_t> group_indptr = {0};  // [num_groups + 1]
  std::vector<int32_t> seqs;                // [group_indptr.back()] batch positions
  std::vector<int32_t> prefix_tokens;       // [num_groups]
};

// One unit of work: the rows of `num_seqs` sequences (item_seqs[seq_begin ..]) times the query
// heads of one kv head (the kernel's second grid dimension), against keys at absolute positions
// [key_begin, key_end) mapped through the retrieval block table of batch position table_seq.
// Every row's result goes to partial slot `part` of its (sequence, query head).
struct SharedPrefixItem {
  int32_t seq_begin = 0;
  int32_t num_seqs = 0;
  int32_t table_seq = 0;
  int32_t key_begin = 0;
  int32_t key_end = 0;
  int32_t part = 0;
  int32_t reserved[2] = {0, 0};  // 32 bytes, so a device array of items stays aligned
};

struct SharedPrefixPlanConfig {
  int32_t max_rows = 64;        // rows (sequences x query heads per kv head) per item; the CUDA
                                //   kernel takes at most 64
  int32_t split_tokens = 1024;  // keys per item at most (prefix and suffix alike), > 0
};

struct SharedPrefixPlan {
  std::vector<SharedPrefixItem> items;  // prefix items first (the long ones), then suffix items
  std::vector<int32_t> item_seqs;       // batch positions the items' rows refer to
  std::vector<int32_t> num_parts;       // [num_seqs] partial slots of each sequence
  int32_t max_parts = 0;                // max of num_parts (>= 1)
  int32_t max_item_rows = 0;            // max over items of num_seqs x query heads per kv head
  int64_t shared_keys = 0;              // prefix keys attended once per group instead of per member
};

// Builds the plan of a decode step from host copies of its metadata: kv_lens [num_seqs],
// head_mode [num_kv_heads], selected_rows [num_seqs] (null: no selections), and optionally the
// retrieval block table [num_seqs, blocks_stride] (null: not checked) to verify that members
// share the prefix's full pages. A group's prefix is clamped to its shortest member's length.
inline Result<SharedPrefixPlan> plan_shared_prefix(
    int32_t num_seqs, const int32_t* kv_lens, int32_t num_q_heads, int32_t num_kv_heads,
    const int32_t* head_mode, const int32_t* selected_rows, const int32_t* blocks,
    int32_t blocks_stride, int32_t page_tokens, const SharedPrefixGroups& groups,
    const SharedPrefixPlanConfig& cfg = {}) {
  if (num_seqs < 0 || num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % num_kv_heads != 0 ||
      (num_seqs > 0 && !kv_lens) || !head_mode || page_tokens <= 0 || cfg.split_tokens <= 0) {
    return invalid_argument("shared-prefix attention: bad step geometry");
  }
  const int32_t group = num_q_heads / num_kv_heads;
  if (group > cfg.max_rows) {
    return invalid_argument("shared-prefix attention: {} query heads per kv head exceed {} rows",
                            group, cfg.max_rows);
  }
  bool any_selection = false;
  for (int32_t s = 0; selected_rows && s < num_seqs; ++s) any_selection |= selected_rows[s] >= 0;
  for (int32_t h = 0; h < num_kv_heads; ++h) {
    const auto mode = static_cast<HeadMode>(head_mode[h]);
    if (mode != HeadMode::kCausal && !(mode == HeadMode::kSelected && !any_selection)) {
      return invalid_argument(
          "shared-prefix attention needs dense heads (kv head {} is sparse): use per-sequence "
          "attention",
          h);
    }
  }
  const size_t num_groups = groups.prefix_tokens.size();
  if (groups.group_indptr.size() != num_groups + 1 || groups.group_indptr[0] != 0 ||
      groups.group_indptr.back() != static_cast<int32_t>(groups.seqs.size())) {
    return invalid_argument("shared-prefix attention: group_indptr does not match the groups");
  }
  SharedPrefixPlan plan;
  std::vector<int32_t> prefix(static_cast<size_t>(num_seqs), 0);  // per sequence, clamped
  std::vector<int32_t> prefix_parts(static_cast<size_t>(num_seqs), 0);
  std::vector<int8_t> grouped(static_cast<size_t>(num_seqs), 0);
  const int32_t seqs_per_item = std::max(1, cfg.max_rows / group);
  for (size_t g = 0; g < num_groups; ++g) {
    const int32_t b = groups.group_indptr[g], e = groups.group_indptr[g + 1];
    if (e < b) return invalid_argument("shared-prefix attention: group {} has a negative size", g);
    if (e == b) continue;
    int32_t p = groups.prefix_tokens[g];
    if (p < 0) return invalid_argument("shared-prefix attention: group {} prefix < 0", g);
    for (int32_t i = b; i < e; ++i) {
      const int32_t s = groups.seqs[static_cast<size_t>(i)];
      if (s < 0 || s >= num_seqs) {
        return invalid_argument("shared-prefix attention: group {} names sequence {} of {}", g, s,
                                num_seqs);
      }
      if (grouped[static_cast<size_t>(s)]) {
        return invalid_argument("shared-prefix attention: sequence {} is in two groups", s);
      }
      grouped[static_cast<size_t>(s)] = 1;
      p = std::min(p, std::max(0, kv_lens[s]));
    }
    const int32_t first = groups.seqs[static_cast<size_t>(b)];
    if (blocks) {
      if (int64_t{p} / page_tokens > blocks_stride) {
        return invalid_argument("shared-prefix attention: group {} prefix exceeds the table", g);
      }
      for (int32_t i = b + 1; i < e; ++i) {
        const int32_t s = groups.seqs[static_cast<size_t>(i)];
        for (int32_t lp = 0; lp < p / page_tokens; ++lp) {
          if (blocks[int64_t{s} * blocks_stride + lp] !=
              blocks[int64_t{first} * blocks_stride + lp]) {
            return invalid_argument(
                "shared-prefix attention: sequences {} and {} do not share prefix page {}", first,
                s, lp);
          }
        }
      }
    }
    if (p == 0) continue;
    const int32_t chunks =
        static_cast<int32_t>((int64_t{p} + cfg.split_tokens - 1) / cfg.split_tokens);
    for (int32_t m0 = b; m0 < e; m0 += seqs_per_item) {
      const int32_t n = std::min(seqs_per_item, e - m0);
      const int32_t seq_begin = static_cast<int32_t>(plan.item_seqs.size());
      plan.item_seqs.insert(plan.item_seqs.end(), groups.seqs.begin() + m0,
                            groups.seqs.begin() + m0 + n);
      for (int32_t c = 0; c < chunks; ++c) {
        SharedPrefixItem it;
        it.seq_begin = seq_begin;
        it.num_seqs = n;
        it.table_seq = first;
        it.key_begin = static_cast<int32_t>(int64_t{p} * c / chunks);
        it.key_end = static_cast<int32_t>(int64_t{p} * (c + 1) / chunks);
        it.part = c;
        plan.items.push_back(it);
        plan.max_item_rows = std::max(plan.max_item_rows, n * group);
      }
    }
    for (int32_t i = b; i < e; ++i) {
      const int32_t s = groups.seqs[static_cast<size_t>(i)];
      prefix[static_cast<size_t>(s)] = p;
      prefix_parts[static_cast<size_t>(s)] = chunks;
    }
    plan.shared_keys += int64_t{p} * (e - b - 1);
  }
  plan.num_parts.assign(static_cast<size_t>(num_seqs), 0);
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t begin = prefix[static_cast<size_t>(s)];
    const int32_t end = std::max(begin, kv_lens[s]);
    const int32_t chunks =
        static_cast<int32_t>((int64_t{end - begin} + cfg.split_tokens - 1) / cfg.split_tokens);
    const int32_t seq_begin = static_cast<int32_t>(plan.item_seqs.size());
    if (chunks > 0) plan.item_seqs.push_back(s);
    for (int32_t c = 0; c < chunks; ++c) {
      SharedPrefixItem it;
      it.seq_begin = seq_begin;
      it.num_seqs = 1;
      it.table_seq = s;
      it.key_begin = begin + static_cast<int32_t>(int64_t{end - begin} * c / chunks);
      it.key_end = begin + static_cast<int32_t>(int64_t{end - begin} * (c + 1) / chunks);
      it.part = prefix_parts[static_cast<size_t>(s)] + c;
      plan.items.push_back(it);
      plan.max_item_rows = std::max(plan.max_item_rows, group);
    }
    plan.num_parts[static_cast<size_t>(s)] = prefix_parts[static_cast<size_t>(s)] + chunks;
    plan.max_parts = std::max(plan.max_parts, plan.num_parts[static_cast<size_t>(s)]);
  }
  plan.max_parts = std::max(plan.max_parts, 1);
  return plan;
}

// The groups a decode step's block tables imply (host copies: kv_lens [num_seqs], blocks
// [num_seqs, blocks_stride]): sequences whose first table entry names the same block form a
// group, sharing the longest run of leading entries common to all of them (whole pages, so no
// copy-on-write page is assumed equal). Groups of fewer than min_members sequences or fewer than
// min_prefix_tokens shared tokens are left out (attended as usual). With prefix caching the
// block tables are all the engine needs: sharing a cached block is what makes it shared.
inline SharedPrefixGroups find_shared_prefix_groups(int32_t num_seqs, const int32_t* kv_lens,
                                                    const int32_t* blocks, int32_t blocks_stride,
                                                    int32_t page_tokens, int32_t min_members = 2,
                                                    int32_t min_prefix_tokens = 1) {
  SharedPrefixGroups groups;
  if (num_seqs <= 0 || !kv_lens || !blocks || blocks_stride <= 0 || page_tokens <= 0) {
    return groups;
  }
  // Sequences with at least one page, ordered by their first block (stable: batch order within).
  std::vector<int32_t> order;
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (kv_lens[s] > 0 && blocks[int64_t{s} * blocks_stride] >= 0) order.push_back(s);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return blocks[int64_t{a} * blocks_stride] < blocks[int64_t{b} * blocks_stride];
  });
  for (size_t i = 0; i < order.size();) {
    const int32_t first = order[i];
    const int32_t* row0 = blocks + int64_t{first} * blocks_stride;
    size_t j = i + 1;
    while (j < order.size() && blocks[int64_t{order[j]} * blocks_stride] == row0[0]) ++j;
    // Common leading pages, only pages every member has filled (a page still being written by
    // one member cannot be shared).
    int32_t common = blocks_stride;
    for (size_t m = i; m < j; ++m) {
      const int32_t s = order[m];
      const int32_t* row = blocks + int64_t{s} * blocks_stride;
      int32_t c = 0;
      const int32_t full = std::min(common, kv_lens[s] / page_tokens);
      while (c < full && row[c] == row0[c]) ++c;
      common = c;
    }
    const int64_t prefix = int64_t{common} * page_tokens;
    if (static_cast<int32_t>(j - i) >= min_members && prefix >= min_prefix_tokens && prefix > 0) {
      groups.seqs.insert(groups.seqs.end(), order.begin() + static_cast<std::ptrdiff_t>(i),
                         order.begin() + static_cast<std::ptrdiff_t>(j));
      groups.group_indptr.push_back(static_cast<int32_t>(groups.seqs.size()));
      groups.prefix_tokens.push_back(static_cast<int32_t>(prefix));
    }
    i = j;
  }
  return groups;
}

// What a shared-prefix kernel reads: the decode step (AttentionParams with one query per
// sequence, q_indptr[s] its row; the retrieval pool and block table; kv_lens unused, the items
// carry the key ranges) and the plan's arrays in the memory of the device that runs it.
struct SharedPrefixParams {
  AttentionParams attn;
  const SharedPrefixItem* items = nullptr;  // [num_items]
  int32_t num_items = 0;
  const int32_t* item_seqs = nullptr;  // [plan.item_seqs.size()]
  const int32_t* num_parts = nullptr;  // [attn.num_seqs]
  int32_t max_parts = 0;
  int32_t max_item_rows = 0;
};

}  // namespace ls::kernels
