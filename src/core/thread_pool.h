#pragma once
// A small fork-join pool for data-parallel CPU kernels. The calling thread takes part, so a
// pool of N threads runs N-1 workers. Workers spin briefly before sleeping: a decode step issues
// hundreds of short parallel regions and a futex wake per region would dominate them.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ls {

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into contiguous ranges, at least `min_grain` items each, and calls
  // fn(begin, end) on them from all threads; returns when every range is done.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t min_grain,
                    const std::function<void(int64_t begin, int64_t end)>& fn);

  // Calls fn(thread_index) once on each of the pool's threads (index 0 is the caller).
  void run_on_all(const std::function<void(int thread_index)>& fn);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace ls
