#include "tools/bench_serve/progress_bar.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "core/clock.h"

namespace ls {

namespace {

std::string clock_text(double seconds) {
  const auto total = static_cast<int64_t>(std::max(0.0, seconds));
  if (total >= 3600)
    return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{:02}:{:02}", total / 60, total % 60);
}

}  // namespace

ProgressBar::ProgressBar(int64_t total, bool enabled, std::FILE* out)
    : total_(total), enabled_(enabled), out_(out), start_s_(now_seconds()) {}

std::string ProgressBar::render(int64_t done, int64_t total, double elapsed_s) {
  constexpr int kWidth = 10;
  static const char* const kPartial[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const double cells = fraction * kWidth;
  const int full = static_cast<int>(cells);
  std::string bar;
  for (int i = 0; i < full; ++i) bar += "█";
  int used = full;
  if (full < kWidth) {
    const int eighths = static_cast<int>((cells - full) * 8);
    if (eighths > 0) {
      bar += kPartial[eighths];
      ++used;
    }
  }
  bar += std::string(static_cast<size_t>(kWidth - used), ' ');
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  const std::string remaining =
      rate > 0 ? clock_text(static_cast<double>(total - done) / rate) : std::string("?");
  return fmt::format("{:3d}%|{}| {}/{} [{}<{}, {:.2f}it/s]",
                     static_cast<int>(std::floor(fraction * 100.0)), bar, done, total,
                     clock_text(elapsed_s), remaining, rate);
}

void ProgressBar::draw_locked(bool force) {
  const double now = now_seconds();
  if (!force && last_draw_s_ >= 0 && now - last_draw_s_ < 0.1) return;
  last_draw_s_ = now;
  last_drawn_done_ = done_;
  const std::string line = render(done_, total_, now - start_s_);
  std::fprintf(out_, "\r%s", line.c_str());
  std::fflush(out_);
}

void ProgressBar::advance() {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  ++done_;
  draw_locked(done_ == total_);
}

void ProgressBar::finish() {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (last_drawn_done_ != done_) draw_locked(true);
  std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace ls
