#pragma once
// Monotonic time helpers; units are in the names.

#include <chrono>
#include <cstdint>

namespace ls {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline double now_seconds() { return static_cast<double>(now_ns()) * 1e-9; }

// Wall-clock seconds since the Unix epoch (for OpenAI "created" fields).
inline int64_t unix_time_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Stopwatch {
 public:
  Stopwatch() : start_ns_(now_ns()) {}
  void reset() { start_ns_ = now_ns(); }
  double elapsed_ms() const { return static_cast<double>(now_ns() - start_ns_) * 1e-6; }
  double elapsed_seconds() const { return static_cast<double>(now_ns() - start_ns_) * 1e-9; }

 private:
  int64_t start_ns_;
};

}  // namespace ls
