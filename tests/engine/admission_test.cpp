// Admission control (docs/working-set-scheduling.md) on the bare scheduler with small pools:
//  - KV blocks: at every step that admits, the blocks every running sequence is still owed (its
//    whole prompt plus its decode reserve) fit the pool, recomputed here from first principles;
//  - working sets: at every step that admits, the running sequences' working sets, recomputed
//    here from an independent oracle of the fake model's working sets, fit the cache;
//  - under a load far above capacity, preempted-and-recomputed tokens stay under 5% of every
//    token prefilled, and everything finishes with the KV pool empty.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace ls {
namespace {

constexpr int32_t kPage = 4;

KvGeometry geometry(int32_t max_chunk) {
  KvGeometry g;
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.head_dim = 4;
  g.page_tokens = kPage;
  g.logical_page_tokens = kPage;
  g.roles = HeadRoles(1, 1, {false});
  g.max_chunk_tokens = max_chunk;
  return g;
}

int64_t pages(int64_t tokens) { return (tokens + kPage - 1) / kPage; }

// Working sets of a made-up selection: a prefill needs its prompt's pages; a decoding sequence
// reads a window that depends on its slot and context (it moves as the context grows), so the
// sums change from step to step.
class FakeWorkingSets final : public WorkingSetModel {
 public:
  explicit FakeWorkingSets(int64_t cache) : cache_(cache) {}
  int64_t cache_pages() const override { return cache_; }
  int64_t prefill_pages(int32_t prompt_end) const override { return pages(prompt_end); }
  int64_t decode_pages(int32_t slot, int32_t context) const override {
    return std::min<int64_t>(pages(context), 2 + (slot + context / 3) % 4);
  }

 private:
  int64_t cache_;
};

struct Load {
  std::vector<std::unique_ptr<Sequence>> seqs;
  int64_t prompt_tokens = 0;

