// A long prompt arriving while other requests decode, chunked prefill against layer-segmented
// prefill (docs/layer-segmented-prefill.md), through the real engine (scheduler, runner, tier):
//  - TTFT of the long prompt (submit to first token);
//  - the running decodes' inter-token latency while it prefills (mean = TPOT, p99) against the
//    same decodes with nothing prefilling (measured first, in the same engine);
//  - device memory the prefilling request holds: its KV on the device (every block with the tier
//    off; its cache partition and streaming blocks with the tier on) plus, for layer-segmented,
//    the hidden-state rows of the prompt; and the host-to-device bytes its prefill moved (tier).
// Prints a markdown table, one row per mode. Example (GPU):
//   bench_prefill_modes --model M --device cuda --attention lserve --kv-offload on
//     --prompt-tokens 32768 --decodes 8 --modes chunked,layer-segmented
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine_core.h"

namespace ls {
namespace {

struct ModeResult {
  std::string mode;
  double ttft_s = 0;
  double idle_itl_ms = 0;     // decodes' mean inter-token latency with nothing prefilling
  double tpot_ms = 0;         // ... while the long prompt prefills
  double p99_itl_ms = 0;
  int32_t prefill_steps = 0;  // engine steps from submit to first token
  int64_t device_kv_bytes = 0;
  int64_t arena_bytes = 0;
  int64_t h2d_bytes = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace
}  // namespace ls

int main(int argc, char** argv) {
  using namespace ls;
  init_logging();
  CLI::App app{"TTFT of a long prompt and TPOT of running decodes: chunked vs layer-segmented"};
  EngineConfig base;
  std::vector<std::string> modes{"chunked", "layer-segmented"};
  int32_t prompt_tokens = 32768;
  int32_t decodes = 8;
  int32_t decode_prompt = 1024;
  int32_t idle_steps = 16;
  app.add_option("--model", base.model_dir)->required();
  app.add_option("--device", base.device)->capture_default_str();
  app.add_option("--threads", base.num_threads)->capture_default_str();
  app.add_option("--attention", base.attention.policy)->capture_default_str();
  app.add_option("--head-pattern", base.attention.head_pattern_path);
  app.add_option("--streaming-ratio", base.attention.streaming_ratio)->capture_default_str();
  app.add_option("--token-budget", base.attention.token_budget)->capture_default_str();
  app.add_option("--max-num-batched-tokens", base.max_num_batched_tokens)->capture_default_str();
  app.add_option("--max-model-len", base.max_model_len, "0: prompt + decodes' needs")
      ->capture_default_str();
  app.add_option("--kv-cache-bytes", base.kv_cache_bytes)->capture_default_str();
  app.add_option("--gpu-memory-utilization", base.gpu_memory_utilization)->capture_default_str();
  app.add_option("--kv-offload", base.kv_offload)->capture_default_str();
  app.add_option("--host-kv-cache-bytes", base.host_kv_cache_bytes)->capture_default_str();
  app.add_option("--device-kv-cache-bytes", base.device_kv_cache_bytes)->capture_default_str();
  app.add_option("--offload-buffer-ratio", base.offload_buffer_ratio)->capture_default_str();
  app.add_option("--prefill-segment-tokens", base.prefill_segment_tokens)->capture_default_str();
  app.add_option("--modes", modes, "chunked and/or layer-segmented")->delimiter(',')
      ->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "The long prompt")->capture_default_str();
  app.add_option("--decodes", decodes, "Requests decoding while it prefills")->capture_default_str();
  app.add_option("--decode-prompt", decode_prompt, "Their prompts")->capture_default_str();
  app.add_option("--idle-steps", idle_steps, "Decode steps timed before the long prompt arrives")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  base.max_num_seqs = std::max(base.max_num_seqs, decodes + 1);
  base.layer_segmented_min_tokens = std::min(prompt_tokens, base.max_num_batched_tokens + 1);
  if (base.max_model_len == 0) base.max_model_len = std::max(prompt_tokens + 64, decode_prompt + 4096);
  std::mt19937 rng(1);
  std::vector<ModeResult> results;
  for (const std::string& mode : modes) {
    EngineConfig c = base;
    c.prefill_mode = mode;
    auto core_or = EngineCore::create(c);
    if (!core_or.ok()) {
      fmt::print(stderr, "error: {}\n", core_or.status().to_string());
      return 1;
    }
    EngineCore& core = **core_or;
    const int32_t vocab = core.vocab_size();
    std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
    std::map<std::string, std::vector<int64_t>> token_ns;  // request -> each token's time
    auto submit = [&](const std::string& id, int32_t len, int32_t max_tokens) {
      GenerateRequest r;
      r.request_id = id;
      for (int32_t i = 0; i < len; ++i) r.prompt_ids.push_back(tok(rng));
      r.sampling.temperature = 0;
      r.stop.max_tokens = max_tokens;
      r.stop.eos_token_ids = {};
      r.stop.ignore_eos = true;
      const Status st = core.add_request(r, [&token_ns, id](const RequestOutput& o) {
        for (size_t i = 0; i < o.token_ids.size(); ++i) token_ns[id].push_back(now_ns());
      });
      if (!st.ok()) {
        fmt::print(stderr, "error: {}\n", st.to_string());
        std::exit(1);
      }
    };
    auto step = [&]() {
      const Status st = core.step();
      if (!st.ok()) {
        fmt::print(stderr, "error: {}\n", st.to_string());
        std::exit(1);
      }
    };
    // The decodes: prefilled, then running with room to decode through the long prefill.
    for (int32_t d = 0; d < decodes; ++d) {
      submit("d" + std::to_string(d), decode_prompt, c.max_model_len - decode_prompt - 1);
    }
    auto all_decoding = [&]() {
      for (int32_t d = 0; d < decodes; ++d) {
        if (token_ns["d" + std::to_string(d)].empty()) return false;
      }
      return true;
    };
    while (!all_decoding()) step();
    auto itls_since = [&](int64_t t0, int64_t t1) {
      std::vector<double> v;
      for (int32_t d = 0; d < decodes; ++d) {
        const auto& ts = token_ns["d" + std::to_string(d)];
        for (size_t i = 1; i < ts.size(); ++i) {
          if (ts[i - 1] >= t0 && ts[i] <= t1) v.push_back(static_cast<double>(ts[i] - ts[i - 1]) / 1e6);
        }
      }
      return v;
    };
    ModeResult r;
    r.mode = mode;
    const int64_t idle0 = now_ns();
    for (int32_t s = 0; s < idle_steps; ++s) step();
    r.idle_itl_ms = mean(itls_since(idle0, now_ns()));

    const EngineStats before = core.stats();
    const int64_t t0 = now_ns();
    submit("long", prompt_tokens, 1);
    const KvGeometry& g = core.kv().geometry();
    const BlockCount blocks = core.kv().blocks_for_new_sequence(prompt_tokens);
    while (token_ns["long"].empty()) {
      step();
      ++r.prefill_steps;
    }
    const int64_t t1 = token_ns["long"].front();
    const EngineStats after = core.stats();
    r.ttft_s = static_cast<double>(t1 - t0) / 1e9;
    const std::vector<double> itl = itls_since(t0, t1);
    r.tpot_ms = mean(itl);
    r.p99_itl_ms = percentile(itl, 0.99);
    const int64_t streaming = int64_t{blocks.streaming} * g.streaming_block_bytes();
    if (after.kv_offload) {
      r.device_kv_bytes = after.kv_device_cache_bytes / c.max_num_seqs + streaming;
      r.h2d_bytes = after.kv_offload_bytes_total - before.kv_offload_bytes_total;
    } else {
      r.device_kv_bytes = int64_t{blocks.retrieval} * g.retrieval_block_bytes() + streaming;
    }
    if (core.layer_segmented_prefill()) {
      r.arena_bytes = core.layer_segment_arena_bytes() / c.max_model_len * prompt_tokens;
    }
    results.push_back(r);
    core.abort_all();
    fmt::print(stderr, "{}: TTFT {:.3f} s over {} steps\n", mode, r.ttft_s, r.prefill_steps);
  }

  fmt::print(
      "prompt {} tokens, {} decodes of {}-token prompts, --max-num-batched-tokens {}, attention {}, "
      "device {}, kv-offload {}\n\n",
      prompt_tokens, decodes, decode_prompt, base.max_num_batched_tokens, base.attention.policy,
      base.device, base.kv_offload ? "on" : "off");
  fmt::print(
      "| prefill | TTFT s | steps | decode ITL idle ms | TPOT during prefill ms | p99 ITL ms | "
      "device KV of the prompt MB | hidden-state rows MB | H2D during prefill MB |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const ModeResult& r : results) {
    fmt::print("| {} | {:.3f} | {} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.1f} |\n",
               r.mode, r.ttft_s, r.prefill_steps, r.idle_itl_ms, r.tpot_ms, r.p99_itl_ms,
               static_cast<double>(r.device_kv_bytes) / 1e6,
               static_cast<double>(r.arena_bytes) / 1e6, static_cast<double>(r.h2d_bytes) / 1e6);
  }
  return 0;
}
