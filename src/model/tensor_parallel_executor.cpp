#include "model/tensor_parallel_executor.h"

#include <exception>
#include <stdexcept>
#include <utility>

#include "core/log.h"

namespace ls {

namespace {

// An injected failure (model/tp_fault.h): the error value, or the exception, a rank reports.
Status tp_injected_failure(const TpFault& f, const std::string& where) {
  const std::string what = fmt::format("injected fault ({})", where);
  if (f.throw_exception) throw std::runtime_error(what);
  return internal_error("{}", what);
}

// What a rank's runner calls its collectives through: forwards every call, remembers whether one
// of this step's collectives failed (the rank then only saw another rank's abort or a timeout, so
// its error is not the step's cause), and, during fault injection, fails the K-th collective of a
// step in which the fault fires instead of running it.
class TpRankCommunicator final : public Communicator {
 public:
  explicit TpRankCommunicator(Communicator* inner) : inner_(inner) {}
  void set_fault(const TpFault& fault) { fault_ = fault; }
  // Called between steps (no rank thread runs).
  void begin_step(bool fires) {
    fires_ = fires;
    calls_ = 0;
    collective_failed_ = false;
  }
  bool collective_failed() const { return collective_failed_; }
  int32_t rank() const override { return inner_->rank(); }
  int32_t size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  Status all_reduce_sum(const TensorView& buf) override {
    LS_RETURN_IF_ERROR(maybe_fail());
    return note(inner_->all_reduce_sum(buf));
  }
  Status all_gather(const TensorView& in, const TensorView& out) override {
    LS_RETURN_IF_ERROR(maybe_fail());
    return note(inner_->all_gather(in, out));
  }
  Status barrier() override {
    LS_RETURN_IF_ERROR(maybe_fail());
    return note(inner_->barrier());
  }
  void abort(const std::string& why) override { inner_->abort(why); }
  void wait_abort() override { inner_->wait_abort(); }
  bool reset() override { return inner_->reset(); }
  // A collective's failure met on the device (a p2p all-reduce whose wait was aborted): this
  // rank only saw the abort too.
  Status device_error() override { return note(inner_->device_error()); }

