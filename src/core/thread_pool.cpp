#include "core/thread_pool.h"

#include <algorithm>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#define LS_CPU_RELAX() _mm_pause()
#else
#define LS_CPU_RELAX() std::this_thread::yield()
#endif

namespace ls {

namespace {
constexpr int kSpinIterations = 4000;  // ~tens of microseconds before sleeping
// The pool whose region the calling thread is in (a worker: its pool, always), to refuse a
// nested region on the same pool.
thread_local const ThreadPool* t_region_pool = nullptr;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads_ = std::max(1, num_threads);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::record_failure() noexcept {
  if (!failed_.exchange(true, std::memory_order_acq_rel)) failure_ = std::current_exception();
}

void ThreadPool::worker_loop(int index) {
  t_region_pool = this;
  uint64_t seen = 0;
  while (true) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      LS_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    // An exception must not leave the thread (std::terminate): the caller rethrows it.
    try {
      (*task_)(index);
    } catch (...) {
      record_failure();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  if (t_region_pool == this) {
    // Inside one of this pool's regions: its threads are busy with the outer one (waiting for
    // them would never end, handing them work would corrupt the outer region).
    throw std::logic_error("ThreadPool: nested parallel region on the same pool");
  }
  task_ = &fn;
  failed_.store(false, std::memory_order_relaxed);
  failure_ = nullptr;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  const ThreadPool* outer = t_region_pool;  // a worker of another pool, or none
  t_region_pool = this;
  try {
    fn(0);
  } catch (...) {
    record_failure();
  }
  t_region_pool = outer;
  // Every worker must be out of fn before it goes (it lives in the caller's frame), thrown or not.
  while (pending_.load(std::memory_order_acquire) != 0) LS_CPU_RELAX();
  task_ = nullptr;
  if (failed_.load(std::memory_order_relaxed)) {
    std::exception_ptr e = std::move(failure_);
    failure_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t min_grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  const int64_t max_parts = std::max<int64_t>(1, n / min_grain);
  const int parts = static_cast<int>(std::min<int64_t>(num_threads_, max_parts));
  if (parts == 1) {
    fn(0, n);
    return;
  }
  const std::function<void(int)> task = [&](int t) {
    // A range not started once another threw is skipped: its result would be dropped anyway.
    if (t >= parts || failed_.load(std::memory_order_relaxed)) return;
    const int64_t begin = n * t / parts;
    const int64_t end = n * (t + 1) / parts;
    if (begin < end) fn(begin, end);
  };
  run_on_all(task);
}

}  // namespace ls
