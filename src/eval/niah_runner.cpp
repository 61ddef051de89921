#include "eval/niah_runner.h"

#include <fmt/format.h>

#include <map>

#include "core/clock.h"
#include "eval/scoring.h"

namespace ls::eval {

Result<std::vector<PromptResult>> run_prompts(EngineCore& engine,
                                              const std::vector<EvalPrompt>& prompts,
                                              const RunOptions& options) {
  if (engine.tokenizer() == nullptr) {
    return failed_precondition("the model has no tokenizer.json; the evaluation needs one");
  }
  if (engine.has_work()) return failed_precondition("the evaluation needs an idle engine");
  std::vector<int32_t> lengths;  // context lengths in first-seen order
  std::map<int32_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto [it, fresh] = by_length.try_emplace(prompts[i].context_tokens);
    if (fresh) lengths.push_back(prompts[i].context_tokens);
    it->second.push_back(i);
  }

  std::vector<PromptResult> results(prompts.size());
  // The sinks write into `results`: on an error, every request still in the engine is aborted
  // before returning, so that no sink outlives it.
  std::vector<std::string> in_flight;
  auto abort_all = [&](Status st) {
    for (const std::string& id : in_flight) engine.abort(id);
    return st;
  };
  for (int32_t length : lengths) {
    const std::vector<size_t>& group = by_length[length];
    const double start = now_seconds();
    in_flight.clear();
    for (size_t i : group) {
      PromptResult& r = results[i];
      r.prompt = prompts[i];
      GenerateRequest req;
      req.request_id = fmt::format("eval-{}", i);
      req.prompt_ids = engine.tokenizer()->encode(prompts[i].prompt, options.add_special_tokens);
      req.sampling.temperature = 0.0f;
      req.stop.max_tokens = options.max_tokens;
      req.stop.eos_token_ids = engine.default_stop().eos_token_ids;
      req.stop.stop = {"\n"};  // scoring reads the first line only
      const std::string id = req.request_id;
      auto sink = [&r](const RequestOutput& out) {
        r.prediction += out.text;
        if (out.finished) {
          r.finish_reason = out.finish_reason == FinishReason::kError
                                ? "error: " + out.error
                                : finish_reason_name(out.finish_reason);
          r.prompt_tokens = out.prompt_tokens;
          r.completion_tokens = out.completion_tokens;
        }
      };
      Status st = engine.add_request(std::move(req), sink);
      if (!st.ok()) return abort_all(st.with_context(prompts[i].id));
      in_flight.push_back(id);
    }
    while (engine.has_work()) {
      Status st = engine.step();
      if (!st.ok()) return abort_all(st);
    }
    for (size_t i : group) {
      PromptResult& r = results[i];
      if (r.finish_reason.rfind("error", 0) == 0) {
        return internal_error("{}: generation failed: {}", prompts[i].id, r.finish_reason);
      }
      const PredictionScore s = score_prediction(r.prediction, r.prompt.answer, r.prompt.answers);
      r.cut = s.cut;
      r.exact = s.exact;
      r.recall = s.recall;
      r.contained = s.contained;
    }
    if (options.on_length_done) {
      options.on_length_done(length, static_cast<int32_t>(group.size()), now_seconds() - start);
    }
  }
  return results;
}

}  // namespace ls::eval
