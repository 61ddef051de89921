#include "test_server.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ls::testing {

const Tokenizer& fixture_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    auto loaded = Tokenizer::load(kTokenizerDir);
    if (!loaded.ok()) {
      ADD_FAILURE() << "cannot load the fixture tokenizer: " << loaded.status().message();
      std::abort();
    }
    return std::move(loaded).value();
  }();
  return *tokenizer;
}

const ChatTemplate& fixture_chat_template() {
  static const std::unique_ptr<ChatTemplate> chat_template = [] {
    const auto& source = fixture_tokenizer().chat_template();
    if (!source) {
      ADD_FAILURE() << "the fixture tokenizer has no chat template";
      std::abort();
    }
    auto parsed = ChatTemplate::parse(*source);
    if (!parsed.ok()) {
      ADD_FAILURE() << "cannot parse the fixture chat template: " << parsed.status().message();
      std::abort();
    }
    return std::make_unique<ChatTemplate>(std::move(parsed).value());
  }();
  return *chat_template;
}

const Json& expected() {
  static const Json data = [] {
    std::ifstream file(std::string(kFixtureDir) + "/expected.json");
    std::stringstream text;
    text << file.rdbuf();
    return Json::parse(text.str());
  }();
  return data;
}

FakeEngineOptions fake_engine_options() {
  FakeEngineOptions options;
  options.model_name = "fake-model";
  options.max_model_len = 256;
  options.vocab_size = fixture_tokenizer().vocab_size();
  options.token_text = [](int32_t id) {
    return fixture_tokenizer().decode(std::span<const int32_t>(&id, 1), true);
  };
  return options;
}

TestServerOptions default_test_options() {
  TestServerOptions options;
  options.config.port = 0;
  options.config.num_threads = 96;
  options.config.stream_poll_ms = 20;
  return options;
}

TestServer::TestServer(TestServerOptions options) {
  engine_ = std::make_unique<FakeEngine>(std::move(options.engine));
  auto server = Server::create(options.config, *engine_, fixture_tokenizer(),
                               options.chat_template ? &fixture_chat_template() : nullptr);
  if (!server.ok()) {
    ADD_FAILURE() << "Server::create: " << server.status().message();
    return;
  }
  server_ = std::move(server).value();
  auto port = server_->bind();
  if (!port.ok()) {
    ADD_FAILURE() << "Server::bind: " << port.status().message();
    return;
  }
  port_ = *port;
  model_name_ = options.config.served_model_name.empty() ? engine_->model_name()
                                                         : options.config.served_model_name;
  thread_ = std::thread([this] {
    Status status = server_->listen();
    if (!status.ok()) ADD_FAILURE() << "Server::listen: " << status.message();
  });
}

void TestServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

TestServer::~TestServer() {
  stop();
  server_.reset();
  engine_.reset();
}

std::unique_ptr<httplib::Client> TestServer::client(int read_timeout_s) const {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
  client->set_read_timeout(read_timeout_s, 0);
  client->set_connection_timeout(5, 0);
  return client;
}

std::pair<int, std::string> post_json(httplib::Client& client, const std::string& path,
                                      const std::string& body) {
  auto res = client.Post(path.c_str(), body, "application/json");
  if (!res) return {-1, httplib::to_string(res.error())};
  return {res->status, res->body};
}

std::vector<std::string> split_sse(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    if (body.compare(pos, 6, "data: ") != 0) {
      ADD_FAILURE() << "SSE event at byte " << pos
                    << " does not start with 'data: ': " << body.substr(pos, 80);
      return events;
    }
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "SSE event at byte " << pos << " is not terminated by a blank line";
      return events;
    }
    std::string payload = body.substr(pos + 6, end - pos - 6);
    if (payload.find('\n') != std::string::npos) {
      ADD_FAILURE() << "SSE payload spans lines: " << payload;
    }
    events.push_back(std::move(payload));
    pos = end + 2;
  }
  return events;
}

}  // namespace ls::testing
