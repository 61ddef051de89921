#include "kv/kv_cache_tier.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/page_residency.h"

namespace ls {

namespace {

constexpr int64_t kCountOffset = 0;
constexpr int64_t kErrorOffset = 4;
constexpr int64_t kCountersOffset = 8;
constexpr int64_t kSmallBytes = 24;

Result<Buffer> filled(Backend& backend, int64_t count, int32_t value) {
  LS_ASSIGN_OR_RETURN(Buffer b, backend.allocate(std::max<int64_t>(4, count * 4)));
  const std::vector<int32_t> host(static_cast<size_t>(std::max<int64_t>(1, count)), value);
  backend.copy_bytes(b.data(), host.data(), b.bytes());
  return b;
}

}  // namespace

Result<KvCacheTier> KvCacheTier::create(const KvGeometry& g, Backend& backend,
                                        int64_t num_home_pages, const KvTierConfig& config) {
  LS_RETURN_IF_ERROR(config.validate());
  if (!config.enabled) return invalid_argument("KvCacheTier::create with the tier off");
  KvCacheTier t;
  t.config_ = config;
  t.num_home_pages_ = num_home_pages;
  t.page_bytes_ = g.page_bytes();
  const int64_t slots = config.num_cache_slots();
  LS_ASSIGN_OR_RETURN(t.cache_k_, backend.allocate_zeroed(slots * t.page_bytes_));
  LS_ASSIGN_OR_RETURN(t.cache_v_, backend.allocate_zeroed(slots * t.page_bytes_));
  LS_ASSIGN_OR_RETURN(t.page_slot_, filled(backend, num_home_pages, -1));
  LS_ASSIGN_OR_RETURN(t.slot_page_, filled(backend, slots, -1));
  LS_ASSIGN_OR_RETURN(t.slot_stamp_, filled(backend, slots, 0));
  LS_ASSIGN_OR_RETURN(t.row_clock_, filled(backend, config.num_rows, 0));
  LS_ASSIGN_OR_RETURN(t.copy_src_, filled(backend, slots, 0));
  LS_ASSIGN_OR_RETURN(t.copy_dst_, filled(backend, slots, 0));
  LS_ASSIGN_OR_RETURN(t.scratch_, filled(backend, slots, 0));
  LS_ASSIGN_OR_RETURN(t.small_, backend.allocate(kSmallBytes));
  backend.fill_zero(t.small_.data(), kSmallBytes);
  const int64_t row_counter_bytes = int64_t{config.num_rows} * kernels::kRowCounters * 8;
  LS_ASSIGN_OR_RETURN(t.row_counters_, backend.allocate(row_counter_bytes));
  backend.fill_zero(t.row_counters_.data(), row_counter_bytes);
  for (int32_t r = 0; r < config.num_rows; ++r) {
    t.spans_.push_back({r * config.slots_per_row, (r + 1) * config.slots_per_row});
  }
  if (config.budget == KvBudgetMode::kElastic) {
    // Starts even; the engine's plans resize it (set_row_budgets).
    static_assert(sizeof(SlotSpan) == 8);
    LS_ASSIGN_OR_RETURN(t.row_slots_, backend.allocate(int64_t{config.num_rows} * 8));
    backend.copy_bytes(t.row_slots_.data(), t.spans_.data(), t.row_slots_.bytes());
  }
  backend.synchronize();
  return t;
}

int64_t KvCacheTier::bytes() const {
  return cache_k_.bytes() + cache_v_.bytes() + page_slot_.bytes() + slot_page_.bytes() +
         slot_stamp_.bytes() + row_clock_.bytes() + copy_src_.bytes() + copy_dst_.bytes() +
         scratch_.bytes() + small_.bytes() + row_counters_.bytes() + row_slots_.bytes();
}

kernels::PagedKvPool KvCacheTier::tiered_view(const kernels::PagedKvPool& homes) const {
  kernels::PagedKvPool v = homes;
  v.home_k = homes.k;
  v.home_v = homes.v;
  v.k = cache_k_.data();
  v.v = cache_v_.data();
  v.page_slot = page_slot_.as<int32_t>();
  v.num_cache_slots = config_.num_cache_slots();
  return v;
}

void KvCacheTier::retrieve(Backend& backend, const kernels::AttentionParams& a,
                           const int32_t* cache_rows) const {
  kernels::PageResidencyParams r = kernels::residency_of(a);
  r.cache_rows = cache_rows;
  r.slots_per_row = config_.slots_per_row;
  r.row_slots = row_slots_.bytes() > 0 ? row_slots_.as<int32_t>() : nullptr;
  r.num_cache_slots = config_.num_cache_slots();
  r.page_slot = page_slot_.as<int32_t>();
  r.slot_page = slot_page_.as<int32_t>();
  r.slot_stamp = slot_stamp_.as<int32_t>();
  r.row_clock = row_clock_.as<int32_t>();
  r.replacement = config_.replacement == KvReplacement::kPlainLru
                      ? kernels::Replacement::kPlainLru
                      : kernels::Replacement::kBucketedLru;
  r.bucket_ticks = config_.bucket_ticks;
  r.num_buckets = config_.num_buckets;
  r.copy_src = copy_src_.as<int32_t>();
  r.copy_dst = copy_dst_.as<int32_t>();
  auto* small = static_cast<char*>(small_.data());
  r.copy_count = reinterpret_cast<int32_t*>(small + kCountOffset);
  r.max_copies = config_.num_cache_slots();
  r.error = reinterpret_cast<int32_t*>(small + kErrorOffset);
  r.counters = reinterpret_cast<int64_t*>(small + kCountersOffset);
  r.scratch = scratch_.as<int32_t>();
  r.row_counters = row_counters_.as<int64_t>();
  backend.page_residency(r);

  kernels::PageCopyParams c;
  c.src[0] = a.retrieval.home_k;
  c.src[1] = a.retrieval.home_v;
  c.dst[0] = a.retrieval.k;
  c.dst[1] = a.retrieval.v;
  c.num_arrays = 2;
  c.page_bytes = page_bytes_;
  c.src_stride_bytes = page_bytes_;
  c.dst_stride_bytes = page_bytes_;
  c.src_pages = r.copy_src;
  c.dst_pages = r.copy_dst;
  c.num_pages_device = r.copy_count;
  c.max_pages = r.max_copies;
  c.method = kernels::PageCopyMethod::kGatherKernel;
  backend.copy_pages(c);
}

void KvCacheTier::reset_row(Backend& backend, int32_t row) const {
  kernels::ResidencyResetParams r;
  r.row = row;
  r.slots_per_row = config_.slots_per_row;
  r.first_slot = spans_[static_cast<size_t>(row)].begin;
  r.num_slots = spans_[static_cast<size_t>(row)].end - r.first_slot;
  r.page_slot = page_slot_.as<int32_t>();
  r.slot_page = slot_page_.as<int32_t>();
  r.slot_stamp = slot_stamp_.as<int32_t>();
  r.row_clock = row_clock_.as<int32_t>();
  if (r.num_slots == 0) {
    // An empty partition (elastic, an idle row) holds nothing; only its clock restarts.
    const int32_t zero = 0;
    backend.copy_bytes(row_clock_.as<int32_t>() + row, &zero, 4);
    return;
  }
  backend.page_residency_reset(r);
}

Status KvCacheTier::set_row_budgets(Backend& backend, const std::vector<int32_t>& slots) const {
  if (config_.budget != KvBudgetMode::kElastic) {
    return failed_precondition("per-request device budgets need --device-cache-budget elastic");
  }
  if (static_cast<int32_t>(slots.size()) != config_.num_rows) {
    return invalid_argument("device budgets for {} rows, the cache has {}", slots.size(),
                            config_.num_rows);
  }
  int64_t total = 0;
  for (int32_t n : slots) {
    if (n < 0) return invalid_argument("a device budget of {} slots", n);
    total += n;
  }
  if (total > config_.num_cache_slots()) {
    return invalid_argument("device budgets of {} slots exceed the cache's {}", total,
                            config_.num_cache_slots());
  }
  std::vector<SlotSpan> next = tier_layout(spans_, slots, config_.num_cache_slots());
  if (next == spans_) return {};
  // Each row gives up the part of its old partition outside its new one. Partitions are disjoint
  // before and after, so every slot that changes owner is freed by its old owner here.
  for (int32_t row = 0; row < config_.num_rows; ++row) {
    const SlotSpan o = spans_[static_cast<size_t>(row)], n = next[static_cast<size_t>(row)];
    auto release = [&](int32_t b, int32_t e) {
      if (e <= b) return;
      kernels::ResidencyResetParams r;
      r.row = row;
      r.slots_per_row = config_.slots_per_row;
      r.first_slot = b;
      r.num_slots = e - b;
      r.reset_clock = false;
      r.page_slot = page_slot_.as<int32_t>();
      r.slot_page = slot_page_.as<int32_t>();
      r.slot_stamp = slot_stamp_.as<int32_t>();
      r.row_clock = row_clock_.as<int32_t>();
      backend.page_residency_reset(r);
    };
    release(o.begin, std::min(o.end, n.begin));  // the old slots below the new span
    release(std::max(o.begin, n.end), o.end);    // and above it
  }
  spans_ = std::move(next);
  backend.copy_bytes(row_slots_.data(), spans_.data(), row_slots_.bytes());
  return {};
}

std::vector<int32_t> KvCacheTier::row_budgets() const {
  std::vector<int32_t> out;
  for (const SlotSpan& s : spans_) out.push_back(s.end - s.begin);
  return out;
}

Status KvCacheTier::finish_step(Backend& backend, KvTierCounters& counters) const {
  int64_t host[3] = {0, 0, 0};  // [count | error], hits, misses
  backend.copy_bytes(host, small_.data(), kSmallBytes);
  counters.rows.resize(static_cast<size_t>(config_.num_rows) * kernels::kRowCounters);
  backend.copy_bytes(counters.rows.data(), row_counters_.data(), row_counters_.bytes());
  backend.synchronize();
  counters.hits = host[1];
  counters.misses = host[2];
  int32_t error = 0;
  std::memcpy(&error, reinterpret_cast<const char*>(host) + kErrorOffset, 4);
  if (error == 0) return {};
  const int32_t zero = 0;
  backend.copy_bytes(static_cast<char*>(small_.data()) + kErrorOffset, &zero, 4);
  backend.synchronize();
  return resource_exhausted(
      "device KV cache overflow: a request's pages for one layer exceed its {} cache slots; raise "
      "--device-kv-cache-bytes",
      config_.slots_per_row);
}

KvTierCounters KvCacheTier::counters(Backend& backend) const {
  int64_t host[2] = {0, 0};
  backend.copy_bytes(host, static_cast<char*>(small_.data()) + kCountersOffset, 16);
  backend.synchronize();
  KvTierCounters c;
  c.hits = host[0];
  c.misses = host[1];
  return c;
}

std::vector<int32_t> KvCacheTier::page_slots(Backend& backend) const {
  std::vector<int32_t> host(static_cast<size_t>(num_home_pages_));
  if (!host.empty()) backend.copy_bytes(host.data(), page_slot_.data(), num_home_pages_ * 4);
  backend.synchronize();
  return host;
}

std::vector<int32_t> KvCacheTier::slot_pages(Backend& backend) const {
  std::vector<int32_t> host(static_cast<size_t>(config_.num_cache_slots()));
  if (!host.empty()) backend.copy_bytes(host.data(), slot_page_.data(), config_.num_cache_slots() * 4);
  backend.synchronize();
  return host;
}

}  // namespace ls
