// Per-rank numbers of tensor parallelism in EngineStats and /metrics (docs/tensor-parallel.md):
// each rank's share of the head pattern (its retrieval and streaming kv heads over the layers,
// which add up to the whole model's, counted here from a one-rank stack) and the imbalance over
// the ranks, and each rank's own host KV tier, rendered with a rank="r" label.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "model/model_stack.h"
#include "server/server_metrics.h"
#include "tensor_parallel_compare.h"

namespace ls {
namespace {

// The value of the series `name{labels}` in a Prometheus text rendering; -1 when absent.
double series_value(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(TensorParallelMetrics, PerRankHeadsImbalanceAndKvTier) {
  for (const int32_t tp : {2, 4}) {
    EngineConfig c;
    c.model_dir = model_fixture_dir("llama3");
    c.num_threads = 1;
    c.max_num_seqs = 2;
    c.max_num_batched_tokens = 64;
    c.max_model_len = 512;
    c.kv_cache_dtype = "f32";
    c.attention.policy = "lserve";
    c.attention.token_budget = 64;
    c.attention.sink_tokens = 16;
    c.attention.decode_local_tokens = 32;
    c.attention.prefill_local_tokens = 64;
    c.attention.page_tokens = 16;
    c.attention.logical_page_tokens = 4;
    c.attention.streaming_ratio = 0.5;
    c.kv_offload = true;
    c.host_kv_cache_bytes = int64_t{16} << 20;
    c.tensor_parallel_size = tp;
    auto engine = EngineCore::create(c);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    GenerateRequest r;
    r.request_id = "a";
    for (int32_t t = 0; t < 300; ++t) r.prompt_ids.push_back(t % 250 + 1);
    r.sampling.temperature = 0;
    r.stop.max_tokens = 8;
    r.stop.ignore_eos = true;
    ASSERT_TRUE((*engine)->add_request(r, [](const RequestOutput&) {}).ok());
    while ((*engine)->has_work()) ASSERT_TRUE((*engine)->step().ok());
    const EngineStats s = (*engine)->stats();
    ASSERT_EQ(s.tp_ranks.size(), static_cast<size_t>(tp));

    // The whole model's head pattern, from a one-rank stack of the same policy.
    ModelStackOptions o;
    o.model_dir = c.model_dir;
    o.attention = c.attention;
    o.max_model_len = c.max_model_len;
    o.max_num_seqs = 1;
    o.kv_cache_dtype = KvCacheDtype::kF32;
    auto one = build_model_stack(o);
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    const HeadRoles& roles = (*one)->kv->geometry().roles;
    int32_t retrieval = 0, streaming = 0, most = 0;
    int64_t hits = 0, misses = 0;
    for (const EngineRankStats& rank : s.tp_ranks) {
      retrieval += rank.retrieval_kv_heads;
      streaming += rank.streaming_kv_heads;
      most = std::max(most, rank.retrieval_kv_heads);
      // Each rank with retrieval heads has its own tier, which served this request's decodes.
      if (rank.retrieval_kv_heads > 0) {
        EXPECT_GT(rank.kv_host_bytes, 0);
        EXPECT_GT(rank.kv_device_cache_bytes, 0);
        EXPECT_GT(rank.kv_offload_hits_total + rank.kv_offload_misses_total, 0);
      }
      hits += rank.kv_offload_hits_total;
      misses += rank.kv_offload_misses_total;
    }
    // Replicated kv heads (the fixture has 2; TP = 4 holds each on 2 ranks) are counted per copy.
    const int32_t copies = tp > 2 ? tp / 2 : 1;
    EXPECT_EQ(retrieval, roles.num_retrieval() * copies);
    EXPECT_EQ(streaming, roles.num_streaming() * copies);
    ASSERT_GT(retrieval, 0);
    EXPECT_DOUBLE_EQ(s.tp_retrieval_imbalance, static_cast<double>(most) * tp / retrieval);
    // The unlabelled tier series stay rank 0's.
    EXPECT_EQ(s.kv_host_bytes, s.tp_ranks[0].kv_host_bytes);
    EXPECT_EQ(s.kv_offload_misses_total, s.tp_ranks[0].kv_offload_misses_total);
    EXPECT_GE(hits + misses, s.kv_offload_hits_total + s.kv_offload_misses_total);

    ServerMetrics metrics("m", c.max_model_len);
    const std::string text = metrics.render(s);
    EXPECT_DOUBLE_EQ(series_value(text, R"(longserve:tp_retrieval_imbalance{model_name="m",engine="0"})"),
                     s.tp_retrieval_imbalance);
    for (int32_t r = 0; r < tp; ++r) {
      const EngineRankStats& rank = s.tp_ranks[static_cast<size_t>(r)];
      const std::string l = fmt::format(R"({{model_name="m",engine="0",rank="{}"}})", r);
      EXPECT_EQ(series_value(text, "longserve:tp_rank_retrieval_kv_heads" + l),
                rank.retrieval_kv_heads) << text;
      EXPECT_EQ(series_value(text, "longserve:tp_rank_streaming_kv_heads" + l),
                rank.streaming_kv_heads);
      EXPECT_EQ(series_value(text, "longserve:tp_rank_kv_offload_host_bytes" + l),
                static_cast<double>(rank.kv_host_bytes));
      EXPECT_EQ(series_value(text, "longserve:tp_rank_kv_offload_device_cache_bytes" + l),
                static_cast<double>(rank.kv_device_cache_bytes));
      EXPECT_EQ(series_value(text, "longserve:tp_rank_kv_offload_hits_total" + l),
                static_cast<double>(rank.kv_offload_hits_total));
      EXPECT_EQ(series_value(text, "longserve:tp_rank_kv_offload_misses_total" + l),
                static_cast<double>(rank.kv_offload_misses_total));
      EXPECT_EQ(series_value(text, "longserve:tp_rank_kv_offload_h2d_bytes_total" + l),
                static_cast<double>(rank.kv_offload_bytes_total));
    }
    EXPECT_EQ(series_value(text, fmt::format(R"(longserve:tp_rank_retrieval_kv_heads{{model_name="m",engine="0",rank="{}"}})", tp)), -1);
  }
}

// Without tensor parallelism nothing per rank is reported and the imbalance reads 0.
TEST(TensorParallelMetrics, NoRanksAtTpOne) {
  EngineConfig c;
  c.model_dir = model_fixture_dir("llama3");
  c.num_threads = 1;
  c.max_model_len = 256;
  c.kv_cache_dtype = "f32";
  auto engine = EngineCore::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const EngineStats s = (*engine)->stats();
  EXPECT_TRUE(s.tp_ranks.empty());
  EXPECT_EQ(s.tp_retrieval_imbalance, 0.0);
  ServerMetrics metrics("m", 256);
  const std::string text = metrics.render(s);
  EXPECT_EQ(text.find("longserve:tp_rank_retrieval_kv_heads{"), std::string::npos);
}

}  // namespace
}  // namespace ls
