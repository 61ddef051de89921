// End-to-end GPU benchmark on a Hugging Face model directory (the Llama-3-8B-shaped random model
// of scripts/model/make_bundled_model.py --preset llama3-8b-shape): the model is loaded once on
// the CUDA backend, then for each attention policy a KV cache and runner are built and
//  - TTFT: a prompt of T random tokens prefilled in chunks, wall time until its last logits are
//    on the host (one warm-up prompt first);
//  - TPOT: decode steps of one sequence whose context of C tokens is already in the cache (the
//    KV pages, summaries and rings are filled with random values instead of a minutes-long
//    prefill: the kernels read the same bytes); the median and mean over steps (lserve reselects
//    pages every 4 steps, so its mean includes the selection).
// The weight-read floor of a decode step is the bytes every step must read (all weights once)
// divided by the measured device-to-device copy bandwidth.
// Usage: bench_cuda_e2e --model DIR [--out FILE] [--policies dense,streaming,lserve]
//        [--ttft 8192,32768,131072] [--tpot 32768,131072] [--chunk 16384] [--steps 16]
//        [--profile-step 1] [--record 0|1] [--gemv 0|1] [--quantization auto|none|fp8]
// --quantization fp8 quantizes the linear weights to e4m3 at load (docs/fp8-weights.md): TTFT
// on FP8 tensor cores, TPOT against the halved weight-read floor.
// --record 0 runs decode steps op by op (no CUDA graphs); --gemv 0 sends decode-sized linear
// layers to cuBLASLt instead of the gemv kernel.
// The host KV tier (docs/hierarchical-kv.md): --offload-ratios 0,2,4 runs every case once per
// entry, 0 with every page resident (the tier off), R > 0 with the tier on at buffer ratio R (the
// device cache sized as model_stack sizes it; the homes filled with random values instead of the
// cache). --batches 1,8,32 times TPOT for B sequences decoding together (one step's wall time;
// "hit_ratio" from the tier's counters over the timed steps; "vs_resident" against ratio 0 of the
// same policy, context and batch, which must come first). --kv-save 0 stops the write-through of
// new KV to the homes (TTFT with saving off: what the write-through costs a prefill; outputs are
// then wrong). --capacity C: for dense and lserve, tier off and on (--capacity-ratio, default 4),
// the most sequences of C tokens that decode together: the memory estimate (device for the tier
// off, min(device, 70% of the available host RAM) on) tried first, then fewer until a stack is
// allocated and two decode steps run; --capacity-tiers off,on picks the tier settings tried.
// --kv-cache-dtype auto,int8,int4,fp8 (docs/kv-quantization.md): every case above (and the
// capacity search) once per page format, "kv_format" in every line; TPOT lines carry
// "vs_first_format", the step time against the first format's (all resident, same policy,
// context and batch). Quantized pages are filled with random codes and finite scales.
// --tensor-parallel-size 1,2 (docs/tensor-parallel.md): instead of the above, TTFT (--ttft) and
// TPOT (--tpot, batch 1) for each size and policy (--policies, default dense,lserve) on stacks
// built as the server builds them, "tp" in every JSON line (--quantization applies too). For
// TP > 1 a "tp_collectives" line gives one decode step's collectives timed alone
// (bench_tp_collectives.h), and every TPOT line their share of the step ("allreduce_share":
// the 2 per layer + embedding all-reduces, "collectives_share": with the logits' all-gather).
// --tp-all-reduce auto|nccl|p2p picks the all-reduce (docs/p2p-all-reduce.md).
// --load-format dummy [--dummy-seed S] generates the weights instead of reading them
// (docs/dummy-weights.md): a directory with config.json (make_bundled_model.py --config-only)
// suffices; both modes take it.

#include <cuda_profiler_api.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "attention/policy_registry.h"
#include "bench_common.h"
#include "bench_tp_collectives.h"
#include "kernels/kv_quant.h"
#include "kernels/paged_kv.h"
#include "kv/kv_geometry.h"
#include "kv/kv_manager.h"
#include "kv/kv_pool.h"
#include "kv/kv_tier_config.h"
#include "model/dummy_weights.h"
#include "model/model.h"
#include "model/model_runner.h"
#include "model/model_stack.h"

