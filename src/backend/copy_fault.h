#pragma once
// Fault injection for the host KV tier's transfer-error tests (GPU and CPU alike):
// LONGSERVE_FAULT_COPY_PAGES=K makes the K-th copy_pages call of the backend (1-based, counting
// calls that run now: a call recorded into a CUDA graph neither counts nor fails) copy nothing
// and report an error, as a failed transfer would. The residency op has already marked the call's
// pages resident, so the step's partitions hold slots whose data never arrived: what a real
// transfer failure leaves behind, and what the engine's recovery (fail the step's requests, reset
// their partitions before the rows are reused) must clean up. One fault per process. Unset or
// not a positive number: off.

#include <cstdint>
#include <cstdlib>

namespace ls {

class CopyFault {
 public:
  CopyFault() {
    if (const char* v = std::getenv("LONGSERVE_FAULT_COPY_PAGES")) {
      const long long k = std::strtoll(v, nullptr, 10);
      at_ = k > 0 ? k : 0;
    }
  }
  bool armed() const { return at_ > 0; }
  int64_t at() const { return at_; }
  // Counts one copy_pages call; true exactly for the K-th.
  bool trip() { return at_ > 0 && ++calls_ == at_; }

 private:
  int64_t at_ = 0;
  int64_t calls_ = 0;
};

}  // namespace ls
