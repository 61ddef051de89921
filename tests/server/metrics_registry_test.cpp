// The registry's text exposition against hand-written Prometheus 0.0.4 text, and vLLM's bucket
// series.

#include "server/metrics_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

namespace ls {
namespace {

TEST(MetricsRegistry, RendersCountersGaugesAndHistogramsInTextFormat) {
  MetricsRegistry registry;
  auto& requests =
      registry.counter("demo:requests_total", "Requests seen.", {"model_name", "engine"});
  auto& usage = registry.gauge("demo:usage_perc", "Usage.", {"model_name"});
  auto& latency =
      registry.histogram("demo:latency_seconds", "Latency.", {"model_name"}, {0.1, 1.0});
  requests.with({"m", "0"}).inc();
  requests.with({"m", "0"}).inc(2);
  usage.with({"m"}).set(0.25);
  Histogram& h = latency.with({"m"});
  h.observe(0.05);
  h.observe(0.1);  // "le" is inclusive
  h.observe(0.5);
  h.observe(7.0);
  const std::string expected =
      "# HELP demo:requests_total Requests seen.\n"
      "# TYPE demo:requests_total counter\n"
      "demo:requests_total{model_name=\"m\",engine=\"0\"} 3.0\n"
      "# HELP demo:usage_perc Usage.\n"
      "# TYPE demo:usage_perc gauge\n"
      "demo:usage_perc{model_name=\"m\"} 0.25\n"
      "# HELP demo:latency_seconds Latency.\n"
      "# TYPE demo:latency_seconds histogram\n"
      "demo:latency_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2.0\n"
      "demo:latency_seconds_bucket{model_name=\"m\",le=\"1.0\"} 3.0\n"
      "demo:latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4.0\n"
      "demo:latency_seconds_count{model_name=\"m\"} 4.0\n"
      "demo:latency_seconds_sum{model_name=\"m\"} 7.65\n";
  EXPECT_EQ(registry.render(), expected);
}

TEST(MetricsRegistry, SeriesAreKeptPerLabelSetInCreationOrder) {
  MetricsRegistry registry;
  auto& family = registry.counter("x_total", "X.", {"reason"});
  family.with({"stop"}).inc();
  family.with({"length"}).inc(5);
  family.with({"stop"}).inc();
  EXPECT_EQ(registry.render(),
            "# HELP x_total X.\n# TYPE x_total counter\n"
            "x_total{reason=\"stop\"} 2.0\nx_total{reason=\"length\"} 5.0\n");
}

TEST(MetricsRegistry, EscapesLabelValuesAndFormatsSpecialValues) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(format_metric_value(1.0), "1.0");
  EXPECT_EQ(format_metric_value(0.001), "0.001");
  EXPECT_EQ(format_metric_value(2560.0), "2560.0");
  EXPECT_EQ(format_metric_value(1e20), "1e+20");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
}

TEST(MetricsRegistry, Buckets125FollowVllm) {
  // vLLM: build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100].
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(256), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200}));
  EXPECT_EQ(buckets_1_2_5(1), (std::vector<double>{1}));
  EXPECT_TRUE(buckets_1_2_5(0).empty());
  EXPECT_EQ(buckets_1_2_5(131072).back(), 100000.0);
}

TEST(MetricsRegistry, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  Counter& counter = registry.counter("c_total", "C.", {}).with({});
  Histogram& histogram = registry.histogram("h", "H.", {}, {1.0}).with({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        counter.inc();
        histogram.observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter.value(), 40000.0);
  EXPECT_EQ(histogram.snapshot().count, 40000u);
  EXPECT_EQ(histogram.snapshot().cumulative[0], 40000u);
}

}  // namespace
}  // namespace ls
