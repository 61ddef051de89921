// Exact page-selection locality on real prompts (issue 22 item 5; docs/working-set-scheduling.md,
// "Measured locality"). For every prompt of a JSONL file (`longserve eval niah --emit-prompts`)
// it prefills the prompt, then runs --decode-steps greedy decode steps (argmax; an end-of-text
// token does not stop it: the steps are for their attention, not their text) and writes one JSON
// line per request with, for every decode step and layer, the pages each kv head read: the
// selection page_select returned (recorded through SelectingPolicy's selection hook) or, on a
// step that reuses it (--select-interval), the selection in effect, plus the pages started
// since the listed last page (what the attention kernel and the residency op read:
// kernels/cpu/attention_pages.cpp). With --kv-offload on it also writes the device cache's
// per-step counters (mandatory, reused, hits, misses of the request's row). Counts, not timings.
// scripts/eval/selection_locality.py turns the lines into the locality table. Example:
//   bench_locality --model SmolLM2-135M-Instruct.Q4_1.gguf --attention quest --token-budget 1024
//       --prompts prompts.jsonl --lengths 2048,4096 --per-length 2 --decode-steps 64 --out q.jsonl
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention/selecting_policy.h"
#include "attention/selection_hook.h"
#include "core/log.h"
#include "core/status.h"
#include "eval/eval_prompt.h"
#include "kernels/page_residency.h"
#include "kv/kv_manager.h"
#include "model/model_stack.h"
#include "tokenizer/tokenizer.h"

namespace ls {
namespace {

void die_if(const Status& st) {
  if (!st.ok()) {
    fmt::print(stderr, "error: {}\n", st.to_string());
    std::exit(1);
  }
}

int32_t argmax(const std::vector<float>& logits, int32_t vocab) {
  const auto end = logits.begin() + std::min<ptrdiff_t>(vocab, static_cast<ptrdiff_t>(logits.size()));
  return static_cast<int32_t>(std::max_element(logits.begin(), end) - logits.begin());
}

}  // namespace
}  // namespace ls

