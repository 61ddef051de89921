// bench serve against a FakeEngine-backed server: request counts, exact input/output lengths
// as the engine receives them, vLLM's result keys, and sane numbers; plus unit checks of the
// statistics (against values numpy gives), the SSE timing rules and the progress bar.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_server.h"
#include "tools/bench_serve/bench_metrics.h"
#include "tools/bench_serve/bench_serve.h"
#include "tools/bench_serve/progress_bar.h"
#include "tools/bench_serve/request_client.h"

namespace ls::testing {
namespace {

std::string read_file(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) text.append(buf, n);
  return text;
}

BenchServeOptions bench_options(int port) {
  BenchServeOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(port);
  o.model = "fake-model";
  o.tokenizer = kTokenizerDir;
  o.num_prompts = 20;
  o.random_input_len = 24;
  o.random_output_len = 6;
  o.disable_tqdm = true;
  return o;
}

TEST(BenchServe, CountsLengthsAndKeysAgainstTheFakeServer) {
  TestServerOptions server_options = default_test_options();
  server_options.engine.step_interval = std::chrono::milliseconds(1);
  TestServer server(server_options);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("ls_bench_serve_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);

  BenchServeOptions o = bench_options(server.port());
  o.goodput = {"ttft:60000", "e2el:60000"};
  o.percentile_metrics = "ttft,tpot,itl,e2el";
  o.metric_percentiles = "50,99";
  o.save_result = true;
  o.result_dir = dir.string();
  o.result_filename = "result.json";
  o.metadata = {"run=unit-test"};
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  auto result = run_bench_serve(o, out);
  const std::string summary = read_file(out);
  std::fclose(out);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const Json& r = *result;

  // What the engine saw: the initial test request plus 20, each exactly 24 tokens after the
  // tokenizer's BOS, asking for exactly 6 tokens, greedy, ignoring EOS.
  const auto submitted = server.engine().submitted();
  ASSERT_EQ(submitted.size(), 21u);
  for (const GenerateRequest& request : submitted) {
    EXPECT_EQ(request.prompt_ids.size(), 25u);
    EXPECT_EQ(request.prompt_ids.front(), expected()["bos_token_id"].get<int32_t>());
    EXPECT_EQ(request.stop.max_tokens, 6);
    EXPECT_TRUE(request.stop.ignore_eos);
    EXPECT_TRUE(request.sampling.greedy());
  }

  EXPECT_EQ(r["completed"], 20);
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["num_prompts"], 20);
  EXPECT_EQ(r["total_input_tokens"], 20 * 24);
  EXPECT_EQ(r["total_output_tokens"], 20 * 6);
  EXPECT_EQ(r["request_rate"], "inf");
  EXPECT_EQ(r["burstiness"], 1.0);
  EXPECT_TRUE(r["max_concurrency"].is_null());
  EXPECT_EQ(r["model_id"], "fake-model");
  EXPECT_EQ(r["endpoint_type"], "openai");
  EXPECT_EQ(r["run"], "unit-test");
  for (const char* key : {"date",
                          "endpoint_type",
                          "label",
                          "model_id",
                          "tokenizer_id",
                          "num_prompts",
                          "request_rate",
                          "burstiness",
                          "max_concurrency",
                          "duration",
                          "completed",
                          "failed",
                          "total_input_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "request_goodput",
                          "output_throughput",
                          "total_token_throughput",
                          "max_output_tokens_per_s",
                          "max_concurrent_requests"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  for (const char* metric : {"ttft", "tpot", "itl", "e2el"}) {
    for (const std::string stat : {"mean", "median", "std", "p50", "p99"}) {
      EXPECT_TRUE(r.contains(stat + "_" + metric + "_ms")) << stat << "_" << metric;
    }
  }
  EXPECT_FALSE(r.contains("ttfts"));  // per-request arrays only with --save-detailed
  EXPECT_FALSE(r.contains("latencies"));
  EXPECT_FALSE(r.contains("mean_client_queue_time_ms"));  // only with --max-concurrency
  EXPECT_EQ(r["rtfx"], 0.0);                               // no audio

  const double duration = r["duration"];
  EXPECT_GT(duration, 0.0);
  EXPECT_DOUBLE_EQ(r["request_throughput"].get<double>(), 20.0 / duration);
  EXPECT_DOUBLE_EQ(r["output_throughput"].get<double>(), 120.0 / duration);
  EXPECT_DOUBLE_EQ(r["total_token_throughput"].get<double>(), (480.0 + 120.0) / duration);
  EXPECT_DOUBLE_EQ(r["request_goodput"].get<double>(), r["request_throughput"].get<double>());
  EXPECT_GT(r["mean_ttft_ms"].get<double>(), 0.0);
  EXPECT_GT(r["mean_tpot_ms"].get<double>(), 0.0);
  EXPECT_LE(r["mean_ttft_ms"].get<double>(), r["mean_e2el_ms"].get<double>());
  EXPECT_LE(r["p50_e2el_ms"].get<double>(), r["p99_e2el_ms"].get<double>());
  EXPECT_LE(r["mean_e2el_ms"].get<double>(), duration * 1000.0);
  EXPECT_GE(r["max_concurrent_requests"].get<int>(), 1);
  EXPECT_LE(r["max_concurrent_requests"].get<int>(), 20);
  EXPECT_GE(r["max_output_tokens_per_s"].get<double>(), 1.0);

  EXPECT_NE(summary.find("============ Serving Benchmark Result ============"), std::string::npos);
  EXPECT_NE(summary.find(fmt::format("{:<40} {:<10}\n", "Successful requests:", 20)),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("Request goodput (req/s):"), std::string::npos);
  EXPECT_NE(summary.find("P99 E2EL (ms):"), std::string::npos);

  std::ifstream file(dir / "result.json");
  ASSERT_TRUE(file.good());
  const Json saved = Json::parse(file);
  EXPECT_EQ(saved, r);
  std::filesystem::remove_all(dir);
}

TEST(BenchServe, RateBurstinessConcurrencyAndRangeRatio) {
  TestServerOptions server_options = default_test_options();
  server_options.engine.step_interval = std::chrono::milliseconds(1);
  TestServer server(server_options);
  BenchServeOptions o = bench_options(server.port());
  o.request_rate = 400.0;
  o.burstiness = 0.5;
  o.max_concurrency = 3;
  o.random_range_ratio = 0.5;
  o.save_detailed = true;
  o.result_dir = (std::filesystem::temp_directory_path() /
                  ("ls_bench_serve_detail_" + std::to_string(::getpid())))
                     .string();
  o.skip_initial_test = true;
  std::FILE* out = std::tmpfile();
  auto result = run_bench_serve(o, out);
  const std::string summary = read_file(out);
  std::fclose(out);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const Json& r = *result;
  EXPECT_EQ(r["completed"], 20);
  EXPECT_EQ(r["request_rate"], 400.0);
  EXPECT_EQ(r["max_concurrency"], 3);
  EXPECT_NE(summary.find("Maximum request concurrency:             3"), std::string::npos);

  // Lengths vary within [L(1-r), L(1+r)], and each is what the engine received (plus BOS).
  std::vector<int64_t> sent_lens, sent_outputs;
  for (const GenerateRequest& request : server.engine().submitted()) {
    sent_lens.push_back(static_cast<int64_t>(request.prompt_ids.size()) - 1);
    sent_outputs.push_back(request.stop.max_tokens);
  }
  std::vector<int64_t> input_lens = r["input_lens"].get<std::vector<int64_t>>();
  std::vector<int64_t> output_lens = r["output_lens"].get<std::vector<int64_t>>();
  for (int64_t len : input_lens) {
    EXPECT_GE(len, 12);
    EXPECT_LE(len, 36);
  }
  for (int64_t len : output_lens) {
    EXPECT_GE(len, 3);
    EXPECT_LE(len, 9);
  }
  std::sort(sent_lens.begin(), sent_lens.end());
  std::sort(input_lens.begin(), input_lens.end());
  std::sort(sent_outputs.begin(), sent_outputs.end());
  std::sort(output_lens.begin(), output_lens.end());
  EXPECT_EQ(sent_lens, input_lens);
  EXPECT_EQ(sent_outputs, output_lens);
  EXPECT_GT(*std::max_element(input_lens.begin(), input_lens.end()),
            *std::min_element(input_lens.begin(), input_lens.end()));
  EXPECT_LE(server.engine().max_live(), 3);

  // --save-detailed: per-request latencies, send times and client queue times; with
  // --max-concurrency the client-queue statistics, consistent with those arrays.
  const std::vector<double> latencies = r["latencies"].get<std::vector<double>>();
  const std::vector<double> queue_times = r["queue_times"].get<std::vector<double>>();
  const std::vector<double> start_times = r["start_times"].get<std::vector<double>>();
  ASSERT_EQ(latencies.size(), 20u);
  ASSERT_EQ(queue_times.size(), 20u);
  ASSERT_EQ(start_times.size(), 20u);
  double sum_latency = 0.0, sum_queue = 0.0;
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_GE(queue_times[i], 0.0);
    EXPECT_GE(start_times[i], 0.0);
    sum_latency += latencies[i];
    sum_queue += queue_times[i];
  }
  EXPECT_NEAR(r["mean_client_queue_time_ms"].get<double>(), sum_queue / 20 * 1000.0, 1e-6);
  EXPECT_NEAR(r["mean_e2el_including_client_queue_ms"].get<double>(),
              (sum_latency + sum_queue) / 20 * 1000.0, 1e-6);
  EXPECT_TRUE(r.contains("p99_client_queue_time_ms"));
  std::filesystem::remove_all(o.result_dir);
}

// --multi-turn: each conversation's turn k+1 re-sends turn k's prompt and the answer it got,
// then a new question; the per-turn statistics and the cached-token share agree with what the
// engine received (the fake engine's stand-in cache reports the longest prefix shared with an
// earlier prompt, in 16-token pages, recomputed here from the submitted prompts).
TEST(BenchServe, MultiTurnConversationsResendTheirHistory) {
  TestServerOptions server_options = default_test_options();
  server_options.engine.step_interval = std::chrono::milliseconds(1);
  server_options.engine.cache_page_tokens = 16;
  TestServer server(server_options);
  BenchServeOptions o = bench_options(server.port());
  o.num_prompts = 3;
  o.multi_turn = 3;
  o.random_input_len = 20;
  o.random_output_len = 6;
  o.max_concurrency = 1;  // conversations one after another: submitted in (conversation, turn) order
  o.skip_initial_test = true;
  std::FILE* out = std::tmpfile();
  auto result = run_bench_serve(o, out);
  const std::string summary = read_file(out);
  std::fclose(out);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const Json& r = *result;
  EXPECT_EQ(r["completed"], 9);
  EXPECT_EQ(r["multi_turn_turns"], 3);
  EXPECT_NE(summary.find("Multi-turn"), std::string::npos) << summary;

  const auto submitted = server.engine().submitted();
  ASSERT_EQ(submitted.size(), 9u);
  std::vector<int64_t> prompt(3, 0), cached(3, 0);
  for (size_t i = 0; i < submitted.size(); ++i) {
    const std::vector<int32_t>& ids = submitted[i].prompt_ids;
    const size_t turn = i % 3;
    if (turn > 0) {
      // The history: the previous prompt (its last token may merge with the answer's text),
      // the 6-token answer and a 20-token question.
      const std::vector<int32_t>& before = submitted[i - 1].prompt_ids;
      ASSERT_GT(ids.size(), before.size() + 20);
      EXPECT_TRUE(std::equal(before.begin(), before.end() - 1, ids.begin())) << i;
    }
    size_t best = 0;
    for (size_t j = 0; j < i; ++j) {
      const std::vector<int32_t>& e = submitted[j].prompt_ids;
      size_t n = 0;
      while (n < ids.size() && n < e.size() && ids[n] == e[n]) ++n;
      best = std::max(best, n);
    }
    prompt[turn] += static_cast<int64_t>(ids.size());
    cached[turn] += static_cast<int64_t>(std::min(best, ids.size() - 1) / 16 * 16);
  }
  const Json& m = r["multi_turn"];
  EXPECT_EQ(m["conversations"], 3);
  ASSERT_EQ(m["per_turn"].size(), 3u);
  int64_t all_prompt = 0, all_cached = 0;
  for (size_t k = 0; k < 3; ++k) {
    const Json& row = m["per_turn"][k];
    EXPECT_EQ(row["turn"], k + 1);
    EXPECT_EQ(row["completed"], 3);
    EXPECT_DOUBLE_EQ(row["mean_prompt_tokens"].get<double>(), prompt[k] / 3.0);
    EXPECT_EQ(row["cached_tokens"], cached[k]);
    EXPECT_DOUBLE_EQ(row["cached_token_share"].get<double>(),
                     static_cast<double>(cached[k]) / static_cast<double>(prompt[k]));
    EXPECT_GT(row["mean_ttft_ms"].get<double>(), 0.0);
    all_prompt += prompt[k];
    all_cached += cached[k];
  }
  EXPECT_EQ(cached[0], 0);  // first turns share nothing (random prompts, no prefix)
  EXPECT_GT(cached[1], 0);
  EXPECT_GT(cached[2], cached[1]);
  EXPECT_EQ(m["cached_tokens"], all_cached);
  EXPECT_DOUBLE_EQ(m["cached_token_share"].get<double>(),
                   static_cast<double>(all_cached) / static_cast<double>(all_prompt));
  EXPECT_EQ(r["total_input_tokens"], all_prompt);

  o.multi_turn = -1;  // refused before anything is sent
  const auto refused = run_bench_serve(o, stdout);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--multi-turn"), std::string::npos);
}

// Without --tokenizer (and a model name that is no directory) the tokenizer comes from the
// server's GET /tokenizer_info, and the prompts are the same as with the tokenizer's directory.
TEST(BenchServe, TokenizerFromTheServer) {
  TestServerOptions server_options = default_test_options();
  server_options.engine.step_interval = std::chrono::milliseconds(1);
  TestServer server(server_options);
  for (int from_server = 0; from_server < 2; ++from_server) {
    BenchServeOptions o = bench_options(server.port());
    o.num_prompts = 4;
    if (from_server) o.tokenizer.clear();
    o.skip_initial_test = true;
    std::FILE* out = std::tmpfile();
    auto result = run_bench_serve(o, out);
    std::fclose(out);
    ASSERT_TRUE(result.ok()) << result.status().message();
    if (from_server) {
      const std::string id = (*result)["tokenizer_id"].get<std::string>();
      EXPECT_NE(id.find("/tokenizer_info"), std::string::npos) << id;
    }
  }
  // Both runs sent the same prompts (same seed, same tokenizer).
  const auto& submitted = server.engine().submitted();
  ASSERT_EQ(submitted.size(), 8u);
  std::vector<std::vector<int32_t>> first, second;
  for (size_t j = 0; j < 4; ++j) first.push_back(submitted[j].prompt_ids);
  for (size_t j = 4; j < 8; ++j) second.push_back(submitted[j].prompt_ids);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, second);
}

TEST(BenchServe, FailsClearlyWhenTheServerIsUnreachable) {
  BenchServeOptions o = bench_options(1);  // nothing listens on port 1
  std::FILE* out = std::tmpfile();
  auto result = run_bench_serve(o, out);
  std::fclose(out);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("Initial test run failed"), std::string::npos);
}

