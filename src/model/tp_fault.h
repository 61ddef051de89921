#pragma once
// Fault injection for the tensor-parallel failure tests (docs/tensor-parallel.md, "Failures"):
// makes one rank fail one step, as a rank whose kernel, allocation or transfer fails would. Set
// through ModelStackOptions::tp_fault (EngineConfig::tp_fault for a whole engine); no flag, no
// environment variable: nothing is read on the step path when it is off (rank < 0).

#include <cstdint>
#include <functional>

namespace ls {

struct TpFault {
  enum class Phase { kPrefill, kDecode };
  int32_t rank = -1;               // the rank that fails; -1: off
  Phase phase = Phase::kDecode;    // a step with prefill tokens, or a step of decodes only
  int64_t after_steps = 0;         // matching steps the rank runs normally first
  // 0: the rank fails before its step starts (the others run until they wait for it in their
  // first collective); K > 0: the rank fails instead of running its K-th collective of the step
  // (mid-layer; the others wait in theirs). Host-side calls only: a recorded decode step that
  // replays its collectives on the device does not call the communicator.
  int32_t at_collective = 0;
  bool throw_exception = false;    // throw std::runtime_error instead of returning an error
  // Called on the thread that runs the step (the engine's), before each step of `phase` with its
  // 0-based index among them (the failing one is after_steps): lets a test hold the engine at a
  // known point, e.g. until a request was queued. Empty: nothing is called.
  std::function<void(int64_t index)> on_matching_step;
  bool armed() const { return rank >= 0; }
};

}  // namespace ls
