#pragma once
// A small fork-join pool for data-parallel CPU kernels. The calling thread takes part, so a
// pool of N threads runs N-1 workers. Workers spin briefly before sleeping: a decode step issues
// hundreds of short parallel regions and a futex wake per region would dominate them.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
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
  // If fn throws, on any thread, the first exception is rethrown here once every thread is out
  // of fn (ranges not started by then are skipped; the others' exceptions are dropped), as
  // std::async and TBB do; the pool stays usable.
  // Not reentrant: fn must not call parallel_for / run_on_all on the same pool; a call that
  // would hand work to the pool's threads from inside one of its regions throws
  // std::logic_error (rethrown on the outer call's thread).
  void parallel_for(int64_t n, int64_t min_grain,
                    const std::function<void(int64_t begin, int64_t end)>& fn);

  // Calls fn(thread_index) once on each of the pool's threads (index 0 is the caller).
  // Exceptions and nesting as parallel_for.
  void run_on_all(const std::function<void(int thread_index)>& fn);

 private:
  void worker_loop(int index);
  // In a catch block: keeps the current exception if it is the region's first.
  void record_failure() noexcept;

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // This region's first exception; failed_ says one was stored (read relaxed per range, to skip
  // the ranges not started yet).
  std::atomic<bool> failed_{false};
  std::exception_ptr failure_;
};

}  // namespace ls
