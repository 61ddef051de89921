#pragma once
// The traffic schedule of `bench serve`: items handed out at their offsets from one dispatcher
// (the caller's thread) to a pool of sender threads, whose size is the concurrency cap.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace ls {

// Runs work(i, due_s) for every i in [0, offsets.size()) on max(1, num_senders) threads; item i
// is handed out offsets[i] seconds after the start (in index order) and due_s is when that
// happened (core/clock.h now_seconds). Returns the seconds from the start until the last
// item's work ended.
double dispatch_on_schedule(const std::vector<double>& offsets, int32_t num_senders,
                            const std::function<void(size_t, double)>& work);

}  // namespace ls
