#include "backend/cpu/cpu_communicator.h"

#include <cstring>
#include <utility>

#include "core/dtype.h"

namespace ls {

namespace {

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<CpuCommGroup> owner, int32_t rank)
      : owner_(std::move(owner)), group_(*owner_), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return group_.size(); }
  std::string name() const override { return "cpu"; }

  Status all_reduce_sum(const TensorView& buf) override {
    if (buf.dtype != DType::kF32 && buf.dtype != DType::kBF16 && buf.dtype != DType::kF16) {
      return invalid_argument("all_reduce_sum: {} buffers are not supported (f32, bf16, f16)",
                              dtype_name(buf.dtype));
    }
    if (!buf.is_contiguous()) return invalid_argument("all_reduce_sum: the buffer is not contiguous");
    const int64_t n = buf.numel();
    group_.slots[static_cast<size_t>(rank_)] = buf.data;
    LS_RETURN_IF_ERROR(group_.arrive_and_wait());  // every rank's buffer is published
    sum_.assign(static_cast<size_t>(n), 0.0f);
    part_.resize(static_cast<size_t>(n));
    for (int32_t r = 0; r < size(); ++r) {  // fixed rank order: identical sums on every rank
      const void* src = group_.slots[static_cast<size_t>(r)];
      if (buf.dtype == DType::kF32) {
        std::memcpy(part_.data(), src, static_cast<size_t>(n) * 4);
      } else {
        convert_to_f32(buf.dtype, src, part_.data(), n);
      }
      for (int64_t i = 0; i < n; ++i) sum_[static_cast<size_t>(i)] += part_[static_cast<size_t>(i)];
    }
    LS_RETURN_IF_ERROR(group_.arrive_and_wait());  // nobody reads the buffers any more
    if (buf.dtype == DType::kF32) {
      std::memcpy(buf.data, sum_.data(), static_cast<size_t>(n) * 4);
    } else {
      convert_from_f32(sum_.data(), buf.dtype, buf.data, n);
    }
    return {};
  }

  Status all_gather(const TensorView& in, const TensorView& out) override {
    if (!in.is_contiguous() || !out.is_contiguous() || in.dtype != out.dtype ||
        out.numel() != in.numel() * size()) {
      return invalid_argument("all_gather: out must be [{} x {}] {} contiguous elements",
                              size(), in.numel(), dtype_name(in.dtype));
    }
    group_.slots[static_cast<size_t>(rank_)] = in.data;
    LS_RETURN_IF_ERROR(group_.arrive_and_wait());
    const int64_t bytes = in.nbytes();
    for (int32_t r = 0; r < size(); ++r) {
      std::memcpy(static_cast<char*>(out.data) + r * bytes, group_.slots[static_cast<size_t>(r)],
                  static_cast<size_t>(bytes));
    }
    return group_.arrive_and_wait();
  }

  Status barrier() override { return group_.arrive_and_wait(); }
  void abort(const std::string& why) override { group_.abort(why); }
  bool reset() override { return group_.reset(); }

 private:
  std::shared_ptr<CpuCommGroup> owner_;
  CpuCommGroup& group_;
  int32_t rank_;
  std::vector<float> sum_;   // [n] f32 scratch
  std::vector<float> part_;  // [n] f32 scratch
};

}  // namespace

CpuCommGroup::CpuCommGroup(int32_t size, std::chrono::milliseconds timeout)
    : slots(static_cast<size_t>(size), nullptr), size_(size), timeout_(timeout) {}

std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(
    int32_t size, std::chrono::milliseconds timeout) {
  auto group = std::make_shared<CpuCommGroup>(size, timeout);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int32_t r = 0; r < size; ++r) comms.push_back(std::make_unique<CpuCommunicator>(group, r));
  return comms;
}

Status CpuCommGroup::arrive_and_wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return failed_precondition("tensor parallel: {}", why_);
  const int64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return {};
  }
  const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || aborted_; });
  if (generation_ != gen) return {};
  if (aborted_) return failed_precondition("tensor parallel: {}", why_);
  (void)done;
  aborted_ = true;
  why_ = "a tensor-parallel rank did not reach the collective in time (timed out)";
  cv_.notify_all();
  return failed_precondition("tensor parallel: {}", why_);
}

void CpuCommGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) why_ = why;
  aborted_ = true;
  cv_.notify_all();
}

bool CpuCommGroup::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  why_.clear();
  arrived_ = 0;
  ++generation_;
  return true;
}

}  // namespace ls
