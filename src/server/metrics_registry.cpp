#include "server/metrics_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ls {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  // The first bucket whose bound is >= value ("le" semantics); past the last, +Inf.
  const auto it = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  const size_t bucket = static_cast<size_t>(it - upper_bounds_.begin());
  std::lock_guard lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::set_counts(const std::vector<uint64_t>& per_bucket, double sum) {
  if (per_bucket.size() != counts_.size()) return;
  uint64_t total = 0;
  for (uint64_t c : per_bucket) total += c;
  std::lock_guard lock(mu_);
  counts_ = per_bucket;
  sum_ = sum;
  count_ = total;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.upper_bounds = upper_bounds_;
  std::lock_guard lock(mu_);
  snap.cumulative.resize(counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    snap.cumulative[i] = running;
  }
  snap.sum = sum_;
  snap.count = count_;
  return snap;
}

template <typename T>
T& MetricFamily<T>::with(LabelValues values) {
  values.resize(label_names_.size());
  std::lock_guard lock(mu_);
  auto it = by_labels_.find(values);
  if (it != by_labels_.end()) return *it->second;
  std::unique_ptr<T> series;
  if constexpr (std::is_same_v<T, Histogram>) {
    series = std::make_unique<Histogram>(upper_bounds_);
  } else {
    series = std::make_unique<T>();
  }
  T& ref = *series;
  order_.emplace_back(values, series.get());
  by_labels_.emplace(std::move(values), std::move(series));
  return ref;
}

template <typename T>
std::vector<std::pair<LabelValues, const T*>> MetricFamily<T>::series() const {
  std::lock_guard lock(mu_);
  return order_;
}

template class MetricFamily<Counter>;
template class MetricFamily<Gauge>;
template class MetricFamily<Histogram>;

CounterFamily& MetricsRegistry::counter(std::string name, std::string help,
                                        std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  Entry entry{MetricType::kCounter, nullptr, nullptr, nullptr};
  entry.counter =
      std::make_unique<CounterFamily>(std::move(name), std::move(help), std::move(label_names));
  entries_.push_back(std::move(entry));
  return *entries_.back().counter;
}

GaugeFamily& MetricsRegistry::gauge(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  Entry entry{MetricType::kGauge, nullptr, nullptr, nullptr};
  entry.gauge =
      std::make_unique<GaugeFamily>(std::move(name), std::move(help), std::move(label_names));
  entries_.push_back(std::move(entry));
  return *entries_.back().gauge;
}

HistogramFamily& MetricsRegistry::histogram(std::string name, std::string help,
                                            std::vector<std::string> label_names,
                                            std::vector<double> upper_bounds) {
  std::lock_guard lock(mu_);
  Entry entry{MetricType::kHistogram, nullptr, nullptr, nullptr};
  entry.histogram = std::make_unique<HistogramFamily>(
      std::move(name), std::move(help), std::move(label_names), std::move(upper_bounds));
  entries_.push_back(std::move(entry));
  return *entries_.back().histogram;
}

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest round-trip form, with ".0" on integral values as Python's repr writes them.
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> buckets;
  for (int64_t exponent = 1; exponent <= max_value; exponent *= 10) {
    for (int64_t mantissa : {1, 2, 5}) {
      const int64_t bound = mantissa * exponent;
      if (bound > max_value) return buckets;
      buckets.push_back(static_cast<double>(bound));
    }
    if (exponent > max_value / 10) break;
  }
  return buckets;
}

namespace {

// `{a="x",b="y"}` with an optional extra label (le for histogram buckets); "" when no labels.
std::string label_block(const std::vector<std::string>& names, const LabelValues& values,
                        const char* extra_name = nullptr, const std::string& extra_value = {}) {
  if (names.empty() && extra_name == nullptr) return {};
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += fmt::format("{}=\"{}\"", names[i], escape_label_value(values[i]));
  }
  if (extra_name != nullptr) {
    if (!names.empty()) out += ',';
    out += fmt::format("{}=\"{}\"", extra_name, escape_label_value(extra_value));
  }
  out += '}';
  return out;
}

void render_header(std::string& out, const std::string& name, const std::string& help,
                   const char* type) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename Family>
void render_scalar(std::string& out, const Family& family, const char* type) {
  render_header(out, family.name(), family.help(), type);
  for (const auto& [labels, series] : family.series()) {
    fmt::format_to(std::back_inserter(out), "{}{} {}\n", family.name(),
                   label_block(family.label_names(), labels), format_metric_value(series->value()));
  }
}

void render_histogram(std::string& out, const HistogramFamily& family) {
  render_header(out, family.name(), family.help(), "histogram");
  const auto& names = family.label_names();
  for (const auto& [labels, series] : family.series()) {
    const Histogram::Snapshot snap = series->snapshot();
    for (size_t i = 0; i <= snap.upper_bounds.size(); ++i) {
      const std::string le = i < snap.upper_bounds.size()
                                 ? format_metric_value(snap.upper_bounds[i])
                                 : std::string("+Inf");
      fmt::format_to(std::back_inserter(out), "{}_bucket{} {}\n", family.name(),
                     label_block(names, labels, "le", le),
                     format_metric_value(static_cast<double>(snap.cumulative[i])));
    }
    fmt::format_to(std::back_inserter(out), "{}_count{} {}\n", family.name(),
                   label_block(names, labels),
                   format_metric_value(static_cast<double>(snap.count)));
    fmt::format_to(std::back_inserter(out), "{}_sum{} {}\n", family.name(),
                   label_block(names, labels), format_metric_value(snap.sum));
  }
}

}  // namespace

std::string MetricsRegistry::render() const {
  std::string out;
  std::lock_guard lock(mu_);
  for (const Entry& entry : entries_) {
    switch (entry.type) {
      case MetricType::kCounter:
        render_scalar(out, *entry.counter, "counter");
        break;
      case MetricType::kGauge:
        render_scalar(out, *entry.gauge, "gauge");
        break;
      case MetricType::kHistogram:
        render_histogram(out, *entry.histogram);
        break;
    }
  }
  return out;
}

}  // namespace ls
