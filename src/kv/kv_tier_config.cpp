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