  Sequence* add(Scheduler& scheduler, int32_t id, int32_t prompt, int32_t max_tokens) {
    auto req = std::make_shared<RequestState>();
    req->request_id = "r" + std::to_string(id);
    req->prompt_ids.assign(static_cast<size_t>(prompt), 1 + id % 50);
    req->stop.max_tokens = max_tokens;
    seqs.push_back(std::make_unique<Sequence>(req, 0, 0, nullptr, 1 << 20));
    scheduler.add(seqs.back().get());
    prompt_tokens += prompt;
    return seqs.back().get();
  }
};

struct Outcome {
  int64_t computed = 0;     // every token the steps computed
  int64_t recomputed = 0;   // of them, again after a preemption
  int64_t preemptions = 0;
  int32_t admitting_steps = 0;
  int32_t max_running = 0;
};

// Runs the scheduler to the end with a fake forward; checks both admission invariants at every
// step that admits something.
Outcome run(Scheduler& scheduler, KvManager& kv, const FakeWorkingSets* ws, int64_t step_limit) {
  Outcome o;
  std::set<const Sequence*> running;
  for (int64_t step = 0; step < step_limit && scheduler.has_work(); ++step) {
    SchedulerOutput out = scheduler.schedule();
    for (const Sequence* v : out.preempted) running.erase(v);
    bool admitted = false;
    for (const ScheduledChunk& c : out.chunks) admitted |= running.insert(c.seq).second;
    o.preemptions += static_cast<int64_t>(out.preempted.size());
    o.max_running = std::max(o.max_running, static_cast<int32_t>(running.size()));
    if (admitted) {
      ++o.admitting_steps;
      // a. Blocks owed to every running sequence: pages of (length + reserve) minus held ones.
      int64_t owed = 0;
      for (const Sequence* s : running) {
        const int32_t len = s->num_tokens();
        const int32_t left = s->max_output_tokens - static_cast<int32_t>(s->output_ids.size());
        const int32_t reserve = std::min(left, std::max(kPage, (len + 15) / 16));
        owed += std::max<int64_t>(0, pages(len + reserve) -
                                         static_cast<int64_t>(kv.sequence(s->slot).retrieval.size()));
      }
      EXPECT_LE(owed, kv.num_free_retrieval_blocks()) << "step " << step;
      // b. Working sets, from the oracle, by each sequence's phase in the KV manager.
      if (ws != nullptr) {
        int64_t sum = 0;
        for (const Sequence* s : running) {
          const bool prefilling = kv.sequence(s->slot).prefilling;
          sum += prefilling ? ws->prefill_pages(s->num_tokens())
                            : ws->decode_pages(s->slot, s->num_tokens());
        }
        EXPECT_LE(sum, ws->cache_pages()) << "step " << step;
        EXPECT_EQ(sum, scheduler.working_set_pages()) << "step " << step;
      }
    }
    scheduler.on_step_done(out);
    for (const ScheduledChunk& c : out.chunks) {
      o.computed += c.num_tokens;
      if (!c.samples) continue;
      Sequence* s = c.seq;
      s->output_ids.push_back(7);
      if (static_cast<int32_t>(s->output_ids.size()) >= s->max_output_tokens) {
        scheduler.remove(s);
        running.erase(s);
      }
    }
  }
  o.recomputed = scheduler.num_recomputed_tokens();
  return o;
}

TEST(Admission, KvBlocksAndWorkingSetsFitAtEveryAdmissionUnderHeavyLoad) {
  for (const bool with_ws : {false, true}) {
    SCOPED_TRACE(with_ws ? "working sets" : "blocks only");
    KvManager kv(geometry(16), 40, 0, 8);  // 160 tokens of KV
    SchedulerConfig sc;
    sc.max_num_seqs = 8;
    sc.max_num_batched_tokens = 16;
    sc.max_chunk_tokens = 16;
    Scheduler scheduler(sc, kv);
    FakeWorkingSets ws(14);
    if (with_ws) scheduler.set_working_set_model(&ws);
    Load load;
    std::mt19937 rng(11);
    // 60 requests at once, ~3,000 prompt tokens against 160 tokens of KV.
    for (int i = 0; i < 60; ++i) {
      load.add(scheduler, i, 8 + static_cast<int32_t>(rng() % 33), 4 + static_cast<int32_t>(rng() % 20));
    }
    const Outcome o = run(scheduler, kv, with_ws ? &ws : nullptr, 200000);
    EXPECT_FALSE(scheduler.has_work());
    EXPECT_EQ(kv.bytes_in_use(), 0);
    EXPECT_GT(o.admitting_steps, 10);
    EXPECT_GT(o.max_running, 1);  // admission still batches
    const int64_t prefilled = load.prompt_tokens + o.recomputed;
    EXPECT_LT(o.recomputed * 20, prefilled) << o.recomputed << " of " << prefilled;
  }
}

// A sequence that outgrows its decode reserve can still be preempted (the last resort): with a
// reserve of zero the pool runs dry and preemption recomputes, which the counters show.
TEST(Admission, PreemptionStaysAsTheLastResortAndIsCounted) {
  KvManager kv(geometry(16), 12, 0, 3);
  SchedulerConfig sc;
  sc.max_num_seqs = 3;
  sc.max_num_batched_tokens = 16;
  sc.max_chunk_tokens = 16;
  sc.decode_reserve_ratio = 0;
  Scheduler scheduler(sc, kv);
  Load load;
  std::vector<Sequence*> seqs;
  for (int i = 0; i < 3; ++i) seqs.push_back(load.add(scheduler, i, 10, 20));
  const Outcome o = run(scheduler, kv, nullptr, 10000);
  EXPECT_FALSE(scheduler.has_work());
  EXPECT_GT(o.preemptions, 0);
  EXPECT_EQ(scheduler.num_preemptions(), o.preemptions);
  int64_t per_seq = 0;
  for (const Sequence* s : seqs) per_seq += s->num_preemptions;
  EXPECT_EQ(per_seq, o.preemptions);
  EXPECT_GT(o.recomputed, 0);
  // Every computed token is a prompt/output token once, or a recomputed one.
  EXPECT_EQ(o.computed, 3 * (10 + 19) + o.recomputed);
}

// A request whose working set alone exceeds the cache still runs once nothing else does (no
// endless wait), and a later small one waits behind it (FCFS).
TEST(Admission, AnOversizedWorkingSetRunsAloneInsteadOfWaitingForever) {
  KvManager kv(geometry(16), 64, 0, 4);
  SchedulerConfig sc;
  sc.max_num_seqs = 4;
  sc.max_num_batched_tokens = 16;
  sc.max_chunk_tokens = 16;
  Scheduler scheduler(sc, kv);
  FakeWorkingSets ws(6);  // a 40-token prompt needs 10 pages
  scheduler.set_working_set_model(&ws);
  Load load;
  load.add(scheduler, 0, 40, 3);
  load.add(scheduler, 1, 4, 3);
  SchedulerOutput first = scheduler.schedule();
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_EQ(first.chunks[0].seq, load.seqs[0].get());
  scheduler.on_step_done(first);
  const Outcome o = run(scheduler, kv, nullptr, 1000);
  EXPECT_FALSE(scheduler.has_work());
  EXPECT_EQ(o.preemptions, 0);
}

}  // namespace
}  // namespace ls
