// libFuzzer target: the HTTP/1.1 request parser (request line, header fields, Content-Length and
// chunked framing, gzip/deflate content decoding, pipelined requests). The input is parsed as a
// byte stream twice, once in one piece and once split at positions taken from its first byte,
// and both parses must agree request by request (the transport feeds whatever recv() returns);
// every complete request must respect the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_parser.h"

namespace {

struct Outcome {
  int state = 0;  // 0 need more, 1 complete, 2 error
  int status = 0;
  std::string method, target, body;
  size_t num_headers = 0;
  bool keep_alive = false;
  bool operator==(const Outcome&) const = default;
};

ls::HttpLimits limits() {
  ls::HttpLimits l;
  l.max_header_bytes = 4096;
  l.max_headers = 32;
  l.max_target_bytes = 1024;
  l.max_body_bytes = 1 << 16;
  return l;
}

// Parses `data` as pipelined requests, feeding `step` bytes at a time (0: all at once).
std::vector<Outcome> parse_all(std::string_view data, size_t step) {
  std::vector<Outcome> out;
  ls::RequestParser parser(limits());
  size_t pos = 0;
  while (true) {
    while (pos < data.size() && parser.state() == ls::RequestParser::State::kNeedMore) {
      const size_t n = step == 0 ? data.size() - pos : std::min(step, data.size() - pos);
      const size_t used = parser.feed(data.substr(pos, n));
      if (used > n) std::abort();
      pos += used;
      if (used < n && parser.state() == ls::RequestParser::State::kNeedMore) std::abort();
    }
    Outcome o;
    if (parser.state() == ls::RequestParser::State::kComplete) {
      const ls::HttpRequest& req = parser.request();
      if (static_cast<int64_t>(req.body.size()) > limits().max_body_bytes) std::abort();
      if (req.headers.size() > limits().max_headers) std::abort();
      o = {1, 0, req.method, req.target, req.body, req.headers.size(), req.keep_alive};
    } else if (parser.state() == ls::RequestParser::State::kError) {
      const int status = parser.error_status();
      if (status < 400 || status > 505) std::abort();
      o.state = 2;
      o.status = status;
    }
    out.push_back(o);
    if (o.state != 1) break;
    parser.reset();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = 1 + data[0] % 17;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (parse_all(text, 0) != parse_all(text, step)) std::abort();
  return 0;
}
