#pragma once
// A small Prometheus metrics registry: counters, gauges and histograms grouped in labelled
// families, rendered in the text exposition format 0.0.4 (what prometheus_client, and hence
// vLLM, serves on /metrics). Bookworm has no prometheus-cpp, so this is written by hand.
//
// Thread-safe: any thread may update a series while another renders. Series are created on
// first use of their label values and live as long as the registry, so references returned by
// with() stay valid.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ls {

// Label values of one series, in the order of its family's label names.
using LabelValues = std::vector<std::string>;

class Counter {
 public:
  void inc(double amount = 1.0) { value_.fetch_add(amount, std::memory_order_relaxed); }
  // For totals kept elsewhere (the engine's own counters): they must never decrease.
  void set_total(double total) { value_.store(total, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // upper_bounds: strictly increasing finite bucket bounds; +Inf is implied.
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);
  // Replaces the state with counts kept elsewhere (the engine's per-step histogram):
  // `per_bucket` [num_buckets + 1], not cumulative, the last for +Inf. Ignored on a size
  // mismatch.
  void set_counts(const std::vector<uint64_t>& per_bucket, double sum);

  struct Snapshot {
    std::vector<double> upper_bounds;  // [num_buckets] without +Inf
    std::vector<uint64_t> cumulative;  // [num_buckets + 1]; the last one counts everything
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> upper_bounds_;  // [num_buckets]
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [num_buckets + 1], per bucket (not cumulative)
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// All series of one metric name. T is Counter, Gauge or Histogram.
template <typename T>
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, std::vector<std::string> label_names,
               std::vector<double> upper_bounds = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        upper_bounds_(std::move(upper_bounds)) {}

  // The series for these label values (created on first use). The number of values must match
  // the family's label names; a mismatch is a programming error and is padded/truncated.
  T& with(LabelValues values);

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Copies of (labels, series pointer) in creation order, for rendering.
  std::vector<std::pair<LabelValues, const T*>> series() const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> upper_bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<LabelValues, std::unique_ptr<T>> by_labels_;
  std::vector<std::pair<LabelValues, const T*>> order_;  // creation order
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

class MetricsRegistry {
 public:
  // Names are used as exposed: counters should end in "_total". Registering a name twice is a
  // programming error; the families are owned by the registry.
  CounterFamily& counter(std::string name, std::string help, std::vector<std::string> label_names);
  GaugeFamily& gauge(std::string name, std::string help, std::vector<std::string> label_names);
  HistogramFamily& histogram(std::string name, std::string help,
                             std::vector<std::string> label_names,
                             std::vector<double> upper_bounds);

  // Every family in registration order: "# HELP", "# TYPE", then one line per sample.
  std::string render() const;

 private:
  struct Entry {
    MetricType type;
    std::unique_ptr<CounterFamily> counter;
    std::unique_ptr<GaugeFamily> gauge;
    std::unique_ptr<HistogramFamily> histogram;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

// Sample values as prometheus_client writes them: "1.0", "0.25", "+Inf", "NaN".
std::string format_metric_value(double value);
// Escapes a label value (backslash, double quote, newline).
std::string escape_label_value(const std::string& value);
// vLLM's 1-2-5 series (1, 2, 5, 10, 20, 50, ...) up to and including max_value.
std::vector<double> buckets_1_2_5(int64_t max_value);

}  // namespace ls
