#pragma once
// The HTTP/1.1 request and response as the transport hands them to route handlers and takes them
// back. Header names are kept as received; lookups ignore ASCII case (RFC 9110 5.1).

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ls {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive equality (header names, tokens such as "chunked").
bool iequals(std::string_view a, std::string_view b);
// The first value of header `name`, or empty.
std::string_view find_header(const HttpHeaders& headers, std::string_view name);
bool has_header(const HttpHeaders& headers, std::string_view name);

struct HttpRequest {
  std::string method;
  std::string target;  // as sent: path plus optional "?query"
  std::string path;    // target up to '?'
  int version_minor = 1;  // HTTP/1.<minor>
  HttpHeaders headers;
  std::string body;  // decoded: transfer coding (chunked) and content coding (gzip, deflate) undone
  bool keep_alive = true;
  // True once the client closed or reset its connection (polls the socket; never blocks). Set by
  // the transport; long handlers call it to stop work nobody will read.
  std::function<bool()> client_gone = [] { return false; };

  std::string_view header(std::string_view name) const { return find_header(headers, name); }
};

// Where a streaming handler writes its body (one HTTP chunk per write).
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // False when the client is gone or the write timed out; the stream must end then.
  virtual bool write(std::string_view data) = 0;
  // Ends the body (the last chunk). The provider is not called again.
  virtual void done() = 0;
  // True once the client closed or reset its connection.
  virtual bool client_gone() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  HttpHeaders headers;  // extra headers (Allow, WWW-Authenticate, ...)
  bool close_connection = false;
  // Streaming: called until it calls sink.done() or returns false (drop the connection); the
  // body is sent with chunked transfer coding. on_stream_end(success) runs once afterwards.
  std::function<bool(StreamSink&)> stream;
  std::function<void(bool)> on_stream_end;

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

// The reason phrase for a status ("Not Found" for 404).
const char* http_reason(int status);

// The status line and headers (ending with the blank line) of `res`. `body_size`: the
// Content-Length; kChunkedBody: chunked transfer coding; kUntilClose: neither (HTTP/1.0
// streams, delimited by closing the connection).
inline constexpr int64_t kChunkedBody = -1;
inline constexpr int64_t kUntilClose = -2;
std::string serialize_response_head(const HttpResponse& res, int64_t body_size, bool keep_alive);

}  // namespace ls
