// End-to-end generation speed of one sequence at given contexts, on any backend and policy:
//  - prefill tokens/s: a chunk of --chunk tokens appended after `context` tokens in the cache
//    (after one untimed warm-up chunk, as llama-bench's warm-up run; --no-warmup times it cold);
//  - decode tokens/s: single-token steps with `context` tokens in the cache;
//  - the decode floor: weight bytes read per token / measured memory bandwidth (CPU), so the
//    table says how close decode comes to the hardware limit.
// Prints a markdown table. Example:
//   bench_generation --model /tmp/bench30m --contexts 0,4096,16384 --attention dense
// --kv-cache-dtype takes a list (e.g. f32,bf16,fp8,int8,int4) to compare K/V page formats
// (docs/kv-quantization.md): one model stack per format, each holding one sequence filled to the
// context, then rounds of decode steps alternated across the formats (so drift in a shared
// machine's speed spreads over all of them), reported as medians with the K/V bytes a dense
// decode step reads at that context and the speed relative to the list's first format. Besides
// wall time it reports the process's CPU time per step (all threads): with --threads 1 on a
// machine other jobs share, that is the step's cost even when the process gets a fraction of a
// core (wall time then measures the scheduler).
// With --kv-offload on (docs/hierarchical-kv.md) the table adds the decode steps' device-cache
// hit ratio (hits / (hits + misses) of the pages the timed steps' attention read) and the
// selection overlap (share of a step's selected pages the same layer read one step earlier;
// docs/working-set-scheduling.md).
// --shared-prefix P --batch B (docs/shared-prefix-attention.md): decode throughput of B sequences
// whose tables share one cached P-token prefix (the first sequence prefills it, the others hit
// it as prefix caching would), each with its own --suffix tokens, with shared-prefix attention
// off and on, alternated in rounds on the same cache; also the largest logit difference of one
// step run both ways (same inputs, so the same K/V is rewritten).
// --prefix-hit (docs/prefix-caching.md): for each --contexts length L, the time to first token
// of a prompt of L document tokens + --suffix own tokens when nothing is cached (a miss: the
// whole prompt prefilled) against the same document cached by an earlier request (a hit: only
// the suffix prefilled, its attention reading the cached pages). With --kv-offload on the hit's
// pages come back from host memory through the tier's residency op (the first request's row
// was released, so nothing of the document is resident): the crossover length where a hit from
// the host beats recomputing is where the speed-up passes 1.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "core/log.h"
#include "core/dtype.h"
#include "kernels/kv_quant.h"
#include "kernels/paged_kv.h"
#include "kernels/page_residency.h"
#include "kv/kv_geometry.h"
#include "kv/kv_manager.h"
#include "kv/prefix_key.h"
#include "model/model_stack.h"

