#include "kv/kv_tier_config.h"

#include <algorithm>

namespace ls {

Status KvTierConfig::validate() const {
  if (!enabled) return {};
  if (num_rows <= 0 || slots_per_row <= 0) {
    return invalid_argument("KV tier: {} rows of {} cache slots", num_rows, slots_per_row);
  }
  if (static_cast<int64_t>(num_rows) * slots_per_row > INT32_MAX / 2) {
    return invalid_argument("KV tier: {} x {} cache slots is too many", num_rows, slots_per_row);
  }
  if (bucket_ticks <= 0 || num_buckets <= 0) {
    return invalid_argument("KV tier: {} ticks per bucket, {} buckets", bucket_ticks, num_buckets);
  }
  return {};
}

namespace {

int32_t retrieval_heads_in_layer(const KvGeometry& g, int32_t layer) {
  int32_t n = 0;
  for (int32_t h = 0; h < g.num_kv_heads; ++h) n += g.roles.is_streaming(layer, h) ? 0 : 1;
  return n;
}

}  // namespace

std::vector<SlotSpan> tier_layout(const std::vector<SlotSpan>& old, const std::vector<int32_t>& sizes,
                                  int32_t cache) {
  const size_t n = sizes.size();
  std::vector<int64_t> suffix(n + 1, 0);  // slots the rows from r on need
  for (size_t r = n; r-- > 0;) suffix[r] = suffix[r + 1] + sizes[r];
  std::vector<SlotSpan> out(n);
  int64_t cursor = 0;
  for (size_t r = 0; r < n; ++r) {
    const int64_t want = r < old.size() ? old[r].begin : cursor;
    const int64_t begin = std::clamp<int64_t>(want, cursor, std::max<int64_t>(cursor, cache - suffix[r]));
    out[r] = {static_cast<int32_t>(begin), static_cast<int32_t>(begin + sizes[r])};
    cursor = begin + sizes[r];
  }
  return out;
}

int64_t tier_slots_moved(const std::vector<SlotSpan>& from, const std::vector<SlotSpan>& to) {
  int64_t moved = 0;
  for (size_t r = 0; r < to.size(); ++r) {
    const SlotSpan o = r < from.size() ? from[r] : SlotSpan{};
    const int64_t kept = std::max(0, std::min(o.end, to[r].end) - std::max(o.begin, to[r].begin));
    moved += (to[r].end - to[r].begin) - kept;
  }
  return moved;
}

int32_t tier_slots_for_layer(const KvGeometry& g, int32_t context_tokens) {
  const int32_t pages = (context_tokens + g.page_tokens - 1) / g.page_tokens;
  int32_t heads = 0;
  for (int32_t l = 0; l < g.num_layers; ++l) heads = std::max(heads, retrieval_heads_in_layer(g, l));
  return heads * pages;
}

int64_t tier_slots_for_step(const KvGeometry& g, int32_t context_tokens, int32_t pages_per_head) {
  const int32_t pages = (context_tokens + g.page_tokens - 1) / g.page_tokens;
  const int32_t per_head = pages_per_head > 0 ? std::min(pages, pages_per_head) : pages;
  int64_t total = 0;
  for (int32_t l = 0; l < g.num_layers; ++l) {
    total += static_cast<int64_t>(retrieval_heads_in_layer(g, l)) * per_head;
  }
  return total;
}

}  // namespace ls
