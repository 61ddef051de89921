#pragma once
// What the prefix-caching and shared-prefix engine tests record of a run through EngineCore:
// each request's tokens, the logprobs of its chosen and top tokens (bit for bit), its cached
// tokens and preemptions, and the engine's stats at the end; plus the requests and token helpers
// both build their workloads from.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_core.h"

namespace ls::test {

struct Outcome {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::vector<float>> logprobs;  // chosen and top-5 tokens', bit for bit
  std::map<std::string, int32_t> cached;               // RequestOutput::cached_tokens
  std::map<std::string, int32_t> preemptions;          // RequestOutput::num_preemptions
  EngineStats stats;
};

// Greedy, top-5 logprobs, no EOS: a request runs its max_tokens.
inline GenerateRequest request(const std::string& id, std::vector<int32_t> prompt,
                               int32_t max_tokens) {
  GenerateRequest g;
  g.request_id = id;
  g.prompt_ids = std::move(prompt);
  g.sampling.temperature = 0;
  g.sampling.logprobs = 5;
  g.stop.max_tokens = max_tokens;
  g.stop.eos_token_ids = {};
  return g;
}

// Adds `g` to `core`, recording its outputs into `run`.
inline void submit(EngineCore& core, const GenerateRequest& g, Outcome& run) {
  const std::string id = g.request_id;
  ASSERT_TRUE(core.add_request(g, [&run, id](const RequestOutput& o) {
                    auto& t = run.tokens[id];
                    t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
                    auto& l = run.logprobs[id];
                    for (const TokenLogprob& x : o.logprobs) l.push_back(x.logprob);
                    for (const auto& top : o.top_logprobs)
                      for (const TokenLogprob& x : top) l.push_back(x.logprob);
                    if (o.finished) run.cached[id] = o.cached_tokens;
                    if (o.finished) run.preemptions[id] = o.num_preemptions;
                  }).ok());
}

inline void drain(EngineCore& core) {
  for (int32_t guard = 0; core.has_work() && guard < 20000; ++guard) ASSERT_TRUE(core.step().ok());
}

// n token ids below 300 (the fixture models' vocabularies are 320 and larger).
inline std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(rng() % 300));
  return v;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace ls::test