namespace ls {
namespace {

// Read bandwidth of one process: each thread sums its share of a 512 MiB buffer (far beyond the
// caches); the best of several passes. huge_pages: the buffer is a mapping with transparent
// huge pages asked for, as the CPU backend holds weights; over 4 KiB pages the same loop reads
// ~25% slower on the development VM (TLB walks, prefetchers stopping at page boundaries), which
// would understate the floor.
double measure_read_bandwidth_gbs(int threads, bool huge_pages) {
  const size_t n = (size_t{512} << 20) / sizeof(float);
  std::vector<float> small;
  float* buf = nullptr;
  if (huge_pages) {
    void* p = mmap(nullptr, n * sizeof(float), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    madvise(p, n * sizeof(float), MADV_HUGEPAGE);
    buf = static_cast<float*>(p);
  } else {
    small.resize(n);
    buf = small.data();
  }
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<double> sums(static_cast<size_t>(threads));
    const double t0 = now_seconds();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t b = n * static_cast<size_t>(t) / static_cast<size_t>(threads);
        const size_t e = n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
        float acc[16] = {};
        for (size_t i = b; i + 16 <= e; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += buf[i + static_cast<size_t>(j)];
        sums[static_cast<size_t>(t)] = std::accumulate(acc, acc + 16, 0.0);
      });
    }
    for (auto& th : pool) th.join();
    const double dt = now_seconds() - t0;
    if (std::accumulate(sums.begin(), sums.end(), 0.0) == -1) fmt::print("");  // keep the sums
    best = std::max(best, static_cast<double>(n * sizeof(float)) / dt / 1e9);
  }
  if (huge_pages) munmap(buf, n * sizeof(float));
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One prefill chunk or decode step of `len` random tokens at [begin, begin + len) of `slot`;
// exits on an error (a benchmark has nothing to fall back to).
void forward_tokens(ModelStack& stack, int32_t slot, int32_t begin, int32_t len, bool prefill,
                    std::mt19937& rng, std::vector<float>& logits) {
  std::uniform_int_distribution<int32_t> tok(0, stack.runner->vocab_size() - 1);
  StepInput in;
  for (int32_t i = 0; i < len; ++i) in.tokens.push_back(tok(rng));
  in.seqs.push_back({slot, len, begin + len, prefill});
  in.logit_rows.push_back(len - 1);
  Status st = stack.kv->grow(slot, begin + len);
  if (st.ok()) st = stack.runner->forward(in, logits);
  if (!st.ok()) {
    fmt::print(stderr, "error: {}\n", st.to_string());
    std::exit(1);
  }
}

// --fill random: writes every head-page of `p` with values uniform in [-1, 1), quantized with the
// pool's format, so a decode step reads real bytes (untouched pool memory would be the kernel's
// shared zero page, served from the cache) without the minutes a long prefill per format takes on
// a shared two-core machine. The page summaries stay zero: page selection then ranks equal
// scores, which costs what ranking real ones costs.
void fill_random(const kernels::PagedKvPool& p, uint64_t seed) {
  if (!p.k || !p.v || p.page_slot) return;
  const int64_t pages = int64_t{p.num_blocks} * p.heads_per_block;
  std::vector<float> row(static_cast<size_t>(p.head_dim));
  uint64_t x = seed | 1;
  for (void* base : {p.k, p.v}) {
    for (int64_t page = 0; page < pages; ++page) {
      for (int32_t r = 0; r < p.page_tokens; ++r) {
        for (float& f : row) {  // xorshift64: a cheap stream of values in [-1, 1)
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          f = static_cast<float>(x >> 40) * 0x1p-23f - 1.0f;
        }
        if (p.quant != kernels::KvQuant::kNone) {
          const kernels::KvQuantRow at =
              kernels::kv_quant_row(p.quant, base, page, r, p.page_tokens, p.head_dim);
          kernels::kv_quantize_row(p.quant, row.data(), p.head_dim, at.codes, at.params);
        } else {
          convert_from_f32(row.data(), p.dtype,
                           static_cast<char*>(base) +
                               dtype_nbytes(p.dtype, (page * p.page_tokens + r) * p.head_dim),
                           p.head_dim);
        }
      }
    }
  }
}

struct FormatStack {
  KvCacheDtype dtype = KvCacheDtype::kAuto;
  std::unique_ptr<ModelStack> stack;
  int32_t slot = -1;
  int32_t len = 0;              // tokens in the slot's cache
  std::vector<double> step_s;   // seconds per decode step, one entry per round
  std::vector<double> cpu_s;    // process CPU seconds per decode step, one entry per round
};

// CPU time of the whole process (all its threads): on a machine shared with other jobs, the work
// a step costs even while the scheduler gives the process only a slice of the wall time.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The --kv-cache-dtype list comparison (see the header): decode only, at each context.
int compare_formats(ModelStackOptions o, const std::vector<KvCacheDtype>& formats,
                    const std::vector<int32_t>& contexts, int32_t decode_steps, int32_t repeats,
                    bool fill_random_kv) {
  if (fill_random_kv && (o.kv_offload || o.device != "cpu")) {
    fmt::print(stderr, "error: --fill random writes the CPU's untiered pools only\n");
    return 2;
  }
  std::vector<FormatStack> runs;
  for (KvCacheDtype d : formats) {
    o.kv_cache_dtype = d;
    auto stack = build_model_stack(o);
    if (!stack.ok()) {
      fmt::print(stderr, "error: --kv-cache-dtype {}: {}\n", kv_cache_dtype_name(d),
                 stack.status().to_string());
      return 1;
    }
    if (fill_random_kv) {
      fill_random((*stack)->pool->retrieval(), 1);
      fill_random((*stack)->pool->streaming(), 2);
    }
    runs.push_back(FormatStack{d, std::move(*stack), -1, 0, {}});
  }
  const ModelStack& first = *runs.front().stack;
  fmt::print("model: {} (weight bytes read per token: {:.1f} MB), backend: {}, attention: {}; "
             "{} rounds of {} decode steps per format, alternated, medians; context {}\n\n",
             o.model_dir.string(),
             static_cast<double>(first.model->weights().bytes_per_token) / 1e6,
             first.backend->name(), first.policy->name(), repeats, decode_steps,
             fill_random_kv ? "K/V random values written into the pools (--fill random)"
                            : "prefilled with random tokens");
  fmt::print("| context | KV pages | KV MB per dense decode step | decode tok/s | decode ms/token "
             "| CPU ms/token | vs {} (wall) | vs {} (CPU) |\n|---:|---|---:|---:|---:|---:|---:|---:|\n",
             runs.front().stack->kv->geometry().page_format_name(),
             runs.front().stack->kv->geometry().page_format_name());
  std::mt19937 rng(1);
  std::vector<float> logits;
  for (int32_t ctx : contexts) {
    for (FormatStack& r : runs) {
      auto slot = r.stack->kv->add_sequence();
      if (!slot.ok()) return 1;
      r.slot = *slot;
      r.len = std::max(1, ctx);
      for (int32_t b = 0; b < r.len && fill_random_kv; b += o.max_step_tokens) {
        // The pools already hold random K/V: take the pages chunk by chunk (a streaming head's
        // ring holds one prefill chunk) and compute only each chunk's last token, so the
        // sequence is a normal decode sequence from here on.
        const int32_t end = std::min(r.len, b + o.max_step_tokens);
        Status st = r.stack->kv->grow(r.slot, end - 1);
        if (!st.ok()) {
          fmt::print(stderr, "error: {}\n", st.to_string());
          return 1;
        }
        forward_tokens(*r.stack, r.slot, end - 1, 1, true, rng, logits);
      }
      for (int32_t b = 0; b < r.len && !fill_random_kv;) {
        const int32_t len = std::min(o.max_step_tokens, r.len - b);
        forward_tokens(*r.stack, r.slot, b, len, true, rng, logits);
        b += len;
      }
      r.stack->kv->finish_prefill(r.slot);
      forward_tokens(*r.stack, r.slot, r.len++, 1, false, rng, logits);  // warm-up step
      r.step_s.clear();
      r.cpu_s.clear();
    }
    for (int32_t round = 0; round < repeats; ++round) {
      for (FormatStack& r : runs) {
        forward_tokens(*r.stack, r.slot, r.len++, 1, false, rng, logits);  // warm this stack's caches
        const double t0 = now_seconds();
        const double c0 = process_cpu_seconds();
        for (int32_t s = 0; s < decode_steps; ++s) {
          forward_tokens(*r.stack, r.slot, r.len++, 1, false, rng, logits);
        }
        r.cpu_s.push_back((process_cpu_seconds() - c0) / decode_steps);
        r.step_s.push_back((now_seconds() - t0) / decode_steps);
      }
    }
    const double base = median(runs.front().step_s);
    const double base_cpu = median(runs.front().cpu_s);
    for (FormatStack& r : runs) {
      const KvGeometry& g = r.stack->kv->geometry();
      const double d = median(r.step_s);
      const double c = median(r.cpu_s);
      fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.2f}x | {:.2f}x |\n", ctx,
                 g.page_format_name(), g.retrieval_bytes_per_token() * ctx / 1e6, 1.0 / d, d * 1e3,
                 c * 1e3, base / d, base_cpu / c);
      r.stack->kv->remove_sequence(r.slot);
    }
  }
  return 0;
}

