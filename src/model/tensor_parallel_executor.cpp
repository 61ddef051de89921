#include "model/tensor_parallel_executor.h"

#include <utility>

#include "core/log.h"

namespace ls {

TensorParallelExecutor::TensorParallelExecutor(std::vector<Rank> ranks)
    : ranks_(std::move(ranks)), scratch_logits_(ranks_.size()) {
  threads_.reserve(ranks_.size());
  for (int32_t r = 0; r < size(); ++r) threads_.emplace_back([this, r] { worker(r); });
}

TensorParallelExecutor::~TensorParallelExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TensorParallelExecutor::worker(int32_t rank) {
  ranks_[static_cast<size_t>(rank)].backend->bind_thread();
  int64_t seen = 0;
  for (;;) {
    const std::function<Status(int32_t)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    Status s = (*job)(rank);
    if (!s.ok()) {
      // The other ranks may wait for this one in a collective: end their waits.
      ranks_[static_cast<size_t>(rank)].comm->abort(
          fmt::format("rank {} failed: {}", rank, s.message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok() && first_error_.ok()) {
      first_error_ = Status(s.code(), fmt::format("tensor-parallel rank {}: {}", rank, s.message()));
    }
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

Status TensorParallelExecutor::run_all(const std::function<Status(int32_t)>& job) {
  if (!broken_.ok()) return broken_;
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &job;
  pending_ = size();
  first_error_ = {};
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  Status s = first_error_;
  lock.unlock();
  if (!s.ok() && !ranks_[0].comm->reset()) {
    broken_ = Status(s.code(), fmt::format("the tensor-parallel group is down after: {}", s.message()));
    LS_LOG_ERROR("{}", broken_.message());
  }
  return s;
}

Status TensorParallelExecutor::forward(const StepInput& step, std::vector<float>& logits) {
  return run_all([&](int32_t r) {
    std::vector<float>& out = r == 0 ? logits : scratch_logits_[static_cast<size_t>(r)];
    return ranks_[static_cast<size_t>(r)].runner->forward(step, out);
  });
}

Status TensorParallelExecutor::forward_layer_segments(const LayerSegmentInput& in,
                                                      std::vector<float>& logits) {
  return run_all([&](int32_t r) {
    std::vector<float>& out = r == 0 ? logits : scratch_logits_[static_cast<size_t>(r)];
    return ranks_[static_cast<size_t>(r)].runner->forward_layer_segments(in, out);
  });
}

Status TensorParallelExecutor::set_device_budgets(const std::vector<int32_t>& slots) {
  return run_all(
      [&](int32_t r) { return ranks_[static_cast<size_t>(r)].runner->set_device_budgets(slots); });
}

}  // namespace ls