namespace ls::bench {
namespace {

struct PolicyStack {
  std::unique_ptr<AttentionPolicy> policy;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<ModelRunner> runner;
};

// Batch and host KV tier of a stack.
struct StackShape {
  int32_t batch = 1;
  double offload_ratio = 0;  // > 0: the tier on at this buffer ratio
  bool kv_save = true;
  KvCacheDtype kv_dtype = KvCacheDtype::kAuto;  // page format (--kv-cache-dtype)
};

Result<PolicyStack> make_policy_stack(const Model& model, Backend& backend,
                                      const AttentionConfig& attention, int32_t max_len,
                                      int32_t chunk, bool record, const StackShape& shape = {}) {
  const ModelConfig& c = model.config();
  PolicyModelInfo info;
  info.num_layers = static_cast<int32_t>(c.num_hidden_layers());
  info.num_q_heads = static_cast<int32_t>(c.num_attention_heads());
  info.num_kv_heads = static_cast<int32_t>(c.num_key_value_heads());
  info.head_dim = static_cast<int32_t>(c.head_dim());
  PolicyStack st;
  LS_ASSIGN_OR_RETURN(st.policy, make_attention_policy(attention, info));
  KvGeometry g = st.policy->kv_geometry();
  g.dtype = backend.act_dtype();
  g.cache_dtype = resolve_kv_cache_dtype(shape.kv_dtype, g.dtype);
  g.max_chunk_tokens = chunk;
  LS_RETURN_IF_ERROR(g.validate());
  const int32_t B = shape.batch;
  const int32_t one_seq = (max_len + g.page_tokens - 1) / g.page_tokens;
  const int32_t rb = g.roles.num_retrieval() > 0 ? B * (one_seq + 2) : 0;
  const int32_t sb =
      g.roles.num_streaming() > 0
          ? B * (g.num_sink_pages() + std::max(g.prefill_ring_pages(), g.decode_ring_pages()) + 2)
          : 0;
  KvTierConfig tier;
  if (shape.offload_ratio > 0 && g.roles.num_retrieval() > 0) {  // as model_stack sizes it
    const int64_t layer_need = tier_slots_for_layer(g, max_len);
    const int64_t step_need = tier_slots_for_step(g, max_len, st.policy->decode_pages_per_head());
    const int64_t per_row = std::min<int64_t>(
        int64_t{one_seq} * g.roles.num_retrieval(),
        std::max<int64_t>(layer_need, static_cast<int64_t>(std::ceil(
                                          shape.offload_ratio * static_cast<double>(step_need)))));
    tier.enabled = true;
    tier.num_rows = B;
    tier.slots_per_row = static_cast<int32_t>(per_row);
    tier.bucket_ticks = std::max(1, info.num_layers);
    tier.num_buckets = 64;
  }
  LS_ASSIGN_OR_RETURN(KvPool pool, KvPool::create(g, backend, rb, sb, tier));
  st.pool = std::make_unique<KvPool>(std::move(pool));
  st.kv = std::make_unique<KvManager>(g, rb, sb, B);
  LS_RETURN_IF_ERROR(st.policy->bind(backend, B));
  RunnerConfig rc;
  rc.max_step_tokens = std::max(chunk, B);
  rc.max_seqs = B;
  rc.max_logit_rows = B;
  rc.max_model_len = max_len;
  rc.record_decode_steps = record;
  rc.kv_save = shape.kv_save;
  LS_ASSIGN_OR_RETURN(st.runner, ModelRunner::create(model, *st.kv, *st.pool, *st.policy, rc));
  return st;
}

// Random bf16 in every KV page and summary, so decode reads real-looking data.
void fill_cache(CudaBackend& b, const KvPool& pool) {
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  uint64_t seed = 100;
  for (const kernels::PagedKvPool& p : {pool.retrieval(), pool.streaming()}) {
    if (!p.k) continue;
    // Tiered: the homes (pinned host memory, written through UVA); the cache fills on misses.
    void* k = p.page_slot ? p.home_k : p.k;
    void* v = p.page_slot ? p.home_v : p.v;
    // bf16 values over the pages' bytes. Quantized pages (codes + per-token scales) get values in
    // [0.01, 0.0155): every 2- and 4-byte group is then a finite scale, and no byte is 0x7f/0xff
    // (e4m3's NaN codes), so decode reads finite, real-sized data.
    const bool quant = p.quant != kernels::KvQuant::kNone;
    const int64_t n = int64_t{p.num_blocks} * p.heads_per_block * kernels::pool_page_bytes(p) / 2;
    die_on(fill_uniform_bf16(k, n, seed++, quant ? 0.01f : -1.0f, quant ? 0.0155f : 1.0f, stream), "fill");
    die_on(fill_uniform_bf16(v, n, seed++, quant ? 0.01f : -1.0f, quant ? 0.0155f : 1.0f, stream), "fill");
  }
  const kernels::PageSummaries s = pool.summaries();
  const kernels::PagedKvPool r = pool.retrieval();
  if (s.kmin && r.k) {
    const int64_t n = int64_t{r.num_blocks} * r.heads_per_block * s.logical_per_page * r.head_dim;
    die_on(fill_uniform_bf16(s.kmin, n, seed++, -1, 0, stream), "fill");
    die_on(fill_uniform_bf16(s.kmax, n, seed++, 0, 1, stream), "fill");
  }
  b.synchronize();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Removes a sequence from the KV cache when it goes out of scope.
class SequenceGuard {
 public:
  SequenceGuard(KvManager& kv, int32_t slot) : kv_(kv), slot_(slot) {}
  SequenceGuard(const SequenceGuard&) = delete;
  SequenceGuard& operator=(const SequenceGuard&) = delete;
  ~SequenceGuard() { kv_.remove_sequence(slot_); }

 private:
  KvManager& kv_;
  int32_t slot_;
};

// Wall seconds to prefill `tokens` random tokens and get the last position's logits.
Result<double> ttft(KvManager& kv, StepExecutor& ex, int32_t tokens, int32_t chunk,
                    std::mt19937& rng, int32_t vocab) {
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& x : ids) x = id(rng);
  LS_ASSIGN_OR_RETURN(const int32_t slot, kv.add_sequence());
  const SequenceGuard guard(kv, slot);  // freed on every path, errors included
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t begin = 0; begin < tokens; begin += chunk) {
    const int32_t len = std::min(chunk, tokens - begin);
    LS_RETURN_IF_ERROR(kv.grow(slot, begin + len));
    StepInput in;
    in.tokens.assign(ids.begin() + begin, ids.begin() + begin + len);
    in.seqs.push_back({slot, len, begin + len, true});
    if (begin + len == tokens) in.logit_rows.push_back(len - 1);
    LS_RETURN_IF_ERROR(ex.forward(in, logits));
  }
  return seconds_since(t0);
}

// Every step shape (reselecting or not) must be seen twice before it replays as a recorded graph
// (the second sight records it): TPOT warms up past two selection intervals of 4, so the timed
// steps are the steady state a long generation runs in.
constexpr int kTpotWarmup = 10;

struct Tpot {
  double median_ms = 0, mean_ms = 0;
  double hit_ratio = -1;  // tier on: device-cache hits over the timed steps
};

// Decode steps at a context of `context` tokens already (randomly) in the cache.
// profile: the last 4 steps (one reselection with lserve) run between cudaProfilerStart/Stop (for ncu --profile-from-start off).
// With batch > 1, `batch` sequences of `context` tokens decode together (a step's wall time).
Result<Tpot> tpot(KvManager& kv, StepExecutor& ex, int32_t context, int32_t chunk, int32_t steps,
                  std::mt19937& rng, int32_t vocab, bool profile, int32_t batch = 1,
                  int32_t warmup = kTpotWarmup) {
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> slots;
  std::vector<std::unique_ptr<SequenceGuard>> guards;
  for (int32_t b = 0; b < batch; ++b) {
    LS_ASSIGN_OR_RETURN(const int32_t slot, kv.add_sequence());
    guards.push_back(std::make_unique<SequenceGuard>(kv, slot));
    slots.push_back(slot);
    // Grown chunk by chunk as a prefill would (a streaming ring takes at most one chunk at once).
    for (int32_t len = 0; len < context;) {
      len = std::min(context, len + chunk);
      LS_RETURN_IF_ERROR(kv.grow(slot, len));
    }
    kv.finish_prefill(slot);
  }
  std::vector<float> logits;
  std::vector<double> t;
  int32_t len = context;
  KvTierStats before;
  for (int32_t i = 0; i < steps + warmup; ++i) {
    StepInput in;
    for (int32_t b = 0; b < batch; ++b) {
      LS_RETURN_IF_ERROR(kv.grow(slots[static_cast<size_t>(b)], len + 1));
      in.tokens.push_back(id(rng));
      in.seqs.push_back({slots[static_cast<size_t>(b)], 1, len + 1, false});
      in.logit_rows.push_back(b);
    }
    const bool last = i + 1 == steps + warmup;
    if (profile && i + 4 == steps + warmup) cudaProfilerStart();
    if (i == warmup) before = ex.kv_tier_stats();
    const auto t0 = std::chrono::steady_clock::now();
    LS_RETURN_IF_ERROR(ex.forward(in, logits));
    if (i >= warmup) t.push_back(seconds_since(t0) * 1e3);
    if (profile && last) cudaProfilerStop();
    ++len;
  }
  Tpot r;
  const KvTierStats after = ex.kv_tier_stats();
  if (after.enabled && after.hits + after.misses > before.hits + before.misses) {
    r.hit_ratio = static_cast<double>(after.hits - before.hits) /
                  static_cast<double>(after.hits + after.misses - before.hits - before.misses);
  }
  for (double x : t) r.mean_ms += x / static_cast<double>(t.size());
  std::sort(t.begin(), t.end());
  r.median_ms = t[t.size() / 2];
  return r;
}

bool b_gemv = true;

// MemAvailable of /proc/meminfo, bytes (0 if unreadable).
int64_t host_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  int64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %ld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}