void die_if(const Status& st) {
  if (!st.ok()) {
    fmt::print(stderr, "error: {}\n", st.to_string());
    std::exit(1);
  }
}

// The --shared-prefix mode (see the header).
int shared_prefix_decode(ModelStackOptions o, int32_t prefix, int32_t batch, int32_t suffix,
                         int32_t decode_steps, int32_t repeats) {
  constexpr int32_t kWarmup = 3;  // a step shape is recorded (CUDA graphs) on its second sight
  o.max_num_seqs = batch;
  o.max_logit_rows = batch;
  o.max_step_tokens = std::max(o.max_step_tokens, batch);
  o.max_model_len = prefix + suffix + 2 * repeats * (decode_steps + kWarmup) + 2 + 16;
  auto stack_or = build_model_stack(o);
  if (!stack_or.ok()) {
    fmt::print(stderr, "error: {}\n", stack_or.status().to_string());
    return 1;
  }
  ModelStack& stack = **stack_or;
  KvManager& kv = *stack.kv;
  ModelRunner& runner = *stack.runner;
  kv.enable_prefix_caching(prefix_seed("bench_generation --shared-prefix"));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, runner.vocab_size() - 1);
  std::vector<int32_t> doc(static_cast<size_t>(prefix));
  for (int32_t& t : doc) t = tok(rng);
  std::vector<float> logits;
  std::vector<int32_t> slots;
  std::vector<int32_t> lens;
  int32_t cached = 0;
  const double t_fill = now_seconds();
  for (int32_t b = 0; b < batch; ++b) {
    std::vector<int32_t> ids = doc;
    for (int32_t i = 0; i < suffix; ++i) ids.push_back(tok(rng));
    auto slot = kv.add_sequence();
    die_if(slot.status());
    const TokenView view{ids, {}};
    const PrefixHit hit = kv.match_prefix(view, static_cast<int32_t>(ids.size()) - 1);
    kv.attach_prefix(*slot, hit);
    if (b > 0) cached = hit.num_tokens;
    const auto n = static_cast<int32_t>(ids.size());
    for (int32_t begin = hit.num_tokens; begin < n;) {
      const int32_t len = std::min(o.max_step_tokens, n - begin);
      StepInput in;
      in.tokens.assign(ids.begin() + begin, ids.begin() + begin + len);
      in.seqs.push_back({*slot, len, begin + len, true});
      in.logit_rows.push_back(len - 1);
      die_if(kv.grow(*slot, begin + len));
      die_if(runner.forward(in, logits));
      begin += len;
      kv.register_pages(*slot, view, begin);
    }
    kv.finish_prefill(*slot);
    slots.push_back(*slot);
    lens.push_back(n);
  }
  const double fill_s = now_seconds() - t_fill;
  auto step = [&](std::vector<int32_t>& tokens) {
    StepInput in;
    in.tokens = tokens;
    for (int32_t b = 0; b < batch; ++b) {
      die_if(kv.grow(slots[static_cast<size_t>(b)], lens[static_cast<size_t>(b)] + 1));
      in.seqs.push_back({slots[static_cast<size_t>(b)], 1, lens[static_cast<size_t>(b)] + 1, false});
      in.logit_rows.push_back(b);
    }
    die_if(runner.forward(in, logits));
  };
  auto next_tokens = [&] {
    std::vector<int32_t> t(static_cast<size_t>(batch));
    for (int32_t& x : t) x = tok(rng);
    return t;
  };
  auto advance = [&] {
    for (int32_t& l : lens) ++l;
  };
  // The same step both ways: its K/V rows are rewritten with the same values, so the logits
  // differ only by the attention's summation order.
  std::vector<int32_t> probe = next_tokens();
  runner.set_shared_prefix_attention(false);
  step(probe);
  const std::vector<float> off_logits = logits;
  runner.set_shared_prefix_attention(true);
  const int64_t steps0 = runner.shared_prefix_stats().steps;
  step(probe);
  const bool engaged = runner.shared_prefix_stats().steps > steps0;
  float max_diff = 0;
  for (size_t i = 0; i < logits.size() && i < off_logits.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(logits[i] - off_logits[i]));
  }
  advance();
  std::vector<double> off_s, on_s;
  for (int32_t r = 0; r < repeats; ++r) {
    for (const bool on : {false, true}) {
      runner.set_shared_prefix_attention(on);
      for (int32_t w = 0; w < kWarmup; ++w) {
        std::vector<int32_t> t = next_tokens();
        step(t);
        advance();
      }
      stack.backend->synchronize();
      const double t0 = now_seconds();
      for (int32_t s = 0; s < decode_steps; ++s) {
        std::vector<int32_t> t = next_tokens();
        step(t);
        advance();
      }
      (on ? on_s : off_s).push_back((now_seconds() - t0) / decode_steps);
    }
  }
  const double off = median(off_s), on = median(on_s);
  fmt::print("model: {}, backend: {}, attention: {}; {} sequences over a shared prefix of {} tokens "
             "({} cached for each later sequence), {} own tokens each; filled in {:.1f} s; {} "
             "rounds of {} decode steps per mode, alternated, medians\n\n",
             o.model_dir.string(), stack.backend->name(), stack.policy->name(), batch, prefix,
             cached, suffix, fill_s, repeats, decode_steps);
  fmt::print("| shared-prefix attention | decode step ms | decode tok/s (batch) | speed-up |\n"
             "|---|---:|---:|---:|\n");
  fmt::print("| off | {:.2f} | {:.1f} | 1.00x |\n", off * 1e3, batch / off);
  fmt::print("| on | {:.2f} | {:.1f} | {:.2f}x |\n", on * 1e3, batch / on, off / on);
  fmt::print("\nshared path engaged: {}; largest logit difference of one step off vs on: {:.3g}\n",
             engaged ? "yes" : "NO (no shared blocks or a sparse policy)", max_diff);
  return engaged ? 0 : 1;
}

