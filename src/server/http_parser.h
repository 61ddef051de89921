#pragma once
// Incremental HTTP/1.1 request parser (RFC 9112): request line, header fields, and a body framed
// by Content-Length or chunked transfer coding; the content coding is undone at the end. Bytes
// arrive in any split; feed() consumes up to the end of one request and leaves the rest (the
// next pipelined request) to the caller. Every limit is checked as bytes arrive, so no input
// makes it buffer more than the header limit plus the body limit:
//   - request line + header fields above max_header_bytes, or more than max_headers fields: 431;
//   - a declared or accumulated body above max_body_bytes: 413 (before reading it);
//   - a decoded (gzip/deflate) body above max_body_bytes: 413;
//   - malformed framing: 400 (a field line without a colon, whitespace before the colon,
//     obs-fold, a Content-Length that is not a plain decimal number or overflows, both
//     Content-Length and Transfer-Encoding, a bad chunk size line); 501 for transfer codings
//     other than chunked; 505 for versions other than HTTP/1.0 and 1.1.
// A request with neither Content-Length nor Transfer-Encoding has an empty body (RFC 9112 6.3).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_message.h"

namespace ls {

struct HttpLimits {
  size_t max_header_bytes = 64 * 1024;  // request line and header fields together
  size_t max_headers = 128;
  size_t max_target_bytes = 16 * 1024;  // 414 above
  int64_t max_body_bytes = 32 << 20;    // on the wire and decoded
};

class RequestParser {
 public:
  enum class State { kNeedMore, kComplete, kError };

  explicit RequestParser(HttpLimits limits = {}) : limits_(limits) {}

  // Consumes bytes of one request; returns how many. Once the state is kComplete or kError it
  // consumes nothing more until reset().
  size_t feed(std::string_view data);

  State state() const { return state_; }
  // Some byte of a request arrived (idle keep-alive connections have none).
  bool started() const { return started_; }
  // The header section is complete (the body, if any, is being read).
  bool headers_done() const { return phase_ > Phase::kHead; }
  // The client sent "Expect: 100-continue" and waits for the interim response before the body.
  bool expects_continue() const { return expect_continue_ && phase_ != Phase::kDone; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // The parsed request (after kComplete); leaves the parser to be reset().
  HttpRequest& request() { return request_; }

  void reset();

 private:
  enum class Phase { kHead, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone };

  void fail(int status, std::string message);
  void parse_head();                            // head_ holds the whole header section
  bool parse_request_line(std::string_view line);
  bool parse_field_line(std::string_view line);
  bool apply_framing();                         // Content-Length / Transfer-Encoding
  void finish();                                // content decoding, then kComplete
  size_t feed_head(std::string_view data);
  size_t feed_line(std::string_view data, size_t max_line);  // into line_; true line when \n
  void on_chunk_size_line();
  void on_trailer_line();

  HttpLimits limits_;
  State state_ = State::kNeedMore;
  Phase phase_ = Phase::kHead;
  bool started_ = false;
  bool expect_continue_ = false;
  bool line_complete_ = false;
  std::string head_;   // header section so far
  std::string line_;   // chunk size or trailer line so far
  int64_t remaining_ = 0;      // body or chunk bytes still to read
  size_t trailer_bytes_ = 0;
  HttpRequest request_;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace ls