// The most sequences of `context` tokens that decode together, for dense and lserve with the tier
// off and on: the estimate from one sequence's memory first, then fewer until a stack is
// allocated and two decode steps run. One JSON line per (policy, tier).
void capacity(const Model& model, CudaBackend& b, JsonLines& out, const std::string& policies,
              const std::vector<KvCacheDtype>& formats, const std::string& tiers, int32_t context,
              double ratio, bool record, std::mt19937& rng, int32_t vocab) {
  constexpr int32_t kChunk = 2048;  // no prefill runs: small activations
  const int32_t max_len = context + 16;
  for (const KvCacheDtype fmt : formats) {
  for (const char* name : {"dense", "lserve"}) {
    if (policies.find(name) == std::string::npos) continue;
    for (const bool tier : {false, true}) {
      if (tiers.find(tier ? "on" : "off") == std::string::npos) continue;
      AttentionConfig a;
      a.policy = name;
      StackShape one;
      one.offload_ratio = tier ? ratio : 0;
      one.kv_dtype = fmt;
      const std::string_view fmt_name = kv_cache_dtype_name(fmt);
      int64_t device_per_seq = 0, host_per_seq = 0;
      {
        auto st = make_policy_stack(model, b, a, max_len, kChunk, record, one);
        if (!st.ok()) {
          out.write(fmt::format(
              R"({{"bench": "capacity", "policy": "{}", "kv_format": "{}", "context": {}, "kv_offload": {}, "error": "{}"}})",
              name, fmt_name, context, tier, json_safe(st.status().message())));
          (void)b.take_error();
          continue;
        }
        device_per_seq = st->pool->bytes();
        host_per_seq = st->pool->host_bytes();
      }
      b.synchronize();
      const int64_t device_free = b.device_memory_free_bytes() - (int64_t{3} << 30);
      const int64_t by_device = std::max<int64_t>(0, device_free / std::max<int64_t>(1, device_per_seq));
      const int64_t by_host =
          host_per_seq > 0 ? static_cast<int64_t>(0.7 * static_cast<double>(host_available_bytes())) /
                                 host_per_seq
                           : by_device;
      int64_t n = std::min<int64_t>(std::min(by_device, by_host), 256);
      int64_t ok_n = 0;
      double step_ms = 0;
      std::string last_error;
      for (; n >= 1; --n) {
        StackShape shape = one;
        shape.batch = static_cast<int32_t>(n);
        auto st = make_policy_stack(model, b, a, max_len, kChunk, record, shape);
        if (!st.ok()) {
          last_error = st.status().message();
          (void)b.take_error();
          continue;
        }
        fill_cache(b, *st->pool);
        auto r = tpot(*st->kv, *st->runner, context, kChunk, 2, rng, vocab, false, static_cast<int32_t>(n), 1);
        const Status err = b.take_error();
        if (r.ok() && err.ok()) {
          ok_n = n;
          step_ms = r->median_ms;
          break;
        }
        last_error = r.ok() ? err.message() : r.status().message();
      }
      out.write(fmt::format(
          R"({{"bench": "capacity", "policy": "{}", "kv_format": "{}", "context": {}, "kv_offload": {}, "offload_ratio": {}, "max_seqs": {}, "step_ms": {:.1f}, "device_gb_per_seq": {:.2f}, "host_gb_per_seq": {:.2f}, "by_device": {}, "by_host": {}, "last_error": "{}"}})",
          name, fmt_name, context, tier, tier ? ratio : 0.0, ok_n, step_ms,
          static_cast<double>(device_per_seq) / 1e9, static_cast<double>(host_per_seq) / 1e9,
          by_device, by_host, json_safe(last_error)));
    }
  }
  }
}

