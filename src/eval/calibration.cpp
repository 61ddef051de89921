#include "eval/calibration.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "engine/engine_core.h"
#include "io/model_config.h"

namespace ls::eval {

namespace {

// A prompt with its answer appended, and where the answer starts.
struct ScoredSequence {
  std::vector<int32_t> ids;  // [prompt tokens (with BOS) + answer tokens + end token]
  size_t answer_begin = 0;   // index of the first answer token in ids
};

double log_softmax_at(const float* row, int32_t vocab, int32_t target) {
  double max = -INFINITY;
  for (int32_t i = 0; i < vocab; ++i) max = std::max(max, static_cast<double>(row[i]));
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  return static_cast<double>(row[target]) - max - std::log(sum);
}

// Sum over the answer tokens of log p(token | everything before it), one value per sequence.
Result<std::vector<double>> answer_logprobs(EngineCore& engine,
                                            const std::vector<ScoredSequence>& seqs,
                                            int64_t& num_tokens) {
  std::vector<double> out;
  std::vector<float> logits;  // [ids.size(), vocab] f32
  const int32_t vocab = engine.vocab_size();
  for (const ScoredSequence& s : seqs) {
    LS_RETURN_IF_ERROR(engine.score(s.ids, logits));
    double lp = 0;
    for (size_t t = s.answer_begin; t < s.ids.size(); ++t) {
      lp += log_softmax_at(logits.data() + (t - 1) * static_cast<size_t>(vocab), vocab, s.ids[t]);
    }
    out.push_back(lp);
    num_tokens += static_cast<int64_t>(s.ids.size());
  }
  return out;
}

// Writes a pattern whose `streaming` heads have gate 0 and the others 1, so that lserve with
// streaming ratio |streaming| / N makes exactly those heads streaming.
Status write_mask(const std::filesystem::path& path, int32_t layers, int32_t heads,
                  const std::vector<bool>& streaming) {
  HeadGates g;
  g.num_layers = layers;
  g.num_kv_heads = heads;
  for (bool s : streaming) g.gates.push_back(s ? 0.0 : 1.0);
  return write_head_gates(path, g);
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("longserve-calibrate-{}-{}", ::getpid(), reinterpret_cast<uintptr_t>(this));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace

Result<CalibrationResult> calibrate_heads(const EngineConfig& base,
                                          const std::vector<EvalPrompt>& prompts,
                                          const CalibrationOptions& options) {
  if (prompts.empty()) return invalid_argument("calibration needs at least one prompt");
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  LS_ASSIGN_OR_RETURN(ModelConfig model, load_model_config(base.model_dir));
  const auto layers = static_cast<int32_t>(model.num_hidden_layers());
  const auto heads = static_cast<int32_t>(model.num_key_value_heads());
  const int32_t n = layers * heads;

  int32_t longest = 0;  // tokens of the longest prompt + answer (an upper bound before tokenizing)
  for (const EvalPrompt& p : prompts) {
    longest = std::max(longest, p.context_tokens + 64);
  }
  // One sequence at a time, sized to the longest prompt: the engines stay small.
  EngineConfig dense = base;
  dense.attention = AttentionConfig{};
  dense.attention.policy = "dense";
  dense.max_num_seqs = 1;
  dense.max_model_len = longest;
  // An explicit KV budget, so that it never depends on the automatic sizing's rounding: room for
  // the longest sequence in full plus the streaming heads' sinks and rings (a prefill window and a
  // chunk), twice over in f32.
  const int64_t tokens = int64_t{longest} + options.sink_tokens + options.local_tokens +
                         std::max(base.max_num_batched_tokens, 2048) + 1024;
  dense.kv_cache_bytes = 2 * tokens * layers * heads * model.head_dim() * 2 * 4;
  LS_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> dense_engine, EngineCore::create(dense));
  if (dense_engine->tokenizer() == nullptr) {
    return failed_precondition("{} has no tokenizer.json", base.model_dir.string());
  }
  const Tokenizer& tok = *dense_engine->tokenizer();
  const std::vector<int32_t>& eos = dense_engine->default_stop().eos_token_ids;
  std::vector<ScoredSequence> seqs;
  for (const EvalPrompt& p : prompts) {
    ScoredSequence s;
    s.ids = tok.encode(p.prompt, true);
    s.answer_begin = s.ids.size();
    const std::vector<int32_t> answer = tok.encode(" " + p.answer, false);
    s.ids.insert(s.ids.end(), answer.begin(), answer.end());
    if (!eos.empty()) s.ids.push_back(eos.front());
    if (static_cast<int32_t>(s.ids.size()) > longest) {
      return invalid_argument("{}: {} tokens with the answer, over its context_tokens + 64", p.id,
                              s.ids.size());
    }
    seqs.push_back(std::move(s));
  }

  CalibrationResult result;
  result.gates.num_layers = layers;
  result.gates.num_kv_heads = heads;
  int64_t work = 0;
  LS_ASSIGN_OR_RETURN(std::vector<double> base_lp, answer_logprobs(*dense_engine, seqs, work));
  dense_engine.reset();
  for (double v : base_lp) result.dense_logprob += v / static_cast<double>(base_lp.size());
  log(fmt::format("dense: mean answer log-probability {:.4f} over {} prompts", result.dense_logprob,
                  seqs.size()));

  TempDir tmp;
  EngineConfig ablated = dense;
  ablated.attention.policy = "lserve";
  ablated.attention.head_pattern_path = (tmp.path() / "mask.tsv").string();
  ablated.attention.token_budget = std::max(longest, 1);  // retrieval heads stay full
  ablated.attention.sink_tokens = options.sink_tokens;
  ablated.attention.prefill_local_tokens = options.local_tokens;
  ablated.attention.decode_local_tokens = options.local_tokens;

  // Mean drop of the answer log-probability with the heads in `streaming` made streaming.
  auto mean_drop = [&](const std::vector<bool>& streaming) -> Result<double> {
    LS_RETURN_IF_ERROR(write_mask(ablated.attention.head_pattern_path, layers, heads, streaming));
    const auto k = std::count(streaming.begin(), streaming.end(), true);
    ablated.attention.streaming_ratio = static_cast<double>(k) / static_cast<double>(n);
    LS_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> engine, EngineCore::create(ablated));
    LS_ASSIGN_OR_RETURN(std::vector<double> lp, answer_logprobs(*engine, seqs, work));
    ++result.num_passes;
    double drop = 0;
    for (size_t i = 0; i < lp.size(); ++i)
      drop += (base_lp[i] - lp[i]) / static_cast<double>(lp.size());
    return drop;
  };