// The --prefix-hit mode (see the header).
int prefix_hit_ttft(ModelStackOptions o, const std::vector<int32_t>& contexts, int32_t suffix,
                    int32_t repeats) {
  const int32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  o.max_num_seqs = 2;
  o.max_logit_rows = 1;
  o.max_model_len = max_ctx + suffix + 16;
  auto stack_or = build_model_stack(o);
  if (!stack_or.ok()) {
    fmt::print(stderr, "error: {}\n", stack_or.status().to_string());
    return 1;
  }
  ModelStack& stack = **stack_or;
  KvManager& kv = *stack.kv;
  ModelRunner& runner = *stack.runner;
  kv.enable_prefix_caching(prefix_seed("bench_generation --prefix-hit"), stack.pool->tiered());
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, runner.vocab_size() - 1);
  std::vector<float> logits;
  // Seconds until the prompt's last logits are on the host; the cached tokens it started from.
  auto run_prompt = [&](const std::vector<int32_t>& ids, int32_t& cached) {
    auto slot = kv.add_sequence();
    die_if(slot.status());
    const double t0 = now_seconds();
    const TokenView view{ids, {}};
    const PrefixHit hit = kv.match_prefix(view, static_cast<int32_t>(ids.size()) - 1);
    kv.attach_prefix(*slot, hit);
    cached = hit.num_tokens;
    const auto n = static_cast<int32_t>(ids.size());
    for (int32_t begin = hit.num_tokens; begin < n;) {
      const int32_t len = std::min(o.max_step_tokens, n - begin);
      StepInput in;
      in.tokens.assign(ids.begin() + begin, ids.begin() + begin + len);
      in.seqs.push_back({*slot, len, begin + len, true});
      if (begin + len == n) in.logit_rows.push_back(len - 1);
      die_if(kv.grow(*slot, begin + len));
      die_if(runner.forward(in, logits));
      begin += len;
      kv.register_pages(*slot, view, begin);
    }
    const double s = now_seconds() - t0;
    kv.remove_sequence(*slot);
    return s;
  };
  fmt::print("model: {}, backend: {}, attention: {}, KV offload {}; prompts of L document tokens "
             "+ {} own tokens, chunks of {}; medians of {} documents\n\n",
             o.model_dir.string(), stack.backend->name(), stack.policy->name(),
             stack.pool->tiered() ? "on (a hit's pages come from host memory)" : "off", suffix,
             o.max_step_tokens, repeats);
  fmt::print("| L | miss TTFT ms | hit TTFT ms | miss / hit | cached tokens | pages fetched per hit |\n"
             "|---:|---:|---:|---:|---:|---:|\n");
  for (const int32_t ctx : contexts) {
    std::vector<double> miss_s, hit_s;
    int32_t cached = 0;
    int64_t fetched = 0;
    for (int32_t r = 0; r < repeats; ++r) {
      std::vector<int32_t> doc(static_cast<size_t>(ctx));
      for (int32_t& t : doc) t = tok(rng);
      auto prompt = [&] {
        std::vector<int32_t> ids = doc;
        for (int32_t i = 0; i < suffix; ++i) ids.push_back(tok(rng));
        return ids;
      };
      int32_t c = 0;
      miss_s.push_back(run_prompt(prompt(), c));
      const int64_t before = runner.kv_tier_stats().misses;
      hit_s.push_back(run_prompt(prompt(), cached));
      fetched += runner.kv_tier_stats().misses - before;
    }
    const double m = median(miss_s), h = median(hit_s);
    fmt::print("| {} | {:.1f} | {:.1f} | {:.2f}x | {} | {} |\n", ctx, m * 1e3, h * 1e3, m / h,
               cached, fetched / repeats);
  }
  return 0;
}

