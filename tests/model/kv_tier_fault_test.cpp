// A transfer error in the host KV tier (LONGSERVE_FAULT_COPY_PAGES, backend/copy_fault.h: one
// copy_pages call copies nothing and reports an error, after the residency op has already marked
// its pages resident):
//  - through the engine: exactly the requests of that step fail, with the error; the engine keeps
//    serving, no KV stays in use, and a request that then runs on the failed rows and their host
//    blocks produces the tokens of a fault-free engine;
//  - through the runner: the failed step leaves slots taken, and once its sequences are removed
//    both pools are empty again (every cache slot free, no page resident, every host block free).
// The same runs on the GPU in tests/e2e_server/gpu_server_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "model/model_stack.h"

namespace ls {
namespace {

std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

EngineConfig config() {
  EngineConfig c;
  c.model_dir = fixture_dir("qwen3");
  c.num_threads = 2;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 512;
  c.attention.policy = "lserve";
  c.attention.token_budget = 128;
  c.kv_offload = true;
  c.offload_buffer_ratio = 0;  // the smallest cache: misses at every step
  return c;
}

std::vector<int32_t> prompt(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int t = 0; t < n; ++t) ids.push_back(static_cast<int32_t>(rng() % 300));
  return ids;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

void add(EngineCore& core, const std::string& id, const std::vector<int32_t>& ids,
         std::map<std::string, Outcome>& out) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_ids = ids;
  r.sampling.temperature = 0;
  r.stop.max_tokens = 24;
  r.stop.eos_token_ids = {};
  ASSERT_TRUE(core.add_request(r, [&out, id](const RequestOutput& o) {
                    Outcome& oc = out[id];
                    oc.tokens.insert(oc.tokens.end(), o.token_ids.begin(), o.token_ids.end());
                    if (o.finished) {
                      oc.reason = o.finish_reason;
                      oc.error = o.error;
                    }
                  }).ok());
}

TEST(TierFault, TransferErrorFailsThatStepsRequestsOnlyAndLeavesThePoolsClean) {
  // Fault-free reference for the request that runs after the fault.
  std::map<std::string, Outcome> ref;
  {
    auto core = EngineCore::create(config());
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    add(**core, "z", prompt(3, 70), ref);
    while ((*core)->has_work()) ASSERT_TRUE((*core)->step().ok());
  }
  ASSERT_EQ(ref["z"].tokens.size(), 24u);

  // The 2nd copy_pages call (layer 2 of the first step, which prefills x and y together) fails.
  ASSERT_EQ(setenv("LONGSERVE_FAULT_COPY_PAGES", "2", 1), 0);
  auto created = EngineCore::create(config());
  unsetenv("LONGSERVE_FAULT_COPY_PAGES");
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  EngineCore& core = **created;
  std::map<std::string, Outcome> out;
  add(core, "x", prompt(1, 60), out);
  add(core, "y", prompt(2, 80), out);
  add(core, "z", prompt(3, 70), out);  // waits: --max-num-seqs 2
  const Status first = core.step();
  EXPECT_FALSE(first.ok());
  EXPECT_NE(first.message().find("injected fault"), std::string::npos) << first.to_string();
  for (const char* id : {"x", "y"}) {
    EXPECT_EQ(out[id].reason, FinishReason::kError) << id;
    EXPECT_NE(out[id].error.find("injected fault"), std::string::npos) << id << ": " << out[id].error;
    EXPECT_TRUE(out[id].tokens.empty()) << id;
  }
  EXPECT_EQ(core.stats().kv_bytes_in_use, 0);  // the host pool's blocks are back

  // z was not in the failed step: it runs on the rows (and host blocks) x and y left.
  int steps = 0;
  while (core.has_work() && steps++ < 200) ASSERT_TRUE(core.step().ok());
  EXPECT_EQ(out["z"].reason, FinishReason::kLength);
  EXPECT_EQ(out["z"].tokens, ref["z"].tokens);
  const EngineStats s = core.stats();
  EXPECT_EQ(s.kv_bytes_in_use, 0);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
  EXPECT_GT(s.kv_offload_misses_total, 0);
}

TEST(TierFault, AfterAFailedTransferBothPoolsAreEmpty) {
  ModelStackOptions o;
  o.model_dir = fixture_dir("qwen3");
  o.num_threads = 2;
  o.max_num_seqs = 2;
  o.max_step_tokens = 256;
  o.max_logit_rows = 256;
  o.max_model_len = 512;
  o.attention.policy = "lserve";
  o.attention.token_budget = 128;
  o.kv_offload = true;
  o.offload_buffer_ratio = 0;
  ASSERT_EQ(setenv("LONGSERVE_FAULT_COPY_PAGES", "3", 1), 0);
  auto built = build_model_stack(o);
  unsetenv("LONGSERVE_FAULT_COPY_PAGES");
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  ModelStack& b = **built;

  StepInput in;
  std::vector<int32_t> slots;
  for (const int32_t n : {90, 150}) {
    auto slot = b.kv->add_sequence();
    ASSERT_TRUE(slot.ok());
    slots.push_back(*slot);
    ASSERT_TRUE(b.kv->grow(*slot, n).ok());
    const std::vector<int32_t> ids = prompt(static_cast<uint32_t>(n), n);
    in.tokens.insert(in.tokens.end(), ids.begin(), ids.end());
    in.logit_rows.push_back(static_cast<int32_t>(in.tokens.size()) - 1);
    in.seqs.push_back({*slot, n, n, true});
  }
  std::vector<float> logits;
  // Two steps: the first fills the cache, the second (its 3rd copy call) fails.
  const Status first = b.runner->forward(in, logits);
  ASSERT_TRUE(first.ok()) << first.to_string();
  StepInput next;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int32_t len = in.seqs[i].kv_len;
    b.kv->finish_prefill(slots[i]);
    ASSERT_TRUE(b.kv->grow(slots[i], len + 1).ok());
    next.tokens.push_back(7);
    next.logit_rows.push_back(static_cast<int32_t>(i));
    next.seqs.push_back({slots[i], 1, len + 1, false});
  }
  const Status failed = b.runner->forward(next, logits);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("injected fault"), std::string::npos) << failed.to_string();
  auto taken = [&] {
    int64_t n = 0;
    for (int32_t v : b.pool->tier().slot_pages(*b.backend)) n += v >= 0 ? 1 : 0;
    return n;
  };
  EXPECT_GT(taken(), 0);  // the failed step left pages resident, some never copied

  // What the engine does with a failed step's sequences: remove them; the runner empties their
  // partitions before the rows are used again.
  for (const int32_t slot : slots) b.kv->remove_sequence(slot);
  b.runner->release_finished_rows();
  EXPECT_EQ(taken(), 0);
  for (int32_t v : b.pool->tier().page_slots(*b.backend)) ASSERT_EQ(v, -1);
  EXPECT_EQ(b.kv->num_free_retrieval_blocks(), b.kv->num_retrieval_blocks());
  EXPECT_TRUE(b.backend->take_error().ok());
}

}  // namespace
}  // namespace ls