int main(int argc, char** argv) {
  using namespace ls;
  init_logging();
  CLI::App app{"Exact per-step page selections of real prompts, for the locality table"};
  ModelStackOptions o;
  std::string prompts_path, out_path;
  std::vector<int32_t> lengths;
  int32_t per_length = 2, decode_steps = 64;
  app.add_option("--model", o.model_dir)->required();
  app.add_option("--threads", o.num_threads)->capture_default_str();
  app.add_option("--attention", o.attention.policy)->capture_default_str();
  app.add_option("--head-pattern", o.attention.head_pattern_path);
  app.add_option("--streaming-ratio", o.attention.streaming_ratio)->capture_default_str();
  app.add_option("--token-budget", o.attention.token_budget)->capture_default_str();
  app.add_option("--select-interval", o.attention.select_interval)->capture_default_str();
  app.add_option("--load-format", o.load_format, "auto, or dummy (random weights)")
      ->capture_default_str();
  app.add_option("--prompts", prompts_path, "JSONL from longserve eval niah --emit-prompts")
      ->required();
  app.add_option("--lengths", lengths, "Prompt lengths to take (default: all)")->delimiter(',');
  app.add_option("--per-length", per_length, "Prompts per length")->capture_default_str();
  app.add_option("--decode-steps", decode_steps)->capture_default_str();
  app.add_option("--kv-offload", o.kv_offload, "on|off")->capture_default_str();
  app.add_option("--offload-buffer-ratio", o.offload_buffer_ratio)->capture_default_str();
  app.add_option("--out", out_path, "JSONL output (one line per request)")->required();
  CLI11_PARSE(app, argc, argv);

  auto read = eval::read_prompts_jsonl(prompts_path);
  die_if(read.status());
  std::vector<eval::EvalPrompt> prompts;
  std::map<int32_t, int32_t> taken;
  for (eval::EvalPrompt& p : *read) {
    if (!lengths.empty() &&
        std::find(lengths.begin(), lengths.end(), p.context_tokens) == lengths.end()) {
      continue;
    }
    if (taken[p.context_tokens]++ >= per_length) continue;
    prompts.push_back(std::move(p));
  }
  if (prompts.empty() || decode_steps < 2) {
    fmt::print(stderr, "error: no prompt selected, or --decode-steps < 2\n");
    return 2;
  }
  auto tok_or = Tokenizer::load(o.model_dir);
  die_if(tok_or.status());
  const Tokenizer& tokenizer = **tok_or;
  int32_t longest = 0;
  std::vector<std::vector<int32_t>> ids;
  for (const eval::EvalPrompt& p : prompts) {
    ids.push_back(tokenizer.encode(p.prompt, true));
    longest = std::max(longest, static_cast<int32_t>(ids.back().size()));
  }
  o.max_num_seqs = 1;
  o.max_logit_rows = 1;
  o.max_step_tokens = 2048;
  o.max_model_len = longest + decode_steps + 16;
  auto stack_or = build_model_stack(o);
  die_if(stack_or.status());
  ModelStack& stack = **stack_or;
  auto* policy = dynamic_cast<SelectingPolicy*>(stack.policy.get());
  if (policy == nullptr) {
    fmt::print(stderr, "error: --attention {} does not select pages\n", o.attention.policy);
    return 2;
  }
  KvManager& kv = *stack.kv;
  ModelRunner& runner = *stack.runner;
  const KvGeometry& geo = kv.geometry();
  const int32_t pt = geo.page_tokens;
  const int32_t vocab = runner.vocab_size();
  std::vector<RecordedSelection> step_sel;  // this step's page_select rows, all layers
  policy->set_selection_hook([&](Backend& b, int32_t layer, const kernels::PageSelectParams& p) {
    for (RecordedSelection& r : read_selections(b, layer, p)) step_sel.push_back(std::move(r));
  });
  std::ofstream out(out_path);
  if (!out) {
    fmt::print(stderr, "error: cannot write {}\n", out_path);
    return 1;
  }
  const int32_t layers = geo.num_layers;
  const int32_t heads = geo.num_kv_heads;
  std::vector<float> logits;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& prompt = ids[i];
    const auto n = static_cast<int32_t>(prompt.size());
    auto slot_or = kv.add_sequence();
    die_if(slot_or.status());
    const int32_t slot = *slot_or;
    for (int32_t b = 0; b < n;) {
      const int32_t len = std::min(o.max_step_tokens, n - b);
      StepInput in;
      in.tokens.assign(prompt.begin() + b, prompt.begin() + b + len);
      in.seqs.push_back({slot, len, b + len, true});
      if (b + len == n) in.logit_rows.push_back(len - 1);
      die_if(kv.grow(slot, b + len));
      step_sel.clear();
      die_if(runner.forward(in, logits));
      b += len;
    }
    kv.finish_prefill(slot);
    // The selection in effect per (layer, kv head): the last one page_select returned.
    std::vector<std::vector<int32_t>> current(static_cast<size_t>(layers * heads));
    nlohmann::json steps = nlohmann::json::array();
    int32_t token = argmax(logits, vocab);
    std::vector<int32_t> generated;
    int32_t len = n;
    for (int32_t s = 0; s < decode_steps; ++s) {
      StepInput in;
      in.tokens.push_back(token);
      in.seqs.push_back({slot, 1, len + 1, false});
      in.logit_rows.push_back(0);
      die_if(kv.grow(slot, len + 1));
      const KvTierStats before = runner.kv_tier_stats();
      step_sel.clear();
      die_if(runner.forward(in, logits));
      const KvTierStats after = runner.kv_tier_stats();
      ++len;
      for (const RecordedSelection& r : step_sel) {
        for (int32_t h = 0; h < heads; ++h) {
          current[static_cast<size_t>(r.layer * heads + h)] = r.pages[static_cast<size_t>(h)];
        }
      }
      // Pages read: the selection in effect plus every page after its last listed one.
      const int32_t last_page = (len - 1) / pt;
      nlohmann::json read = nlohmann::json::array();
      for (int32_t l = 0; l < layers; ++l) {
        nlohmann::json lh = nlohmann::json::array();
        for (int32_t h = 0; h < heads; ++h) {
          std::vector<int32_t> pages = current[static_cast<size_t>(l * heads + h)];
          if (!pages.empty()) {
            for (int32_t p = pages.back() + 1; p <= last_page; ++p) pages.push_back(p);
          }
          lh.push_back(pages);
        }
        read.push_back(std::move(lh));
      }
      nlohmann::json step = {{"kv_len", len}, {"reselected", !step_sel.empty()}, {"read", read}};
      if (after.enabled) {
        const auto base = static_cast<size_t>(slot) * kernels::kRowCounters;
        auto delta = [&](int32_t k) {
          return after.row_counters[base + static_cast<size_t>(k)] -
                 before.row_counters[base + static_cast<size_t>(k)];
        };
        step["tier"] = {{"mandatory", delta(kernels::kRowMandatory)},
                        {"reused", delta(kernels::kRowReused)},
                        {"hits", delta(kernels::kRowHits)},
                        {"misses", delta(kernels::kRowMisses)}};
      }
      steps.push_back(std::move(step));
      generated.push_back(token);
      token = argmax(logits, vocab);
    }
    kv.remove_sequence(slot);
    const KvTierStats tier = runner.kv_tier_stats();
    nlohmann::json line = {{"model", o.model_dir.string()},
                           {"load_format", o.load_format},
                           {"attention", stack.policy->name()},
                           {"token_budget", o.attention.token_budget},
                           {"select_interval", o.attention.select_interval},
                           {"page_tokens", pt},
                           {"num_layers", layers},
                           {"num_kv_heads", heads},
                           {"kv_offload", tier.enabled},
                           {"offload_buffer_ratio", o.offload_buffer_ratio},
                           {"slots_per_row", tier.slots_per_row},
                           {"id", prompts[i].id},
                           {"context_tokens", prompts[i].context_tokens},
                           {"prompt_tokens", n},
                           {"generated", tokenizer.decode(generated)},
                           {"steps", std::move(steps)}};
    out << line.dump() << "\n";
    out.flush();
    fmt::print(stderr, "[locality] {} {} ({} tokens): {} decode steps recorded\n",
               stack.policy->name(), prompts[i].id, n, decode_steps);
  }
  return 0;
}