 private:
  Status note(Status s) {
    if (!s.ok()) collective_failed_ = true;
    return s;
  }
  Status maybe_fail() {
    if (!fires_ || ++calls_ != fault_.at_collective) return {};
    return tp_injected_failure(fault_, fmt::format("collective {} of the step", calls_));
  }
  Communicator* inner_;
  TpFault fault_;
  bool fires_ = false;
  int32_t calls_ = 0;
  bool collective_failed_ = false;
};

}  // namespace

TensorParallelExecutor::TensorParallelExecutor(std::vector<Rank> ranks)
    : ranks_(std::move(ranks)), scratch_logits_(ranks_.size()) {
  for (Rank& r : ranks_) {
    rank_comms_.push_back(std::make_unique<TpRankCommunicator>(r.comm));
    r.runner->set_communicator(rank_comms_.back().get());
  }
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
  // The runners outlive this executor (ModelStack destroys it first): hand each its own
  // communicator back instead of leaving it a pointer to a wrapper freed below.
  for (Rank& r : ranks_) r.runner->set_communicator(r.comm);
}

Status TensorParallelExecutor::set_fault(const TpFault& fault) {
  if (!fault.armed()) return {};
  if (fault.rank >= size() || fault.at_collective < 0 || fault.after_steps < 0) {
    return invalid_argument("tensor-parallel fault injection: rank {} of {}, collective {}",
                            fault.rank, size(), fault.at_collective);
  }
  fault_ = fault;
  fault_matches_ = 0;
  static_cast<TpRankCommunicator*>(rank_comms_[static_cast<size_t>(fault.rank)].get())
      ->set_fault(fault);
  return {};
}

void TensorParallelExecutor::set_head_roles(std::vector<int32_t> retrieval,
                                            std::vector<int32_t> streaming) {
  retrieval_heads_ = std::move(retrieval);
  streaming_heads_ = std::move(streaming);
}

std::vector<TpRankStats> TensorParallelExecutor::tp_rank_stats() const {
  std::vector<TpRankStats> out(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (r < retrieval_heads_.size()) out[r].retrieval_kv_heads = retrieval_heads_[r];
    if (r < streaming_heads_.size()) out[r].streaming_kv_heads = streaming_heads_[r];
    out[r].tier = ranks_[r].runner->kv_tier_stats();
    out[r].tier.row_counters.clear();
    out[r].tier.row_budgets.clear();
  }
  return out;
}

bool TensorParallelExecutor::fault_fires(StepKind kind) {
  if (!fault_.armed() || kind == StepKind::kOther) return false;
  const bool decode = kind == StepKind::kDecode;
  if (decode != (fault_.phase == TpFault::Phase::kDecode)) return false;
  if (fault_.on_matching_step) fault_.on_matching_step(fault_matches_);
  return fault_matches_++ == fault_.after_steps;
}

void TensorParallelExecutor::worker(int32_t rank) {
  ranks_[static_cast<size_t>(rank)].backend->bind_thread();
  int64_t seen = 0;
  for (;;) {
    const std::function<Status(int32_t)>* job = nullptr;
    bool fail_first = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      fail_first = fail_before_step_ == rank;
    }
    // An exception must not escape the thread (std::terminate would take the process down with
    // no error): it becomes this rank's error, and the executor goes down (the rank's state is
    // unknown after it).
    Status s;
    bool threw = false;
    try {
      s = fail_first ? tp_injected_failure(fault_, "before the step") : (*job)(rank);
    } catch (const std::exception& e) {
      threw = true;
      s = internal_error("threw an exception: {}", e.what());
    } catch (...) {
      threw = true;
      s = internal_error("threw an exception of an unknown type");
    }
    if (!s.ok()) {
      // The other ranks may wait for this one in a collective: end their waits.
      ranks_[static_cast<size_t>(rank)].comm->abort(
          fmt::format("rank {} failed: {}", rank, s.message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    threw_ = threw_ || threw;
    if (!s.ok()) {
      s = Status(s.code(), fmt::format("tensor-parallel rank {}: {}", rank, s.message()));
      // The step's error is the first rank that failed on its own; ranks whose collective failed
      // only saw that rank's abort (or a timeout) and come after.
      const bool victim =
          static_cast<TpRankCommunicator*>(rank_comms_[static_cast<size_t>(rank)].get())
              ->collective_failed();
      if (first_error_.ok() || (first_error_victim_ && !victim)) {
        first_error_ = s;
        first_error_victim_ = victim;
      }
    }
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void TensorParallelExecutor::dispatch(const std::function<Status(int32_t)>& job,
                                      int32_t fail_before_step) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &job;
  pending_ = size();
  first_error_ = {};
  first_error_victim_ = false;
  threw_ = false;
  fail_before_step_ = fail_before_step;
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

Status TensorParallelExecutor::run_all(const std::function<Status(int32_t)>& job, StepKind kind) {
  if (!broken_.ok()) return broken_;
  const bool fires = fault_fires(kind);
  for (size_t r = 0; r < rank_comms_.size(); ++r) {
    static_cast<TpRankCommunicator*>(rank_comms_[r].get())
        ->begin_step(fires && fault_.rank == static_cast<int32_t>(r) && fault_.at_collective > 0);
  }
  dispatch(job, fires && fault_.at_collective == 0 ? fault_.rank : -1);
  Status s;
  bool threw = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = first_error_;
    threw = threw_;
  }
  // Every rank is out of its step here, so the group can be reset (CPU) for the next one.
  if (s.ok() || (!threw && ranks_[0].comm->reset())) return s;
  broken_ = Status(s.code(), fmt::format("the tensor-parallel group is down after: {}", s.message()));
  LS_LOG_ERROR("{}", broken_.message());
  // The failing rank aborted the group, and a device transport's teardown (NCCL's) waits until
  // every recorded step holding the group's collectives is gone: each rank drops its recordings
  // on its own thread (its device current; the executor is down, they would never replay), then
  // the teardown finishes (docs/tensor-parallel.md, "Failures").
  dispatch(
      [this](int32_t r) {
        ranks_[static_cast<size_t>(r)].runner->drop_recordings();
        return Status{};
      },
      -1);
  for (Rank& r : ranks_) r.comm->wait_abort();
  return s;
}

Status TensorParallelExecutor::forward(const StepInput& step, std::vector<float>& logits) {
  bool decode = !step.seqs.empty();
  for (const StepSequence& s : step.seqs) decode = decode && !s.prefilling;
  return run_all(
      [&](int32_t r) {
        std::vector<float>& out = r == 0 ? logits : scratch_logits_[static_cast<size_t>(r)];
        return ranks_[static_cast<size_t>(r)].runner->forward(step, out);
      },
      decode ? StepKind::kDecode : StepKind::kPrefill);
}

Status TensorParallelExecutor::forward_layer_segments(const LayerSegmentInput& in,
                                                      std::vector<float>& logits) {
  return run_all(
      [&](int32_t r) {
        std::vector<float>& out = r == 0 ? logits : scratch_logits_[static_cast<size_t>(r)];
        return ranks_[static_cast<size_t>(r)].runner->forward_layer_segments(in, out);
      },
      StepKind::kPrefill);
}

Status TensorParallelExecutor::set_device_budgets(const std::vector<int32_t>& slots) {
  return run_all(
      [&](int32_t r) { return ranks_[static_cast<size_t>(r)].runner->set_device_budgets(slots); },
      StepKind::kOther);
}

}  // namespace ls
