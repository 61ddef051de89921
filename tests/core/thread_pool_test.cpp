#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace ls {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 17, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ManyShortRegions) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 5000; ++r) {
    pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
  }
  EXPECT_EQ(sum.load(), 5000 * 28);
}

TEST(ThreadPool, RunOnAllGivesDistinctIndices) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> seen(3);
  pool.run_on_all([&](int t) { seen[static_cast<size_t>(t)]++; });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

// An exception type that counts its live objects, to see that the ones the pool drops and the
// one it rethrows are all freed.
struct CountedError : std::runtime_error {
  static std::atomic<int> live;
  explicit CountedError(const std::string& what) : std::runtime_error(what) { ++live; }
  CountedError(const CountedError& other) : std::runtime_error(other) { ++live; }
  ~CountedError() override { --live; }
};
std::atomic<int> CountedError::live{0};

// The pool still runs every index exactly once.
void expect_usable(ThreadPool& pool) {
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionOnAWorkerIsRethrownOnTheCaller) {
  ThreadPool pool(4);
  // parallel_for(4, 1) gives each thread one index; the caller runs range 0.
  for (int64_t thrower : {1, 2, 3}) {
    std::atomic<int> ran{0};
    try {
      pool.parallel_for(4, 1, [&](int64_t b, int64_t) {
        if (b == thrower) throw std::runtime_error("range " + std::to_string(b));
        ++ran;
      });
      ADD_FAILURE() << "nothing was rethrown";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "range " + std::to_string(thrower));
    }
    EXPECT_LE(ran.load(), 3);
    expect_usable(pool);
  }
}

TEST(ThreadPool, ExceptionOnTheCallingThreadWaitsForTheWorkers) {
  ThreadPool pool(3);
  std::atomic<int> finished{0};
  try {
    pool.run_on_all([&](int t) {
      if (t == 0) throw std::invalid_argument("caller");
      // The workers still run to the end before the caller rethrows (fn lives in its frame).
      std::atomic<int> spin{0};
      while (spin.fetch_add(1, std::memory_order_relaxed) < 100000) {
      }
      ++finished;
    });
    ADD_FAILURE() << "nothing was rethrown";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "caller");
    EXPECT_EQ(finished.load(), 2);
  }
  expect_usable(pool);
}

TEST(ThreadPool, SeveralThrowingAtOnceRethrowOneAndLeakNothing) {
  ThreadPool pool(4);
  for (int round = 0; round < 200; ++round) {
    try {
      pool.run_on_all([](int t) { throw CountedError("thread " + std::to_string(t)); });
      ADD_FAILURE() << "nothing was rethrown";
    } catch (const CountedError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what == "thread 0" || what == "thread 1" || what == "thread 2" ||
                  what == "thread 3")
          << what;
    }
    ASSERT_EQ(CountedError::live.load(), 0) << "round " << round;
  }
  // Mixed: some ranges throw, the rest run; a later region runs normally.
  for (int round = 0; round < 200; ++round) {
    EXPECT_THROW(pool.parallel_for(64, 1,
                                   [](int64_t b, int64_t) {
                                     if (b % 32 != 0) throw CountedError("odd");
                                   }),
                 CountedError);
    ASSERT_EQ(CountedError::live.load(), 0);
  }
  expect_usable(pool);
}

TEST(ThreadPool, NestedRegionOnTheSamePoolIsRefused) {
  ThreadPool pool(2);
  // From the caller's range and from a worker's: refused, rethrown on the outer call's thread.
  for (int from : {0, 1}) {
    try {
      pool.run_on_all([&](int t) {
        if (t == from) pool.parallel_for(100, 1, [](int64_t, int64_t) {});
      });
      ADD_FAILURE() << "the nested region was not refused";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
    }
    expect_usable(pool);
  }
  // A region on another pool inside one is fine (each thread its own inner pool).
  std::vector<std::unique_ptr<ThreadPool>> inner;
  for (int t = 0; t < 2; ++t) inner.push_back(std::make_unique<ThreadPool>(2));
  std::atomic<int64_t> sum{0};
  pool.run_on_all([&](int t) {
    inner[static_cast<size_t>(t)]->parallel_for(10, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
  });
  EXPECT_EQ(sum.load(), 2 * 45);
}

}  // namespace
}  // namespace ls