TEST(BenchMetrics, StatisticsMatchNumpy) {
  // numpy.percentile([1, 2, 3, 4], 99) == 3.97; median 2.5; np.std == sqrt(1.25).
  EXPECT_NEAR(percentile({4, 1, 3, 2}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({5}, 99), 5.0);
  EXPECT_DOUBLE_EQ(percentile({}, 99), 0.0);
  EXPECT_EQ(percentile_word(99), "99");
  EXPECT_EQ(percentile_word(99.9), "99.9");

  RequestOutcome good;
  good.success = true;
  good.prompt_len = 10;
  good.output_tokens = 3;
  good.start_s = 100.0;
  good.ttft_s = 0.1;
  good.itl_s = {0.05, 0.15};
  good.latency_s = 0.3;
  RequestOutcome bad;
  bad.prompt_len = 7;
  bad.error = "boom";
  MetricsConfig config;
  config.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  config.percentiles = {50};
  config.goodput_slo_ms = {{"ttft", 150.0}};
  const Json r = compute_benchmark_result({good, bad}, 2.0, config);
  EXPECT_EQ(r["completed"], 1);
  EXPECT_EQ(r["failed"], 1);
  EXPECT_EQ(r["total_input_tokens"], 10);  // failed requests do not count
  EXPECT_EQ(r["total_output_tokens"], 3);
  EXPECT_DOUBLE_EQ(r["request_throughput"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["request_goodput"].get<double>(), 0.5);
  EXPECT_NEAR(r["mean_ttft_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(r["mean_tpot_ms"].get<double>(), 100.0, 1e-9);  // (0.3 - 0.1) / (3 - 1)
  EXPECT_NEAR(r["mean_itl_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(r["std_itl_ms"].get<double>(), 50.0, 1e-9);
  EXPECT_NEAR(r["p50_e2el_ms"].get<double>(), 300.0, 1e-9);
  EXPECT_EQ(r["output_lens"], Json::array({3, 0}));
  EXPECT_EQ(r["errors"], Json::array({"", "boom"}));
  EXPECT_EQ(r["max_concurrent_requests"], 1);
  EXPECT_DOUBLE_EQ(r["max_output_tokens_per_s"].get<double>(), 3.0);

  config.goodput_slo_ms = {{"ttft", 50.0}};
  EXPECT_DOUBLE_EQ(
      compute_benchmark_result({good, bad}, 2.0, config)["request_goodput"].get<double>(), 0.0);
  EXPECT_FALSE(parse_goodput({"ttft"}).ok());
  EXPECT_FALSE(parse_goodput({"itl:5"}).ok());
  EXPECT_FALSE(parse_goodput({"ttft:-1"}).ok());
  EXPECT_EQ(parse_goodput({"tpot:12.5"})->at("tpot"), 12.5);
  EXPECT_FALSE(parse_percentiles("0").ok());
  EXPECT_FALSE(parse_metric_names("ttft,bogus").ok());
}

TEST(BenchMetrics, SseTimerFollowsTheVllmClientRules) {
  RequestOutcome outcome;
  outcome.start_s = 10.0;
  SseTimer timer(&outcome, /*chat=*/false);
  const std::string a = R"(data: {"choices":[{"index":0,"text":""}]})";
  const std::string b = R"(data: {"choices":[{"index":0,"text":"Hi"}]})";
  const std::string usage = R"(data: {"choices":[],"usage":{"completion_tokens":2}})";
  const std::string stream = a + "\n\n" + b + "\n\n" + usage + "\n\n: ping\n\ndata: [DONE]\n\n";
  // Deliver in awkward pieces: an event split across reads is timed when its line completes.
  timer.feed(stream.data(), 10, 10.5);
  timer.feed(stream.data() + 10, a.size() - 10 + 2, 10.6);
  timer.feed(stream.data() + a.size() + 2, b.size() + 2, 10.9);
  timer.feed(stream.data() + a.size() + b.size() + 4, stream.size() - a.size() - b.size() - 4,
             11.5);
  timer.finish();
  EXPECT_TRUE(outcome.success) << outcome.error;
  EXPECT_NEAR(outcome.ttft_s, 0.6, 1e-12);  // the first non-empty choices, even with empty text
  ASSERT_EQ(outcome.itl_s.size(), 1u);      // the usage chunk is not a token
  EXPECT_NEAR(outcome.itl_s[0], 0.3, 1e-12);
  EXPECT_NEAR(outcome.latency_s, 0.9, 1e-12);
  EXPECT_EQ(outcome.generated_text, "Hi");
  EXPECT_EQ(outcome.output_tokens, 2);

  RequestOutcome failed;
  SseTimer error_timer(&failed, false);
  const std::string error = a + "\n\n" + R"(data: {"error":{"message":"engine died"}})" + "\n\n";
  error_timer.feed(error.data(), error.size(), 1.0);
  error_timer.finish();
  EXPECT_FALSE(failed.success);
  EXPECT_EQ(failed.error, "engine died");
}

TEST(BenchMetrics, ProgressBarLooksLikeTqdm) {
  EXPECT_EQ(ProgressBar::render(450, 1000, 10.0),
            " 45%|████▌     | 450/1000 [00:10<00:12, 45.00it/s]");
  EXPECT_EQ(ProgressBar::render(1000, 1000, 20.0),
            "100%|██████████| 1000/1000 [00:20<00:00, 50.00it/s]");
  EXPECT_EQ(ProgressBar::render(0, 10, 0.0), "  0%|          | 0/10 [00:00<?, 0.00it/s]");
}

}  // namespace
}  // namespace ls::testing
