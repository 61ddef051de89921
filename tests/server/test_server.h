#pragma once
// Test harness: a Server on a free loopback port, backed by FakeEngine and the fixture tokenizer
// (tests/fixtures/server/, made by tests/server/make_fixtures.py), plus helpers to read the
// expected values HF computed and to split SSE bodies.

#include <httplib.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_engine.h"
#include "server/server.h"

namespace ls {
class Tokenizer;
class ChatTemplate;
}  // namespace ls

namespace ls::testing {

using Json = nlohmann::ordered_json;

inline constexpr const char* kFixtureDir = "tests/fixtures/server";
inline constexpr const char* kTokenizerDir = "tests/fixtures/server/tokenizer";

// The fixture tokenizer and chat template, loaded once per process.
const Tokenizer& fixture_tokenizer();
const ChatTemplate& fixture_chat_template();
// tests/fixtures/server/expected.json.
const Json& expected();

// FakeEngine options whose token text is the fixture tokenizer's decode of one token (special
// tokens skipped), as the fixture's expected texts were made.
FakeEngineOptions fake_engine_options();

struct TestServerOptions {
  ServerConfig config;
  FakeEngineOptions engine = fake_engine_options();
  bool chat_template = true;
};

TestServerOptions default_test_options();

class TestServer {
 public:
  explicit TestServer(TestServerOptions options = default_test_options());
  ~TestServer();
  // Stops the server and waits for its listener; the engine stays for inspection.
  void stop();

  int port() const { return port_; }
  FakeEngine& engine() { return *engine_; }
  std::unique_ptr<httplib::Client> client(int read_timeout_s = 20) const;
  const std::string& model_name() const { return model_name_; }

 private:
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = -1;
  std::string model_name_;
};

// POSTs JSON and returns (status, body); status -1 when the request failed.
std::pair<int, std::string> post_json(httplib::Client& client, const std::string& path,
                                      const std::string& body);

// Splits an SSE body into event payloads (the text after "data: " of each event). Fails the
// current test unless the body is exactly a sequence of "data: <one line>\n\n".
std::vector<std::string> split_sse(const std::string& body);

}  // namespace ls::testing