// --tensor-parallel-size 1,2[,4]: TTFT and TPOT (batch 1) per policy for each size, every stack
// built by build_model_stack as `longserve serve` builds it (so TP = 1 is measured on the same
// path), the KV pages of every rank filled with random values. --tp-all-reduce auto|nccl|p2p
// (docs/p2p-all-reduce.md) picks how the ranks all-reduce ("all_reduce" in every line).
int run_tensor_parallel(int argc, char** argv, const std::string& model_dir) {
  JsonLines out(arg(argc, argv, "--out", ""));
  const auto sizes = parse_list(arg(argc, argv, "--tensor-parallel-size", "1,2"));
  const auto policies = arg(argc, argv, "--policies", "dense,lserve");
  const auto ttft_lens = parse_list(arg(argc, argv, "--ttft", "32768,131072"));
  const auto tpot_lens = parse_list(arg(argc, argv, "--tpot", "32768,131072"));
  const auto chunk = static_cast<int32_t>(std::atoi(arg(argc, argv, "--chunk", "16384").c_str()));
  const auto steps = static_cast<int32_t>(std::atoi(arg(argc, argv, "--steps", "16").c_str()));
  const bool record = arg(argc, argv, "--record", "1") == "1";
  const std::string quantization = arg(argc, argv, "--quantization", "auto");
  const std::string all_reduce = arg(argc, argv, "--tp-all-reduce", "auto");
  const std::string load_format = arg(argc, argv, "--load-format", "auto");
  const auto dummy_seed = std::strtoull(arg(argc, argv, "--dummy-seed", "0").c_str(), nullptr, 10);
  int64_t max_len = 0;
  for (int64_t x : ttft_lens) max_len = std::max(max_len, x);
  for (int64_t x : tpot_lens) max_len = std::max(max_len, x + steps + kTpotWarmup + 8);
  std::mt19937 rng(5);
  for (const int64_t tp : sizes) {
    for (const std::string& name :
         {std::string("dense"), std::string("streaming"), std::string("lserve")}) {
      if (policies.find(name) == std::string::npos) continue;
      const std::string tag = fmt::format(R"("policy": "{}", "tp": {}, "quantization": "{}", "all_reduce": "{}", "load_format": "{}")",
                                          name, tp, json_safe(quantization), json_safe(all_reduce),
                                          json_safe(load_format));
      ModelStackOptions o;
      o.model_dir = model_dir;
      o.device = "cuda";
      o.attention.policy = name;
      o.max_num_seqs = 1;
      o.max_step_tokens = chunk;
      o.max_logit_rows = 1;
      o.max_model_len = static_cast<int32_t>(max_len);
      o.record_decode_steps = record;
      o.tensor_parallel_size = static_cast<int32_t>(tp);
      o.quantization = quantization;
      o.tp_all_reduce = all_reduce;
      o.load_format = load_format;
      o.dummy_seed = dummy_seed;
      const auto t_load = std::chrono::steady_clock::now();
      auto built = build_model_stack(o);
      if (!built.ok()) {
        out.write(fmt::format(R"({{"bench": "e2e", {}, "error": "{}"}})", tag,
                              json_safe(built.status().message())));
        continue;
      }
      ModelStack& st = **built;
      const double load_s = seconds_since(t_load);
      std::vector<ModelStack*> ranks;
      if (st.tp_ranks.empty()) ranks.push_back(&st);
      for (auto& r : st.tp_ranks) ranks.push_back(r.get());
      for (ModelStack* r : ranks) {
        r->backend->bind_thread();
        fill_cache(static_cast<CudaBackend&>(*r->backend), *r->pool);
      }
      const int32_t vocab = static_cast<int32_t>(st.config().vocab_size());
      // One decode step's collectives alone, before any step records (it drops recordings).
      std::optional<TpCollectiveTime> coll;
      if (tp > 1) {
        auto c = time_tp_collectives(st, /*rows=*/1, /*replays=*/200);
        if (c.ok()) {
          coll = *c;
          out.write(fmt::format(
              R"({{"bench": "tp_collectives", {}, "rows": 1, "all_reduces": {}, "allreduce_ms": {:.4f}, "collectives_ms": {:.4f}, "recorded": {}}})",
              tag, c->all_reduces, c->all_reduce_ms, c->step_ms, c->recorded));
        } else {
          out.write(fmt::format(R"({{"bench": "tp_collectives", {}, "error": "{}"}})", tag,
                                json_safe(c.status().message())));
        }
      }
      StepExecutor& ex = st.executor();
      auto warm = ttft(*st.kv, ex, std::min<int32_t>(chunk, 2048) + 17, chunk, rng, vocab);
      if (!warm.ok()) {
        out.write(fmt::format(R"({{"bench": "e2e", {}, "error": "{}"}})", tag,
                              json_safe(warm.status().message())));
        continue;
      }
      out.write(fmt::format(R"({{"bench": "e2e_model", {}, "load_s": {:.1f}}})", tag, load_s));
      for (int64_t T : ttft_lens) {
        auto s = ttft(*st.kv, ex, static_cast<int32_t>(T), chunk, rng, vocab);
        out.write(s.ok() ? fmt::format(R"({{"bench": "ttft", {}, "tokens": {}, "ms": {:.1f}}})",
                                       tag, T, *s * 1e3)
                         : fmt::format(R"({{"bench": "ttft", {}, "tokens": {}, "error": "{}"}})",
                                       tag, T, json_safe(s.status().message())));
      }
      for (int64_t C : tpot_lens) {
        auto r = tpot(*st.kv, ex, static_cast<int32_t>(C), chunk, steps, rng, vocab, false);
        std::string share;  // the collectives' share of the median decode step
        if (r.ok() && coll && r->median_ms > 0) {
          share = fmt::format(R"(, "allreduce_ms": {:.4f}, "allreduce_share": {:.4f}, "collectives_share": {:.4f})",
                              coll->all_reduce_ms, coll->all_reduce_ms / r->median_ms,
                              coll->step_ms / r->median_ms);
        }
        out.write(r.ok() ? fmt::format(
                               R"({{"bench": "tpot", {}, "context": {}, "median_ms": {:.3f}, "mean_ms": {:.3f}, "recorded": {}{}}})",
                               tag, C, r->median_ms, r->mean_ms, record, share)
                         : fmt::format(R"({{"bench": "tpot", {}, "context": {}, "error": "{}"}})",
                                       tag, C, json_safe(r.status().message())));
      }
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  const std::string model_dir = arg(argc, argv, "--model", "");
  if (model_dir.empty()) {
    std::fprintf(stderr, "usage: bench_cuda_e2e --model DIR [...]\n");
    return 2;
  }
  if (!arg(argc, argv, "--tensor-parallel-size", "").empty()) {
    return run_tensor_parallel(argc, argv, model_dir);
  }
  JsonLines out(arg(argc, argv, "--out", ""));
  const auto policies = arg(argc, argv, "--policies", "dense,streaming,lserve");
  const auto ttft_lens = parse_list(arg(argc, argv, "--ttft", "8192,32768,131072"));
  const auto tpot_lens = parse_list(arg(argc, argv, "--tpot", "32768,131072"));
  const auto chunk = static_cast<int32_t>(std::atoi(arg(argc, argv, "--chunk", "16384").c_str()));
  const auto steps = static_cast<int32_t>(std::atoi(arg(argc, argv, "--steps", "16").c_str()));
  const bool profile = arg(argc, argv, "--profile-step", "0") == "1";
  const bool record = arg(argc, argv, "--record", "1") == "1";  // decode steps as CUDA graphs
  b_gemv = arg(argc, argv, "--gemv", "1") == "1";
  std::vector<double> ratios;
  for (const int64_t r : parse_list(arg(argc, argv, "--offload-ratios", "0"))) {
    ratios.push_back(static_cast<double>(r));
  }
  const auto batches = parse_list(arg(argc, argv, "--batches", "1"));
  const bool kv_save = arg(argc, argv, "--kv-save", "1") == "1";
  const int64_t capacity_len = parse_list(arg(argc, argv, "--capacity", "0"))[0];
  const double capacity_ratio =
      static_cast<double>(parse_list(arg(argc, argv, "--capacity-ratio", "4"))[0]);
  const std::string capacity_tiers = arg(argc, argv, "--capacity-tiers", "off,on");
  std::vector<KvCacheDtype> formats;
  for (const std::string& f : split_list(arg(argc, argv, "--kv-cache-dtype", "auto"))) {
    auto d = parse_kv_cache_dtype(f);
    if (!d.ok()) {
      std::fprintf(stderr, "bench_cuda_e2e: %s\n", d.status().to_string().c_str());
      return 2;
    }
    formats.push_back(*d);
  }

  auto backend = CudaBackend::create(0);
  if (!backend.ok()) {
    std::fprintf(stderr, "bench_cuda_e2e: %s\n", backend.status().to_string().c_str());
    return 2;
  }
  CudaBackend& b = **backend;
  b.set_gemv(b_gemv);
  const double copy_bps = copy_bandwidth(b, int64_t{2} << 30);
  const auto t_load = std::chrono::steady_clock::now();
  const std::string quantization = arg(argc, argv, "--quantization", "auto");
  auto load_format = parse_load_format(arg(argc, argv, "--load-format", "auto"));
  if (!load_format.ok()) {
    std::fprintf(stderr, "bench_cuda_e2e: %s\n", load_format.status().to_string().c_str());
    return 2;
  }
  auto model = Model::load(model_dir, b, quantization, TpShard{}, *load_format,
                           std::strtoull(arg(argc, argv, "--dummy-seed", "0").c_str(), nullptr, 10));
  if (!model.ok()) {
    std::fprintf(stderr, "bench_cuda_e2e: %s\n", model.status().to_string().c_str());
    return 2;
  }
  b.synchronize();
  const double load_s = seconds_since(t_load);
  const ModelWeights& w = (*model)->weights();
  const double floor_ms = static_cast<double>(w.bytes_per_token) / copy_bps * 1e3;
  out.write(fmt::format(
      R"({{"bench": "e2e_model", "quantization": "{}", "weights_gb": {:.2f}, "bytes_per_token_gb": {:.2f}, "load_s": {:.1f}, "copy_gbps": {:.1f}, "floor_ms": {:.3f}}})",
      json_safe(quantization), static_cast<double>(w.bytes) / 1e9, static_cast<double>(w.bytes_per_token) / 1e9, load_s,
      copy_bps / 1e9, floor_ms));
  const int32_t vocab = static_cast<int32_t>((*model)->config().vocab_size());
  int64_t max_len = 0;
  for (int64_t x : ttft_lens) max_len = std::max(max_len, x);
  for (int64_t x : tpot_lens) max_len = std::max(max_len, x + steps + kTpotWarmup + 8);
  std::mt19937 rng(5);

  std::map<std::tuple<std::string, std::string, int64_t, int64_t>, double> resident_ms;  // (format, policy, C, B)
  std::map<std::tuple<std::string, int64_t, int64_t>, double> bf16_ms;  // (policy, C, B), tier off
  for (const KvCacheDtype fmt : formats) {
  const std::string_view fmt_name = kv_cache_dtype_name(fmt);
  for (const std::string& name :
       {std::string("dense"), std::string("streaming"), std::string("lserve")}) {
    if (policies.find(name) == std::string::npos) continue;
    for (const double ratio : ratios) {
      for (const int64_t B : batches) {
        AttentionConfig a;
        a.policy = name;
        StackShape shape;
        shape.batch = static_cast<int32_t>(B);
        shape.offload_ratio = ratio;
        shape.kv_save = kv_save;
        shape.kv_dtype = fmt;
        const std::string tag = fmt::format(R"("policy": "{}", "kv_format": "{}", "batch": {}, "offload_ratio": {}, "kv_save": {})",
                                            name, fmt_name, B, ratio, kv_save);
        auto st =
            make_policy_stack(**model, b, a, static_cast<int32_t>(max_len), chunk, record, shape);
        if (!st.ok()) {
          out.write(fmt::format(R"({{"bench": "e2e", {}, "error": "{}"}})", tag,
                                json_safe(st.status().message())));
          (void)b.take_error();
          continue;
        }
        fill_cache(b, *st->pool);
        auto warm =
            ttft(*st->kv, *st->runner, std::min<int32_t>(chunk, 2048) + 17, chunk, rng, vocab);  // plans, scratch
        if (!warm.ok()) {
          out.write(fmt::format(R"({{"bench": "e2e", {}, "error": "{}"}})", tag,
                                json_safe(warm.status().message())));
          continue;
        }
        for (int64_t T : B == 1 ? ttft_lens : std::vector<int64_t>{}) {
          auto s = ttft(*st->kv, *st->runner, static_cast<int32_t>(T), chunk, rng, vocab);
          const Status err = b.take_error();
          if (!s.ok() || !err.ok()) {
            out.write(fmt::format(R"({{"bench": "ttft", {}, "tokens": {}, "error": "{}"}})", tag, T,
                                  json_safe(s.ok() ? err.message() : s.status().message())));
            continue;
          }
          out.write(fmt::format(R"({{"bench": "ttft", {}, "tokens": {}, "ms": {:.1f}}})", tag, T,
                                *s * 1e3));
        }
        for (int64_t C : tpot_lens) {
          auto r = tpot(*st->kv, *st->runner, static_cast<int32_t>(C), chunk, steps, rng, vocab, profile,
                        static_cast<int32_t>(B));
          const Status err = b.take_error();
          if (!r.ok() || !err.ok()) {
            out.write(fmt::format(R"({{"bench": "tpot", {}, "context": {}, "error": "{}"}})", tag,
                                  C, json_safe(r.ok() ? err.message() : r.status().message())));
            continue;
          }
          const auto key = std::make_tuple(name, C, B);
          const auto fkey = std::make_tuple(std::string(fmt_name), name, C, B);
          if (ratio <= 0) resident_ms[fkey] = r->median_ms;
          if (ratio <= 0 && fmt == formats.front()) bf16_ms[key] = r->median_ms;
          const auto base = resident_ms.find(fkey);
          const auto first = bf16_ms.find(key);
          // vs_first_format: against the first --kv-cache-dtype entry (all resident), same
          // policy, context and batch (speed-up = 1 / this).
          out.write(fmt::format(
              R"({{"bench": "tpot", {}, "context": {}, "median_ms": {:.3f}, "mean_ms": {:.3f}, "floor_ms": {:.3f}, "vs_floor": {:.2f}, "hit_ratio": {:.3f}, "vs_resident": {:.3f}, "vs_first_format": {:.3f}, "recorded": {}, "gemv": {}}})",
              tag, C, r->median_ms, r->mean_ms, floor_ms, r->mean_ms / floor_ms, r->hit_ratio,
              base != resident_ms.end() ? r->median_ms / base->second : -1.0,
              first != bf16_ms.end() ? r->median_ms / first->second : -1.0, record, b_gemv));
        }
      }
    }
  }
  }
  if (capacity_len > 0) {
    capacity(**model, b, out, policies, formats, capacity_tiers, static_cast<int32_t>(capacity_len),
             capacity_ratio, record, rng, vocab);
  }
  return 0;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) {
  return ls::bench::run(argc, argv);
}
