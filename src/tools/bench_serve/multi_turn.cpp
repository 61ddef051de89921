#include "tools/bench_serve/multi_turn.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/clock.h"
#include "tools/bench_serve/bench_metrics.h"
#include "tools/bench_serve/dispatch.h"

namespace ls {

using Json = nlohmann::ordered_json;

namespace {

// Sends the turns of one conversation in order; outcomes go to out[0 .. T).
void run_one(const Endpoint& endpoint, const Conversation& conv, double dispatch_s,
             RequestOutcome* out, ProgressBar& progress) {
  const auto num_turns = static_cast<int32_t>(conv.questions.size()) + 1;
  RequestSpec spec = conv.first;
  for (int32_t k = 0; k < num_turns; ++k) {
    RequestOutcome& o = out[k];
    if (k > 0 && !out[k - 1].success) {
      o.success = false;
      o.prompt_len = spec.prompt_len;
      o.error = "an earlier turn of this conversation failed";
      progress.advance();
      continue;
    }
    o = send_streaming_request(endpoint, spec);
    o.dispatch_s = k == 0 ? dispatch_s : o.start_s;
    if (o.usage_prompt_tokens >= 0) o.prompt_len = o.usage_prompt_tokens;
    progress.advance();
    if (k + 1 == num_turns) break;
    // The next turn re-sends the history: this turn's question and the answer it got.
    const RequestSpec& next = conv.questions[static_cast<size_t>(k)];
    spec.history.push_back(spec.prompt);
    spec.history.push_back(o.generated_text);
    spec.prompt = next.prompt;
    spec.prompt_len = o.prompt_len + o.output_tokens + next.prompt_len;
    spec.max_tokens = next.max_tokens;
  }
}

Json stats_of(const std::vector<const RequestOutcome*>& turn) {
  std::vector<double> ttft_ms;
  int64_t prompt = 0, cached = 0, reported = 0, ok = 0;
  for (const RequestOutcome* o : turn) {
    if (!o->success) continue;
    ++ok;
    ttft_ms.push_back(o->ttft_s * 1e3);
    prompt += o->prompt_len;
    if (o->cached_tokens >= 0) {
      cached += o->cached_tokens;
      reported += o->prompt_len;
    }
  }
  double mean = 0;
  for (double t : ttft_ms) mean += t;
  Json j;
  j["completed"] = ok;
  j["mean_ttft_ms"] = ttft_ms.empty() ? 0.0 : mean / static_cast<double>(ttft_ms.size());
  j["median_ttft_ms"] = percentile(ttft_ms, 50);
  j["mean_prompt_tokens"] = ok > 0 ? static_cast<double>(prompt) / static_cast<double>(ok) : 0.0;
  j["cached_tokens"] = cached;
  // null when the server reported no cached tokens (prefix caching off)
  j["cached_token_share"] =
      reported > 0 ? Json(static_cast<double>(cached) / static_cast<double>(reported)) : Json();
  return j;
}

}  // namespace

std::pair<std::vector<RequestOutcome>, double> run_conversations(
    const Endpoint& endpoint, const std::vector<Conversation>& conversations,
    const std::vector<double>& offsets, int32_t num_senders, ProgressBar& progress) {
  const size_t num_turns = conversations.empty() ? 1 : conversations.front().questions.size() + 1;
  std::vector<RequestOutcome> outcomes(conversations.size() * num_turns);
  const double duration =
      dispatch_on_schedule(offsets, num_senders, [&](size_t c, double due_s) {
        run_one(endpoint, conversations[c], due_s, &outcomes[c * num_turns], progress);
      });
  return {std::move(outcomes), duration};
}

Json multi_turn_result(const std::vector<RequestOutcome>& outcomes, int32_t num_turns) {
  const auto t = static_cast<size_t>(std::max(1, num_turns));
  Json j;
  j["turns"] = num_turns;
  j["conversations"] = outcomes.size() / t;
  Json per_turn = Json::array();
  std::vector<const RequestOutcome*> all;
  for (size_t k = 0; k < t; ++k) {
    std::vector<const RequestOutcome*> turn;
    for (size_t i = k; i < outcomes.size(); i += t) turn.push_back(&outcomes[i]);
    Json s = stats_of(turn);
    Json row;
    row["turn"] = k + 1;
    for (auto& [key, value] : s.items()) row[key] = value;
    per_turn.push_back(row);
  }
  for (const RequestOutcome& o : outcomes) all.push_back(&o);
  const Json total = stats_of(all);
  j["cached_tokens"] = total["cached_tokens"];
  j["cached_token_share"] = total["cached_token_share"];
  j["per_turn"] = per_turn;
  return j;
}

std::string format_multi_turn(const Json& m) {
  std::string s = fmt::format("{:=^50}\n", " Multi-turn ");
  s += fmt::format("{:<40}{:<10}\n", "Conversations:", m["conversations"].get<int64_t>());
  s += fmt::format("{:<40}{:<10}\n", "Turns per conversation:", m["turns"].get<int64_t>());
  const auto share = [](const Json& v) {
    return v.is_null() ? std::string("n/a") : fmt::format("{:.3f}", v.get<double>());
  };
  s += fmt::format("{:<40}{:<10}\n", "Cached prompt-token share:", share(m["cached_token_share"]));
  s += fmt::format("{:>5} {:>10} {:>14} {:>16} {:>12}\n", "turn", "prompt", "mean TTFT ms",
                   "median TTFT ms", "cached share");
  for (const Json& row : m["per_turn"]) {
    s += fmt::format("{:>5} {:>10.1f} {:>14.2f} {:>16.2f} {:>12}\n", row["turn"].get<int64_t>(),
                     row["mean_prompt_tokens"].get<double>(), row["mean_ttft_ms"].get<double>(),
                     row["median_ttft_ms"].get<double>(), share(row["cached_token_share"]));
  }
  s += fmt::format("{:=^50}\n", "");
  return s;
}

}  // namespace ls
