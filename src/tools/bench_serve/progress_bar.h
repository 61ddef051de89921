#pragma once
// A tqdm-style progress bar on stderr, e.g.
//    45%|████▌     | 450/1000 [00:10<00:12, 44.90it/s]
// Thread-safe; redraws at most ten times a second, and once more on finish().

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace ls {

class ProgressBar {
 public:
  ProgressBar(int64_t total, bool enabled, std::FILE* out = stderr);
  void advance();
  void finish();

  // The bar line for `done` of `total` after `elapsed_s` (exposed for tests).
  static std::string render(int64_t done, int64_t total, double elapsed_s);

 private:
  void draw_locked(bool force);

  const int64_t total_;
  const bool enabled_;
  std::FILE* out_;
  std::mutex mu_;
  int64_t done_ = 0;
  int64_t last_drawn_done_ = -1;
  double start_s_;
  double last_draw_s_ = -1.0;
  bool finished_ = false;
};

}  // namespace ls
