#include "bench_tp_collectives.h"

#include <fmt/format.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "io/model_config.h"

namespace ls::bench {
namespace {

// One rank's outcome: its status, the timed replays' wall time, whether it replayed a recording.
struct RankRun {
  Status status;
  double seconds = 0;
  bool recorded = false;
};

}  // namespace

Result<TpCollectiveTime> time_tp_collectives(ModelStack& stack, int32_t rows, int32_t replays) {
  const auto n = static_cast<int32_t>(stack.tp_ranks.size());
  if (n < 2 || stack.tp_comms.size() != static_cast<size_t>(n)) {
    return invalid_argument("time_tp_collectives: not a tensor-parallel stack");
  }
  const ModelConfig& full = stack.config();
  const ModelConfig& shard = stack.tp_ranks[0]->model->config();
  const int64_t hidden = full.hidden_size();
  const int64_t slice = shard.vocab_size();
  const auto layers = static_cast<int32_t>(full.num_hidden_layers());
  const int32_t all_reduces = 2 * layers + (shard.vocab_slice().parts > 1 ? 1 : 0);
  const bool gathers = shard.vocab_slice().parts > 1;

  // Two passes: the all-reduces alone, then the whole step (all-reduces + gather).
  TpCollectiveTime out;
  out.all_reduces = all_reduces;
  for (const bool with_gather : {false, true}) {
    if (with_gather && !gathers) {
      out.step_ms = out.all_reduce_ms;
      break;
    }
    std::vector<RankRun> runs(static_cast<size_t>(n));
    std::barrier sync(n);
    // Every rank must take the same path (a collective waits for all): a failure at a check point
    // anywhere makes every rank stop there. One flag per check point, so a fast rank's failure
    // in a later phase cannot be seen by a slow rank at an earlier one.
    std::atomic<bool> failed_alloc{false}, failed_first{false}, recorded_anywhere_not{false};
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        RankRun& run = runs[static_cast<size_t>(r)];
        Backend& b = *stack.tp_ranks[static_cast<size_t>(r)]->backend;
        Communicator& comm = *stack.tp_comms[static_cast<size_t>(r)];
        b.bind_thread();
        const DType act = b.act_dtype();
        auto reduce_buf = b.allocate(dtype_nbytes(act, int64_t{rows} * hidden));
        auto slice_buf = b.allocate(dtype_nbytes(act, int64_t{rows} * slice));
        auto gather_buf = b.allocate(dtype_nbytes(act, int64_t{n} * rows * slice));
        if (!reduce_buf.ok() || !slice_buf.ok() || !gather_buf.ok()) {
          run.status = resource_exhausted("time_tp_collectives: cannot allocate the buffers");
          failed_alloc = true;
        }
        sync.arrive_and_wait();
        if (failed_alloc) return;
        b.fill_zero(reduce_buf->data(), reduce_buf->bytes());
        b.fill_zero(slice_buf->data(), slice_buf->bytes());
        const TensorView x = reduce_buf->view(act, {rows, hidden});
        const TensorView part = slice_buf->view(act, {int64_t{rows} * slice});
        const TensorView all = gather_buf->view(act, {int64_t{n} * rows * slice});
        auto step = [&]() -> Status {
          for (int32_t i = 0; i < all_reduces; ++i) LS_RETURN_IF_ERROR(comm.all_reduce_sum(x));
          if (with_gather) LS_RETURN_IF_ERROR(comm.all_gather(part, all));
          return {};
        };
        // One plain step first (NCCL connects lazily), then record one.
        run.status = step();
        b.synchronize();
        if (run.status.ok()) run.status = b.take_error();
        if (!run.status.ok()) failed_first = true;
        sync.arrive_and_wait();
        if (failed_first) return;
        int32_t graph = -1;
        Status rec = b.can_record() ? b.begin_capture() : unimplemented("cannot record");
        if (rec.ok()) {
          rec = step();
          Result<int32_t> g = b.end_capture();
          if (rec.ok() && g.ok()) graph = *g;
          (void)b.take_error();
        }
        if (graph < 0) recorded_anywhere_not = true;
        sync.arrive_and_wait();
        // Every rank replays its recording, or every rank enqueues op by op.
        const bool replay = !recorded_anywhere_not;
        auto once = [&]() -> Status { return replay ? b.replay(graph) : step(); };
        for (int i = 0; i < 5 && run.status.ok(); ++i) run.status = once();  // warm-up
        b.synchronize();
        if (run.status.ok()) run.status = b.take_error();
        sync.arrive_and_wait();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < replays && run.status.ok(); ++i) run.status = once();
        b.synchronize();
        run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (run.status.ok()) run.status = b.take_error();
        run.recorded = replay;
        // The recording points at this thread's buffers: drop it (the stack's runners have
        // recorded nothing yet; see the header).
        b.drop_graphs();
      });
    }
    for (std::thread& t : threads) t.join();
    for (int32_t r = 0; r < n; ++r) {
      const Status& s = runs[static_cast<size_t>(r)].status;
      if (!s.ok()) return Status(s.code(), fmt::format("rank {}: {}", r, s.message()));
    }
    const double ms = runs[0].seconds * 1e3 / replays;
    (with_gather ? out.step_ms : out.all_reduce_ms) = ms;
    out.recorded = runs[0].recorded;
  }
  return out;
}

}  // namespace ls::bench