struct Row {
  int32_t context;
  double prefill_tps;
  double decode_tps;
  double decode_ms;
  double hit_ratio = -1;  // decode steps' page-cache hits, with the tier on
  double overlap = -1;    // decode steps' selection overlap |S_t ∩ S_t-1| / |S_t|, tier on
  double prefill_cpu_ms = 0;  // process CPU time of the timed chunk (all threads, spin included)
};

}  // namespace
}  // namespace ls

int main(int argc, char** argv) {
  using namespace ls;
  init_logging();
  CLI::App app{"End-to-end prefill/decode speed at given contexts"};
  ModelStackOptions o;
  std::vector<int32_t> contexts{0, 4096, 16384};
  int32_t chunk = 512;
  int32_t decode_steps = 32;
  int32_t repeats = 3;
  bool bandwidth = true;
  bool warmup = true;
  app.add_option("--model", o.model_dir)->required();
  app.add_option("--device", o.device)->capture_default_str();
  app.add_option("--threads", o.num_threads)->capture_default_str();
  app.add_option("--attention", o.attention.policy)->capture_default_str();
  app.add_option("--head-pattern", o.attention.head_pattern_path);
  app.add_option("--streaming-ratio", o.attention.streaming_ratio)->capture_default_str();
  app.add_option("--token-budget", o.attention.token_budget)->capture_default_str();
  app.add_option("--select-interval", o.attention.select_interval)->capture_default_str();
  app.add_option("--contexts", contexts)->delimiter(',')->capture_default_str();
  app.add_option("--chunk", chunk, "Prefill chunk timed at each context")->capture_default_str();
  app.add_option("--decode-steps", decode_steps)->capture_default_str();
  app.add_option("--repeats", repeats, "Timed repeats (median)")->capture_default_str();
  app.add_flag("!--no-bandwidth", bandwidth, "Skip the memory-bandwidth measurement");
  app.add_flag("!--no-warmup", warmup,
               "Time the process's first prefill chunk cold (no untimed chunk before it)");
  app.add_option("--kv-offload", o.kv_offload, "on|off: retrieval heads' KV in host memory")
      ->capture_default_str();
  app.add_option("--host-kv-cache-bytes", o.host_kv_cache_bytes)->capture_default_str();
  app.add_option("--device-kv-cache-bytes", o.device_kv_cache_bytes)->capture_default_str();
  app.add_option("--offload-buffer-ratio", o.offload_buffer_ratio)->capture_default_str();
  app.add_flag("--kv-plain-lru", o.kv_plain_lru, "Plain LRU instead of bucketed LRU");
  std::vector<std::string> kv_cache_dtypes{"auto"};
  app.add_option("--kv-cache-dtype", kv_cache_dtypes,
                 "auto, f32, bf16, f16, fp8, int8 or int4; a comma-separated list compares decode "
                 "speed across formats")
      ->delimiter(',')
      ->capture_default_str();
  std::string fill = "prefill";
  app.add_option("--fill", fill,
                 "With a --kv-cache-dtype list: prefill (the context prefilled with random tokens) "
                 "or random (random K/V written straight into the CPU pools: decode reads the "
                 "same bytes, without a long prefill per format)")
      ->check(CLI::IsMember({"prefill", "random"}))
      ->capture_default_str();
  app.add_option("--quantization", o.quantization,
                 "auto, none, or q8_0|q4_0|q4_1|q4_k|q6_k (safetensors quantized at load)")
      ->capture_default_str();
  int32_t shared_prefix = 0, batch = 32, suffix = 64;
  bool prefix_hit = false;
  app.add_flag("--prefix-hit", prefix_hit,
               "Per --contexts length: time to first token of a prompt whose document is cached "
               "(a hit; from host memory with --kv-offload on) against a miss")
      ->capture_default_str();
  app.add_option("--shared-prefix", shared_prefix,
                 "Tokens of a prefix shared by --batch sequences: decode throughput with "
                 "shared-prefix attention off and on (docs/shared-prefix-attention.md)")
      ->capture_default_str();
  app.add_option("--batch", batch, "Sequences with --shared-prefix")->capture_default_str();
  app.add_option("--suffix", suffix, "Own prompt tokens per sequence with --shared-prefix")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::vector<KvCacheDtype> formats;
  for (const std::string& name : kv_cache_dtypes) {
    Result<KvCacheDtype> d = parse_kv_cache_dtype(name);
    if (!d.ok()) {
      fmt::print(stderr, "error: {}\n", d.status().to_string());
      return 2;
    }
    formats.push_back(*d);
  }
  if (formats.empty() || repeats < 1 || decode_steps < 1 || contexts.empty()) {
    fmt::print(stderr, "error: need a format, a context, --repeats >= 1 and --decode-steps >= 1\n");
    return 2;
  }
  o.kv_cache_dtype = formats.front();
  if (shared_prefix > 0) {
    if (batch < 2 || suffix < 1) {
      fmt::print(stderr, "error: --shared-prefix needs --batch >= 2 and --suffix >= 1\n");
      return 2;
    }
    o.max_step_tokens = std::max(chunk, 2048);
    return shared_prefix_decode(o, shared_prefix, batch, suffix, decode_steps, repeats);
  }
  if (prefix_hit) {
    o.max_step_tokens = std::max(chunk, 2048);
    return prefix_hit_ttft(o, contexts, std::max(1, suffix), repeats);
  }

  const int32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  o.max_num_seqs = 1;
  o.max_step_tokens = std::max(chunk, 2048);
  o.max_logit_rows = 1;
  o.max_model_len = max_ctx + chunk + decode_steps + 16;
  if (formats.size() > 1) {
    o.max_model_len = max_ctx + repeats * (decode_steps + 1) + 16;
    return compare_formats(o, formats, contexts, decode_steps, repeats, fill == "random");
  }
  auto stack_or = build_model_stack(o);
  if (!stack_or.ok()) {
    fmt::print(stderr, "error: {}\n", stack_or.status().to_string());
    return 1;
  }
  ModelStack& stack = **stack_or;
  ModelRunner& runner = *stack.runner;
  KvManager& kv = *stack.kv;
  const int32_t vocab = runner.vocab_size();
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<float> logits;

  auto run_prefill = [&](int32_t slot, int32_t begin, int32_t len) {
    StepInput in;
    for (int32_t i = 0; i < len; ++i) in.tokens.push_back(tok(rng));
    in.seqs.push_back({slot, len, begin + len, true});
    in.logit_rows.push_back(len - 1);
    Status st = kv.grow(slot, begin + len);
    if (st.ok()) st = runner.forward(in, logits);
    if (!st.ok()) {
      fmt::print(stderr, "error: {}\n", st.to_string());
      std::exit(1);
    }
  };
  auto run_decode = [&](int32_t slot, int32_t begin) {
    StepInput in;
    in.tokens.push_back(tok(rng));
    in.seqs.push_back({slot, 1, begin + 1, false});
    in.logit_rows.push_back(0);
    Status st = kv.grow(slot, begin + 1);
    if (st.ok()) st = runner.forward(in, logits);
    if (!st.ok()) {
      fmt::print(stderr, "error: {}\n", st.to_string());
      std::exit(1);
    }
  };

  // One untimed chunk first, as llama-bench's warm-up run: otherwise the timed chunk at context
  // 0 is the process's first forward and pays the first touch of every activation buffer and
  // the worker threads' start (a context > 0 is warmed by its own untimed fill).
  if (warmup) {
    auto slot = kv.add_sequence();
    if (!slot.ok()) return 1;
    run_prefill(*slot, 0, chunk);
    kv.remove_sequence(*slot);
  }
  std::vector<Row> rows;
  for (int32_t ctx : contexts) {
    std::vector<double> prefill_s, prefill_cpu_s, decode_s;
    int64_t hits = 0, misses = 0, selected = 0, reused = 0;
    for (int32_t r = 0; r < repeats; ++r) {
      auto slot = kv.add_sequence();
      if (!slot.ok()) return 1;
      // Fill the context (not timed), in large chunks.
      for (int32_t b = 0; b < ctx;) {
        const int32_t len = std::min(o.max_step_tokens, ctx - b);
        run_prefill(*slot, b, len);
        b += len;
      }
      double t0 = now_seconds();
      const double c0 = process_cpu_seconds();
      run_prefill(*slot, ctx, chunk);
      prefill_s.push_back(now_seconds() - t0);
      prefill_cpu_s.push_back(process_cpu_seconds() - c0);
      kv.remove_sequence(*slot);
      // Decode at `ctx`: a fresh sequence whose cache holds ctx tokens, then single steps.
      slot = kv.add_sequence();
      for (int32_t b = 0; b < std::max(1, ctx);) {
        const int32_t len = std::min(o.max_step_tokens, std::max(1, ctx) - b);
        run_prefill(*slot, b, len);
        b += len;
      }
      kv.finish_prefill(*slot);
      int32_t len = std::max(1, ctx);
      run_decode(*slot, len++);  // warm-up step
      const KvTierStats before = runner.kv_tier_stats();
      t0 = now_seconds();
      for (int32_t s = 0; s < decode_steps; ++s) run_decode(*slot, len++);
      decode_s.push_back((now_seconds() - t0) / decode_steps);
      const KvTierStats after = runner.kv_tier_stats();
      hits += after.hits - before.hits;
      misses += after.misses - before.misses;
      for (size_t i = 0; i + kernels::kRowCounters <= after.row_counters.size() &&
                         i + kernels::kRowCounters <= before.row_counters.size();
           i += kernels::kRowCounters) {
        selected += after.row_counters[i + kernels::kRowMandatory] -
                    before.row_counters[i + kernels::kRowMandatory];
        reused += after.row_counters[i + kernels::kRowReused] -
                  before.row_counters[i + kernels::kRowReused];
      }
      kv.remove_sequence(*slot);
    }
    const double p = median(prefill_s), d = median(decode_s);
    Row row{ctx, chunk / p, 1.0 / d, d * 1e3};
    row.prefill_cpu_ms = median(prefill_cpu_s) * 1e3;
    if (stack.pool->tiered() && hits + misses > 0) {
      row.hit_ratio = static_cast<double>(hits) / static_cast<double>(hits + misses);
    }
    if (stack.pool->tiered() && selected > 0) {
      row.overlap = static_cast<double>(reused) / static_cast<double>(selected);
    }
    rows.push_back(row);
  }

  const int64_t weight_bytes = stack.model->weights().bytes_per_token;
  fmt::print("model: {} (weight bytes read per token: {:.1f} MB), backend: {}, attention: {}\n",
             o.model_dir.string(), static_cast<double>(weight_bytes) / 1e6, stack.backend->name(),
             stack.policy->name());
  double bw = 0;
  if (bandwidth && stack.backend->device() == Device::kCpu) {
    const int threads = o.num_threads > 0 ? o.num_threads
                                          : static_cast<int>(std::thread::hardware_concurrency());
    const double bw_small = measure_read_bandwidth_gbs(threads, false);
    const double bw_huge = measure_read_bandwidth_gbs(threads, true);
    bw = std::max(bw_small, bw_huge);  // the floor takes the faster: the stricter bound
    fmt::print(
        "measured read bandwidth: {:.1f} GB/s (huge pages; 4 KiB pages: {:.1f} GB/s); decode floor "
        "(weights only): {:.2f} ms/token\n",
        bw_huge, bw_small, static_cast<double>(weight_bytes) / (bw * 1e9) * 1e3);
  }
  const bool tiered = stack.pool->tiered();
  fmt::print("\n| context | prefill tok/s (chunk {}) | decode tok/s | decode ms/token |{}{} "
             "prefill CPU ms |\n",
             chunk, bw > 0 ? " decode / floor |" : "",
             tiered ? " decode hit ratio | selection overlap |" : "");
  fmt::print("|---:|---:|---:|---:|{}{}---:|\n", bw > 0 ? "---:|" : "",
             tiered ? "---:|---:|" : "");
  for (const Row& r : rows) {
    std::string floor;
    if (bw > 0) {
      const double floor_ms = static_cast<double>(weight_bytes) / (bw * 1e9) * 1e3;
      floor = fmt::format(" {:.2f}x |", r.decode_ms / floor_ms);
    }
    const std::string hit =
        tiered ? (r.hit_ratio >= 0 ? fmt::format(" {:.3f} |", r.hit_ratio) : std::string(" - |")) +
                     (r.overlap >= 0 ? fmt::format(" {:.3f} |", r.overlap) : std::string(" - |"))
               : std::string();
    fmt::print("| {} | {:.0f} | {:.1f} | {:.2f} |{}{} {:.1f} |\n", r.context, r.prefill_tps,
               r.decode_tps, r.decode_ms, floor, hit, r.prefill_cpu_ms);
  }
  return 0;
}
