// Server construction, binding and shutdown edge cases.

#include <gtest/gtest.h>

#include <csignal>

#include "test_server.h"

namespace ls::testing {
namespace {

TEST(ServerLifecycle, CreateRejectsBadConfig) {
  FakeEngine engine(fake_engine_options());
  ServerConfig config;
  config.port = -1;
  auto server = Server::create(config, engine, fixture_tokenizer(), nullptr);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  config.port = 0;
  config.num_threads = 0;
  EXPECT_FALSE(Server::create(config, engine, fixture_tokenizer(), nullptr).ok());
  config.num_threads = 4;
  config.max_payload_bytes = 0;
  EXPECT_FALSE(Server::create(config, engine, fixture_tokenizer(), nullptr).ok());
}

TEST(ServerLifecycle, BindingAnOccupiedPortFailsCleanly) {
  TestServer first;
  FakeEngine engine(fake_engine_options());
  ServerConfig config;
  config.port = first.port();
  config.num_threads = 4;
  auto second = Server::create(config, engine, fixture_tokenizer(), nullptr);
  ASSERT_TRUE(second.ok()) << second.status().message();
  auto port = (*second)->bind();
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), StatusCode::kIoError);
  EXPECT_FALSE((*second)->listen().ok());
  // The first server is unaffected.
  auto client = first.client();
  auto health = client->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(ServerLifecycle, StopBeforeListenMakesListenReturn) {
  FakeEngine engine(fake_engine_options());
  ServerConfig config;
  config.port = 0;
  config.num_threads = 4;
  auto server = Server::create(config, engine, fixture_tokenizer(), nullptr);
  ASSERT_TRUE(server.ok());
  auto port = (*server)->bind();
  ASSERT_TRUE(port.ok());
  EXPECT_GT(*port, 0);
  EXPECT_EQ((*server)->port(), *port);
  (*server)->stop();
  EXPECT_TRUE((*server)->listen().ok());
}

TEST(ServerLifecycle, StopRacesWithListen) {
  // stop() right after listen() starts on another thread must still end listen().
  for (int i = 0; i < 20; ++i) {
    FakeEngine engine(fake_engine_options());
    ServerConfig config;
    config.port = 0;
    config.num_threads = 2;
    auto server = Server::create(config, engine, fixture_tokenizer(), nullptr);
    ASSERT_TRUE(server.ok());
    ASSERT_TRUE((*server)->bind().ok());
    std::thread listener([&] { EXPECT_TRUE((*server)->listen().ok()); });
    (*server)->stop();
    listener.join();
  }
}

Server* g_signal_target = nullptr;
void on_test_signal(int) { g_signal_target->request_stop(); }

TEST(ServerLifecycle, RequestStopFromASignalHandlerEndsListen) {
  FakeEngine engine(fake_engine_options());
  ServerConfig config;
  config.port = 0;
  config.num_threads = 4;
  auto server = Server::create(config, engine, fixture_tokenizer(), nullptr);
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->bind().ok());
  std::thread listener([&] { EXPECT_TRUE((*server)->listen().ok()); });
  g_signal_target = server->get();
  auto previous = std::signal(SIGUSR1, on_test_signal);
  std::raise(SIGUSR1);
  listener.join();  // returns only if the flag became a stop()
  std::signal(SIGUSR1, previous);
  g_signal_target = nullptr;
}

}  // namespace
}  // namespace ls::testing
