// A tensor-parallel rank that fails (docs/tensor-parallel.md, "Failures"), on the CPU with the
// executor's fault injection (model/tp_fault.h): rank 0 or the last rank, at TP = 2 and 4, in a
// prefill or a decode step, failing with an error value before its step or with an exception
// instead of a collective in the middle of a layer. Every case must end the step on every rank
// with one error naming the failing rank, within seconds (a guard fails the binary instead of
// hanging CI); an error value leaves the group usable (the next sequence's logits equal one
// rank's), an exception takes the executor down for good. Through the engine: the step's requests
// fail with that error, an engine that went down fails every request and refuses new ones, and
// through the HTTP server a request in flight is answered with the error and /health turns 503.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../server/raw_http.h"
#include "engine/async_engine.h"
#include "engine/engine_api.h"
#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "model/model_stack.h"
#include "model/tp_fault.h"
#include "server/server.h"
#include "tensor_parallel_compare.h"
#include "tp_failure_util.h"

namespace ls {
namespace {

ModelStackOptions tp_options(int32_t tp) {
  ModelStackOptions o;
  o.model_dir = model_fixture_dir("llama3");
  o.num_threads = 1;
  o.max_num_seqs = 2;
  o.max_step_tokens = 64;
  o.max_logit_rows = 64;
  o.max_model_len = 256;
  o.attention.policy = "dense";
  o.kv_cache_dtype = KvCacheDtype::kF32;
  o.tensor_parallel_size = tp;
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// (tp, failing rank is the last one, phase decode, exception at a collective)
class TensorParallelRankFailure
    : public ::testing::TestWithParam<std::tuple<int32_t, bool, bool, bool>> {};

TEST_P(TensorParallelRankFailure, EndsTheStepOnEveryRankNamingTheRank) {
  // Plain variables, not structured bindings: the lambda below captures them (clang 14 cannot
  // capture a structured binding).
  const int32_t tp = std::get<0>(GetParam());
  const bool last = std::get<1>(GetParam());
  const bool decode = std::get<2>(GetParam());
  const bool throws = std::get<3>(GetParam());
  const int32_t rank = last ? tp - 1 : 0;
  ModelStackOptions o = tp_options(tp);
  o.tp_fault.rank = rank;
  o.tp_fault.phase = decode ? TpFault::Phase::kDecode : TpFault::Phase::kPrefill;
  o.tp_fault.after_steps = 1;  // the second prefill chunk, or the second decode step
  o.tp_fault.throw_exception = throws;
  // An exception instead of the 3rd collective (layer 0's MLP all-reduce: the others wait in it);
  // an error value before the step (the others wait in the embedding's all-reduce).
  o.tp_fault.at_collective = throws ? 3 : 0;
  within_seconds(60, [&] {
    auto built = build_model_stack(o);
    ASSERT_TRUE(built.ok()) << built.status().to_string();
    ModelStack& st = **built;
    const TpSeqRun run = run_tp_sequence(st, /*prompt=*/40, /*decodes=*/4, 1u);
    ASSERT_FALSE(run.error.ok()) << "the injected fault did not fail a step";
    // Prefill: chunks 16 + 16 + 8, the 2nd fails; decode: the 2nd decode step (the 5th step).
    EXPECT_EQ(run.steps_run, decode ? 5 : 2);
    const std::string& m = run.error.message();
    // The failing rank's own error, not a waiting rank's view of the abort.
    EXPECT_TRUE(m.starts_with(fmt::format("tensor-parallel rank {}: ", rank))) << m;
    EXPECT_TRUE(contains(m, "injected fault")) << m;
    if (throws) {
      EXPECT_TRUE(contains(m, "threw an exception")) << m;
    }
    const Status down = st.executor().fatal_error();
    if (throws) {
      // The rank's state is unknown after an exception: the executor is down for good.
      ASSERT_FALSE(down.ok());
      EXPECT_TRUE(contains(down.message(), fmt::format("tensor-parallel rank {}: ", rank)));
      const TpSeqRun again = run_tp_sequence(st, 8, 0, 2u);
      EXPECT_EQ(again.error.message(), down.message());
      EXPECT_EQ(again.steps_run, 1);
    } else {
      // An error value: the group is reset and serves the next sequence exactly as before.
      EXPECT_TRUE(down.ok()) << down.to_string();
      auto one = build_model_stack(tp_options(1));
      ASSERT_TRUE(one.ok()) << one.status().to_string();
      const TpSeqRun want = run_tp_sequence(**one, 24, 3, 3u);
      const TpSeqRun got = run_tp_sequence(st, 24, 3, 3u);
      ASSERT_TRUE(want.error.ok()) << want.error.to_string();
      ASSERT_TRUE(got.error.ok()) << got.error.to_string();
      EXPECT_EQ(want.logits.size(), got.logits.size());
      EXPECT_LT(tp_worst_relative(want.logits, got.logits), 1e-4);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TensorParallelRankFailure,
    ::testing::Combine(::testing::Values(2, 4), ::testing::Bool(), ::testing::Bool(),
                       ::testing::Bool()),
    [](const auto& info) {
      const int32_t tp = std::get<0>(info.param);
      return fmt::format("tp{}_rank{}_{}_{}", tp, std::get<1>(info.param) ? tp - 1 : 0,
                         std::get<2>(info.param) ? "decode" : "prefill",
                         std::get<3>(info.param) ? "exception" : "error");
    });

EngineConfig engine_config(int32_t tp) {
  EngineConfig c;
  c.model_dir = model_fixture_dir("llama3");
  c.num_threads = 1;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 256;
  c.kv_cache_dtype = "f32";
  c.enable_prefix_caching = false;  // freed pages go back to the pool: usage 0 means no leak
  c.tensor_parallel_size = tp;
  return c;
}

GenerateRequest greedy_request(const std::string& id, int32_t first_token, int32_t max_tokens) {
  GenerateRequest r;
  r.request_id = id;
  for (int32_t t = 0; t < 20; ++t) r.prompt_ids.push_back((first_token + 7 * t) % 300 + 1);
  r.sampling.temperature = 0;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

struct Collected {
  std::vector<int32_t> tokens;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

OutputSink collect_into(Collected& c) {
  return [&c](const RequestOutput& o) {
    c.tokens.insert(c.tokens.end(), o.token_ids.begin(), o.token_ids.end());
    if (o.finished) {
      c.finished = true;
      c.reason = o.finish_reason;
      c.error = o.error;
    }
  };
}

// An error value on one rank fails the step's requests (batched: both) with the rank's error;
// the engine keeps serving, frees their pages, and the next request's tokens equal one rank's.
TEST(TensorParallelRankFailureEngine, AnErrorFailsTheStepsRequestsAndTheEngineServesOn) {
  within_seconds(60, [] {
    EngineConfig c = engine_config(2);
    c.tp_fault.rank = 1;
    c.tp_fault.phase = TpFault::Phase::kDecode;
    c.tp_fault.after_steps = 2;
    auto engine = EngineCore::create(c);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    EngineCore& e = **engine;
    Collected a, b;
    ASSERT_TRUE(e.add_request(greedy_request("a", 3, 8), collect_into(a)).ok());
    ASSERT_TRUE(e.add_request(greedy_request("b", 5, 8), collect_into(b)).ok());
    while (e.has_work()) (void)e.step();
    for (const Collected* r : {&a, &b}) {
      EXPECT_TRUE(r->finished);
      EXPECT_EQ(r->reason, FinishReason::kError);
      EXPECT_TRUE(r->error.starts_with("tensor-parallel rank 1: injected fault")) << r->error;
      EXPECT_LT(r->tokens.size(), 8u);
    }
    EXPECT_TRUE(e.fatal_error().ok());
    EXPECT_TRUE(e.stats().engine_error.empty());
    EXPECT_EQ(e.kv().usage(), 0.0);

    auto one = EngineCore::create(engine_config(1));
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    Collected want, got;
    ASSERT_TRUE((*one)->add_request(greedy_request("c", 9, 6), collect_into(want)).ok());
    while ((*one)->has_work()) ASSERT_TRUE((*one)->step().ok());
    ASSERT_TRUE(e.add_request(greedy_request("c", 9, 6), collect_into(got)).ok());
    while (e.has_work()) ASSERT_TRUE(e.step().ok());
    EXPECT_EQ(got.reason, FinishReason::kLength);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(e.kv().usage(), 0.0);
  });
}

// An exception on a rank takes the engine down: the running request fails with the rank's
// error, the waiting one with "the engine is down", later requests are refused, pages are freed.
TEST(TensorParallelRankFailureEngine, AnExceptionTakesTheEngineDown) {
  within_seconds(60, [] {
    EngineConfig c = engine_config(4);
    c.max_num_seqs = 1;  // the second request waits
    c.tp_fault.rank = 3;
    c.tp_fault.phase = TpFault::Phase::kPrefill;
    c.tp_fault.at_collective = 2;
    c.tp_fault.throw_exception = true;
    auto engine = EngineCore::create(c);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    EngineCore& e = **engine;
    Collected a, b;
    ASSERT_TRUE(e.add_request(greedy_request("a", 3, 4), collect_into(a)).ok());
    ASSERT_TRUE(e.add_request(greedy_request("b", 5, 4), collect_into(b)).ok());
    const Status st = e.step();
    ASSERT_FALSE(st.ok());
    EXPECT_FALSE(e.has_work());
    EXPECT_EQ(a.reason, FinishReason::kError);
    EXPECT_TRUE(a.error.starts_with("tensor-parallel rank 3: threw an exception: injected fault"))
        << a.error;
    EXPECT_EQ(b.reason, FinishReason::kError);
    EXPECT_TRUE(b.error.starts_with("the engine is down: ")) << b.error;
    EXPECT_TRUE(contains(b.error, "tensor-parallel rank 3")) << b.error;
    ASSERT_FALSE(e.fatal_error().ok());
    EXPECT_EQ(e.stats().engine_error, e.fatal_error().message());
    EXPECT_EQ(e.kv().usage(), 0.0);
    Collected later;
    const Status refused = e.add_request(greedy_request("c", 7, 4), collect_into(later));
    EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(refused.message(), e.fatal_error().message());
    EXPECT_EQ(e.step().message(), e.fatal_error().message());
  });
}

// Through the HTTP server: the request in flight is answered with the rank's error (500), and
// then /health and new requests answer 503 with the engine's error.
TEST(TensorParallelRankFailureEngine, TheServerAnswersTheErrorAndTurnsUnhealthy) {
  within_seconds(60, [] {
    EngineConfig c = engine_config(2);
    c.tp_fault.rank = 0;
    c.tp_fault.phase = TpFault::Phase::kDecode;
    c.tp_fault.after_steps = 1;
    c.tp_fault.throw_exception = true;
    auto core = EngineCore::create(c);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    const Tokenizer* tokenizer = (*core)->tokenizer();
    ASSERT_NE(tokenizer, nullptr);
    AsyncEngine engine(std::move(*core));
    ServerConfig sc;
    sc.port = 0;
    sc.num_threads = 4;
    auto server = Server::create(sc, engine, *tokenizer, nullptr);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    auto port = (*server)->bind();
    ASSERT_TRUE(port.ok()) << port.status().to_string();
    std::thread listener([&] { (void)(*server)->listen(); });
    auto post = [&](const std::string& body) {
      testing::RawClient client(*port);
      EXPECT_TRUE(client.send(fmt::format(
          "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
          "Content-Length: {}\r\n\r\n{}",
          body.size(), body)));
      return client.read_response(std::chrono::seconds(30));
    };
    auto get = [&](const std::string& path) {
      testing::RawClient client(*port);
      EXPECT_TRUE(client.send(fmt::format("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", path)));
      return client.read_response(std::chrono::seconds(10));
    };
    auto healthy = get("/health");
    ASSERT_TRUE(healthy.has_value());
    EXPECT_EQ(healthy->status, 200);
    const std::string request =
        R"({"model": "llama3", "prompt": [5, 6, 7, 8, 9, 10], "max_tokens": 8, "temperature": 0})";
    auto failed = post(request);
    ASSERT_TRUE(failed.has_value());
    EXPECT_EQ(failed->status, 500);
    EXPECT_TRUE(contains(failed->body, "tensor-parallel rank 0: threw an exception")) << failed->body;
    auto unhealthy = get("/health");
    ASSERT_TRUE(unhealthy.has_value());
    EXPECT_EQ(unhealthy->status, 503);
    EXPECT_TRUE(contains(unhealthy->body, "the engine is down")) << unhealthy->body;
    auto refused = post(request);
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->status, 503);
    EXPECT_TRUE(contains(refused->body, "tensor-parallel rank 0")) << refused->body;
    (*server)->stop();
    listener.join();
  });
}

// Forwards to the server's engine and counts the submits that returned, so the test knows when a
// request an HTTP handler thread submits has been queued.
class CountingEngine final : public Engine {
 public:
  explicit CountingEngine(Engine& inner) : inner_(inner) {}
  Status submit(GenerateRequest request, OutputSink sink) override {
    Status s = inner_.submit(std::move(request), std::move(sink));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++submitted_;
    }
    cv_.notify_all();
    return s;
  }
  void wait_submitted(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return submitted_ >= n; });
  }
  void abort(const std::string& id) override { inner_.abort(id); }
  EngineStats stats() const override { return inner_.stats(); }
  int32_t max_model_len() const override { return inner_.max_model_len(); }
  int32_t vocab_size() const override { return inner_.vocab_size(); }
  const std::string& model_name() const override { return inner_.model_name(); }
  const StopParams& default_stop() const override { return inner_.default_stop(); }
  const SamplingParams& default_sampling() const override { return inner_.default_sampling(); }

 private:
  Engine& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int submitted_ = 0;
};

// The engine goes down (an exception on rank 1 in the running request's 2nd decode step) while
// one request waits in the scheduler (max_num_seqs 1) and another sits in the engine's inbox,
// submitted while the failing step ran. Ordered by the fault injection's step hook and the
// submits' count, no sleeps: the running request gets the rank's error (500); the waiting one
// and the queued one are refused with the engine's error (503), as a request after it is.
TEST(TensorParallelRankFailureEngine, RequestsQueuedWhenTheEngineGoesDownGet503) {
  within_seconds(60, [] {
    struct Order {
      std::mutex mu;
      std::condition_variable cv;
      bool failing_step = false;
      CountingEngine* engine = nullptr;
    } order;
    EngineConfig c = engine_config(2);
    c.max_num_seqs = 1;  // the second request waits in the scheduler
    c.tp_fault.rank = 1;
    c.tp_fault.phase = TpFault::Phase::kDecode;
    c.tp_fault.after_steps = 1;
    c.tp_fault.throw_exception = true;
    c.tp_fault.on_matching_step = [&order](int64_t index) {
      if (index == 0) {
        // The running request's 1st decode step: hold it until the second request was queued,
        // so the engine loop moves it into the scheduler before the failing step.
        order.engine->wait_submitted(2);
      } else if (index == 1) {
        // The failing step: hold it until a third request was submitted (the engine's inbox).
        {
          std::lock_guard<std::mutex> lock(order.mu);
          order.failing_step = true;
        }
        order.cv.notify_all();
        order.engine->wait_submitted(3);
      }
    };
    auto core = EngineCore::create(c);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    const Tokenizer* tokenizer = (*core)->tokenizer();
    ASSERT_NE(tokenizer, nullptr);
    AsyncEngine async(std::move(*core));
    CountingEngine engine(async);
    order.engine = &engine;
    ServerConfig sc;
    sc.port = 0;
    sc.num_threads = 6;
    auto server = Server::create(sc, engine, *tokenizer, nullptr);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    auto port = (*server)->bind();
    ASSERT_TRUE(port.ok()) << port.status().to_string();
    std::thread listener([&] { (void)(*server)->listen(); });
    auto post = [&](const std::string& body) {
      testing::RawClient client(*port);
      EXPECT_TRUE(client.send(fmt::format(
          "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
          "Content-Length: {}\r\n\r\n{}",
          body.size(), body)));
      return client.read_response(std::chrono::seconds(30));
    };
    const std::string request =
        R"({"model": "llama3", "prompt": [5, 6, 7, 8, 9, 10], "max_tokens": 8, "temperature": 0})";
    auto running = std::async(std::launch::async, [&] { return post(request); });
    engine.wait_submitted(1);
    auto waiting = std::async(std::launch::async, [&] { return post(request); });
    {
      std::unique_lock<std::mutex> lock(order.mu);
      order.cv.wait(lock, [&] { return order.failing_step; });
    }
    auto queued = std::async(std::launch::async, [&] { return post(request); });
    const auto ran = running.get();
    const auto waited = waiting.get();
    const auto inbox = queued.get();
    ASSERT_TRUE(ran.has_value() && waited.has_value() && inbox.has_value());
    EXPECT_EQ(ran->status, 500);
    EXPECT_TRUE(contains(ran->body, "tensor-parallel rank 1: threw an exception")) << ran->body;
    const std::string down = async.stats().engine_error;
    ASSERT_TRUE(down.starts_with("the engine is down: ")) << down;
    EXPECT_TRUE(contains(down, "tensor-parallel rank 1")) << down;
    for (const auto* r : {&*waited, &*inbox}) {
      EXPECT_EQ(r->status, 503) << r->body;
      EXPECT_TRUE(contains(r->body, down)) << r->body;
      EXPECT_TRUE(contains(r->body, "\"code\":503")) << r->body;
    }
    auto later = post(request);
    ASSERT_TRUE(later.has_value());
    EXPECT_EQ(later->status, 503);
    EXPECT_TRUE(contains(later->body, down)) << later->body;
    (*server)->stop();
    listener.join();
  });
}

}  // namespace
}  // namespace ls