  const size_t num_heads = static_cast<size_t>(n);
  result.scores.assign(num_heads, 0.0);
  if (options.method == CalibrationMethod::kLeaveOneOut) {
    for (size_t j = 0; j < num_heads; ++j) {
      std::vector<bool> streaming(num_heads, false);
      streaming[j] = true;
      LS_ASSIGN_OR_RETURN(double drop, mean_drop(streaming));
      result.scores[j] = drop;
      log(fmt::format("layer {} kv head {}: streaming alone costs {:.4f} nats", j / heads,
                      j % heads, drop));
    }
    const double max_drop = *std::max_element(result.scores.begin(), result.scores.end());
    for (double d : result.scores) {
      result.gates.gates.push_back(max_drop > 0 ? std::clamp(d / max_drop, 0.0, 1.0) : 0.0);
    }
  } else {
    std::vector<bool> streaming(num_heads, true);
    LS_ASSIGN_OR_RETURN(double drop, mean_drop(streaming));
    result.streaming_drop = drop;
    log(fmt::format("every head streaming: the answer loses {:.4f} nats", drop));
    std::vector<double> last_round(num_heads, 0.0);  // recovery of each head in the last round
    while (drop > options.tolerance_nats && result.selected.size() < num_heads) {
      size_t best = num_heads;
      double best_drop = INFINITY;
      for (size_t j = 0; j < num_heads; ++j) {
        if (!streaming[j]) continue;
        streaming[j] = false;
        LS_ASSIGN_OR_RETURN(double d, mean_drop(streaming));
        streaming[j] = true;
        last_round[j] = drop - d;
        if (d < best_drop) {  // strict: ties keep the lowest (layer, head)
          best_drop = d;
          best = j;
        }
      }
      streaming[best] = false;
      result.selected.push_back(static_cast<int32_t>(best));
      result.scores[best] = drop - best_drop;
      result.round_drops.push_back(best_drop);
      log(
          fmt::format("round {}: layer {} kv head {} gets full attention; the answer now loses "
                      "{:.4f} nats",
                      result.selected.size(), best / static_cast<size_t>(heads),
                      best % static_cast<size_t>(heads), best_drop));
      drop = best_drop;
    }
    // Gates: selected heads in (0.5, 1] by round, the rest in [0, 0.5) by last-round recovery,
    // so that every global quantile keeps the selected heads first.
    result.gates.gates.assign(num_heads, 0.0);
    double max_rest = 0;
    for (size_t j = 0; j < num_heads; ++j) {
      if (streaming[j]) {
        result.scores[j] = last_round[j];
        max_rest = std::max(max_rest, last_round[j]);
      }
    }
    for (size_t j = 0; j < num_heads; ++j) {
      if (streaming[j] && max_rest > 0) {
        result.gates.gates[j] = 0.49 * std::clamp(last_round[j] / max_rest, 0.0, 1.0);
      }
    }
    const auto num_selected = static_cast<double>(result.selected.size());
    for (size_t r = 0; r < result.selected.size(); ++r) {
      result.gates.gates[static_cast<size_t>(result.selected[r])] =
          1.0 - 0.5 * static_cast<double>(r) / num_selected;
    }
  }
  result.num_scored_tokens = work;
  return result;
}

}  // namespace ls::eval
