#pragma once
// The hand-off between the engine thread (which calls a request's OutputSink) and the HTTP
// worker that writes the response. push() never blocks for long, as the engine requires of its
// sinks; the worker drains everything queued in one call.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "engine/engine_api.h"

namespace ls {

struct ChannelItem {
  int32_t prompt_index = 0;  // which of the HTTP request's prompts (engine requests) it is from
  RequestOutput output;
};

class OutputChannel {
 public:
  void push(int32_t prompt_index, const RequestOutput& output) {
    {
      std::lock_guard lock(mu_);
      items_.push_back(ChannelItem{prompt_index, output});
    }
    cv_.notify_one();
  }

  // Everything queued, waiting up to `timeout` for the first item; empty on timeout.
  std::vector<ChannelItem> pop_all(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !items_.empty(); });
    std::vector<ChannelItem> out(std::make_move_iterator(items_.begin()),
                                 std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChannelItem> items_;
};

}  // namespace ls
