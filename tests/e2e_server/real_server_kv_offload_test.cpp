// The real `longserve serve` with the host KV tier on (CPU backend, bundled model, quest with a
// budget small enough that decode selects pages): greedy output equal to the all-resident
// server's, and /metrics reports the tier (host pool, device cache, pinned bytes, hits, misses,
// bytes moved).
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "server_process.h"

namespace ls::testing {
namespace {

using Json = nlohmann::json;

const std::string kNeedle =
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "them. I will quiz you about the numbers afterwards.\n The special magic number for "
    "bright-lantern is 4829137. Peter washed the letter because it was gray. Every simple book "
    "cleaned that window around the barn.\nWhat is the special magic number for bright-lantern "
    "mentioned in the provided text?\nAnswer: The special magic number for bright-lantern is";

std::string complete(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  const Json body = {{"prompt", kNeedle}, {"max_tokens", 8}, {"temperature", 0}};
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  if (!res || res->status != 200) return "<failed>";
  return Json::parse(res->body)["choices"][0]["text"].get<std::string>();
}

// The value of the first sample of `name` (labels ignored), or -1.
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  const size_t space = text.find("} ", at);
  return std::stod(text.substr(space + 2, text.find('\n', space) - space - 2));
}

TEST(RealServerKvOffload, AnswersAsAllResidentAndReportsTheTier) {
  const std::vector<std::string> common = {"--max-model-len", "2048", "--max-num-seqs", "4",
                                           "--attention", "quest", "--token-budget", "64"};
  std::string resident_answer;
  {
    ServerProcess server(common);
    ASSERT_GT(server.port(), 0);
    resident_answer = complete(server.port());
  }
  std::vector<std::string> tiered = common;
  tiered.insert(tiered.end(), {"--kv-offload", "on", "--offload-buffer-ratio", "1"});
  ServerProcess server(tiered);
  ASSERT_GT(server.port(), 0);
  ASSERT_NE(resident_answer, "<failed>");
  EXPECT_EQ(complete(server.port()), resident_answer);

  httplib::Client c("127.0.0.1", server.port());
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  const std::string text = "\n" + res->body;
  EXPECT_GT(metric(text, "longserve:kv_offload_host_bytes"), 0) << res->body;
  EXPECT_GT(metric(text, "longserve:kv_offload_device_cache_bytes"), 0);
  EXPECT_EQ(metric(text, "longserve:host_pinned_bytes"), 0);  // the CPU backend pins nothing
  const double hits = metric(text, "longserve:kv_offload_hits_total");
  const double misses = metric(text, "longserve:kv_offload_misses_total");
  EXPECT_GT(hits + misses, 0);
  EXPECT_GT(misses, 0);  // the prompt's pages came from the host pool at least once
  EXPECT_GT(metric(text, "longserve:kv_offload_h2d_bytes_total"), 0);
}

}  // namespace
}  // namespace ls::testing
