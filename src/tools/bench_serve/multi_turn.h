#pragma once
// `bench serve --multi-turn T`: conversations instead of independent requests. Each of the N
// conversations (--num-prompts) sends T turns one after another: turn 1 is a random-dataset
// prompt (with --random-prefix-len, shared by every conversation), and turn k+1 re-sends the
// whole history (every earlier question and the answer the server actually gave) followed by a
// new random question of --random-input-len tokens, as a chat client does. Conversations run
// concurrently (--max-concurrency caps conversations in flight; --request-rate spaces their
// first turns). Besides vLLM's aggregates over all N x T requests, the results get a
// "multi_turn" object: per turn index the mean and median TTFT, the mean prompt length and the
// share of prompt tokens the server reported cached (usage.prompt_tokens_details.cached_tokens,
// present when the server runs with prefix caching).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench_serve/progress_bar.h"
#include "tools/bench_serve/request_client.h"

namespace ls {

struct Conversation {
  RequestSpec first;                 // turn 1
  std::vector<RequestSpec> questions;  // turns 2..T: the new question (prompt, lengths) only
};

// Runs every conversation, starting conversation c at offsets[c] (seconds from the start) on
// one of num_senders threads. Returns the outcomes, conversation-major ([N * T], turn k of
// conversation c at c * T + k), and the duration. A turn whose predecessor failed fails too,
// unsent. prompt_len of a later turn is the server's usage.prompt_tokens when it sent one.
std::pair<std::vector<RequestOutcome>, double> run_conversations(
    const Endpoint& endpoint, const std::vector<Conversation>& conversations,
    const std::vector<double>& offsets, int32_t num_senders, ProgressBar& progress);

// The "multi_turn" result object from outcomes laid out as run_conversations returns them.
nlohmann::ordered_json multi_turn_result(const std::vector<RequestOutcome>& outcomes,
                                         int32_t num_turns);

// The per-turn table printed after vLLM's summary.
std::string format_multi_turn(const nlohmann::ordered_json& multi_turn);

}  // namespace ls
