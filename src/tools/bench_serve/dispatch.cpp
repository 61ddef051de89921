#include "tools/bench_serve/dispatch.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/clock.h"

namespace ls {

double dispatch_on_schedule(const std::vector<double>& offsets, int32_t num_senders,
                            const std::function<void(size_t, double)>& work) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> ready;
  std::vector<double> dispatch_s(offsets.size(), 0.0);  // when each item was due
  bool closed = false;
  std::vector<std::thread> senders;
  const int32_t n = std::max(1, num_senders);
  senders.reserve(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) {
    senders.emplace_back([&] {
      for (;;) {
        size_t index = 0;
        double due = 0;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return closed || !ready.empty(); });
          if (ready.empty()) return;
          index = ready.front();
          ready.pop_front();
          due = dispatch_s[index];
        }
        work(index, due);
      }
    });
  }
  const auto start = std::chrono::steady_clock::now();
  const double start_s = now_seconds();
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (offsets[i] > 0) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::duration<double>(offsets[i])));
    }
    {
      std::lock_guard lock(mu);
      dispatch_s[i] = now_seconds();
      ready.push_back(i);
    }
    cv.notify_one();
  }
  {
    std::lock_guard lock(mu);
    closed = true;
  }
  cv.notify_all();
  for (std::thread& sender : senders) sender.join();
  return now_seconds() - start_s;
}

}  // namespace ls
