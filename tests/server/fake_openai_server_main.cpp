// A server for client tests (openai_client_test.py): the real Server over FakeEngine and the
// fixture tokenizer, on a free loopback port. Prints "PORT <n>" on stdout once it accepts
// connections and serves until its stdin closes. Run from the repository root.

#include <cstdio>
#include <iostream>
#include <string>

#include "core/log.h"
#include "test_server.h"

int main() {
  using namespace ls::testing;
  ls::init_logging();  // logs to stderr; stdout carries only the PORT line
  TestServerOptions options = default_test_options();
  options.engine.step_interval = std::chrono::milliseconds(1);
  TestServer server(options);
  if (server.port() <= 0) return 1;
  std::printf("PORT %d\n", server.port());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  server.stop();
  return 0;
}
