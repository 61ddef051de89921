#include "server/http_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "server/http_content_coding.h"

namespace ls {

namespace {

// RFC 9110 5.6.2 tchar.
bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated list `value` holds `token` (Connection: keep-alive, close).
bool list_has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (iequals(trim_ows(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void RequestParser::reset() {
  state_ = State::kNeedMore;
  phase_ = Phase::kHead;
  started_ = false;
  expect_continue_ = false;
  line_complete_ = false;
  head_.clear();
  line_.clear();
  remaining_ = 0;
  trailer_bytes_ = 0;
  request_ = HttpRequest{};
  error_status_ = 0;
  error_message_.clear();
}

void RequestParser::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

size_t RequestParser::feed(std::string_view data) {
  size_t used = 0;
  while (used < data.size() && state_ == State::kNeedMore) {
    const std::string_view rest = data.substr(used);
    switch (phase_) {
      case Phase::kHead:
        used += feed_head(rest);
        break;
      case Phase::kBody:
      case Phase::kChunkData: {
        const size_t take = static_cast<size_t>(std::min<int64_t>(remaining_, rest.size()));
        request_.body.append(rest.data(), take);
        remaining_ -= static_cast<int64_t>(take);
        used += take;
        if (remaining_ == 0) {
          if (phase_ == Phase::kBody) {
            finish();
          } else {
            phase_ = Phase::kChunkDataEnd;
          }
        }
        break;
      }
      case Phase::kChunkSize:
        used += feed_line(rest, 1024);
        if (line_complete_) on_chunk_size_line();
        break;
      case Phase::kChunkDataEnd:
        used += feed_line(rest, 2);
        if (line_complete_) {
          if (!line_.empty()) {
            fail(400, "Chunk data is not followed by CRLF");
          } else {
            phase_ = Phase::kChunkSize;
          }
          line_.clear();
          line_complete_ = false;
        }
        break;
      case Phase::kTrailers:
        used += feed_line(rest, limits_.max_header_bytes);
        if (line_complete_) on_trailer_line();
        break;
      case Phase::kDone:
        return used;
    }
  }
  return used;
}

size_t RequestParser::feed_head(std::string_view data) {
  size_t i = 0;
  for (; i < data.size(); ++i) {
    const char c = data[i];
    started_ = true;
    // RFC 9112 2.2: empty lines before the request line are ignored.
    if (head_.empty() && (c == '\r' || c == '\n')) continue;
    head_.push_back(c);
    if (head_.size() > limits_.max_header_bytes) {
      fail(431, fmt::format("Request header section is larger than {} bytes",
                            limits_.max_header_bytes));
      return i + 1;
    }
    if (c == '\n') {
      const size_t n = head_.size();
      const bool end = (n >= 2 && head_[n - 2] == '\n') ||
                       (n >= 3 && head_[n - 2] == '\r' && head_[n - 3] == '\n');
      if (end) {
        parse_head();
        return i + 1;
      }
    }
  }
  return i;
}

size_t RequestParser::feed_line(std::string_view data, size_t max_line) {
  const size_t nl = data.find('\n');
  const size_t take = nl == std::string_view::npos ? data.size() : nl + 1;
  if (line_.size() + take > max_line + 2) {
    fail(400, "Request body framing line is too long");
    return take;
  }
  line_.append(data.data(), take);
  if (nl != std::string_view::npos) {
    line_.pop_back();
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    line_complete_ = true;
  }
  return take;
}

void RequestParser::parse_head() {
  std::vector<std::string_view> lines;
  std::string_view rest(head_);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos) {
      return fail(400, "Request header section has a bare CR");
    }
    if (line.empty()) break;  // the blank line that ends the section
    lines.push_back(line);
  }
  if (lines.empty()) return fail(400, "Request has no request line");
  if (!parse_request_line(lines[0])) return;
  if (lines.size() - 1 > limits_.max_headers) {
    return fail(431, fmt::format("Request has more than {} header fields", limits_.max_headers));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (!parse_field_line(lines[i])) return;
  }
  head_.clear();
  head_.shrink_to_fit();
  apply_framing();
}

bool RequestParser::parse_request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    fail(400, "Malformed request line");
    return false;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) {
    fail(400, "Malformed request method");
    return false;
  }
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
      })) {
    fail(400, "Malformed request target");
    return false;
  }
  if (target.size() > limits_.max_target_bytes) {
    fail(414, "Request URI too long");
    return false;
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    fail(400, "Malformed HTTP version");
    return false;
  }
  if (version[5] != '1') {
    fail(505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)");
    return false;
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.path = std::string(target.substr(0, target.find('?')));
  request_.version_minor = version[7] - '0';
  return true;
}

bool RequestParser::parse_field_line(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') {
    fail(400, "Obsolete line folding in header fields is not accepted");
    return false;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    fail(400, "Header field line without a colon");
    return false;
  }
  const std::string_view name = line.substr(0, colon);
  if (!is_token(name)) {
    fail(400, "Malformed header field name");
    return false;
  }
  const std::string_view value = trim_ows(line.substr(colon + 1));
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) {
      fail(400, "Header field value has a control character");
      return false;
    }
  }
  request_.headers.emplace_back(std::string(name), std::string(value));
  return true;
}

bool RequestParser::apply_framing() {
  const HttpHeaders& headers = request_.headers;
  const std::string_view connection = find_header(headers, "Connection");
  request_.keep_alive = request_.version_minor >= 1 ? !list_has_token(connection, "close")
                                                    : list_has_token(connection, "keep-alive");

  bool has_length = false;
  int64_t length = 0;
  bool chunked = false;
  for (const auto& [key, value] : headers) {
    if (iequals(key, "Transfer-Encoding")) {
      if (!iequals(trim_ows(value), "chunked") || chunked) {
        fail(501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked is)", value));
        return false;
      }
      chunked = true;
    } else if (iequals(key, "Content-Length")) {
      const std::string_view v = value;
      if (v.empty() || v.size() > 19 ||
          !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        fail(400, fmt::format("Invalid Content-Length '{}'", value.substr(0, 64)));
        return false;
      }
      uint64_t parsed = 0;
      for (const char c : v) parsed = parsed * 10 + static_cast<uint64_t>(c - '0');
      if (parsed > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(400, fmt::format("Invalid Content-Length '{}'", value));
        return false;
      }
      if (has_length && static_cast<int64_t>(parsed) != length) {
        fail(400, "Conflicting Content-Length header fields");
        return false;
      }
      has_length = true;
      length = static_cast<int64_t>(parsed);
    }
  }
  if (chunked && has_length) {
    fail(400, "Both Content-Length and Transfer-Encoding are set");
    return false;
  }
  if (has_length && length > limits_.max_body_bytes) {
    fail(413, fmt::format("Request body is larger than the limit of {} bytes",
                          limits_.max_body_bytes));
    return false;
  }
  const bool has_body = chunked || length > 0;
  if (const std::string_view expect = find_header(headers, "Expect"); !expect.empty()) {
    if (!iequals(expect, "100-continue")) {
      fail(417, fmt::format("Unsupported expectation '{}'", expect.substr(0, 64)));
      return false;
    }
    expect_continue_ = has_body;
  }
  if (chunked) {
    phase_ = Phase::kChunkSize;
  } else if (length > 0) {
    phase_ = Phase::kBody;
    remaining_ = length;
    // Reserve what was declared (already checked against the limit), so the body is not
    // copied as it grows.
    request_.body.reserve(static_cast<size_t>(length));
  } else {
    finish();
  }
  return true;
}

void RequestParser::on_chunk_size_line() {
  const std::string line = std::move(line_);
  line_.clear();
  line_complete_ = false;
  size_t i = 0;
  uint64_t size = 0;
  for (; i < line.size() && hex_value(line[i]) >= 0; ++i) {
    if (i >= 15) return fail(400, "Chunk size is too large");
    size = size * 16 + static_cast<uint64_t>(hex_value(line[i]));
  }
  if (i == 0) return fail(400, "Malformed chunk size line");
  // What may follow the size: optional whitespace and chunk extensions (ignored).
  const std::string_view tail = trim_ows(std::string_view(line).substr(i));
  if (!tail.empty() && tail.front() != ';') return fail(400, "Malformed chunk size line");
  if (static_cast<int64_t>(request_.body.size()) + static_cast<int64_t>(size) >
      limits_.max_body_bytes) {
    return fail(413, fmt::format("Request body is larger than the limit of {} bytes",
                                 limits_.max_body_bytes));
  }
  if (size == 0) {
    phase_ = Phase::kTrailers;
  } else {
    phase_ = Phase::kChunkData;
    remaining_ = static_cast<int64_t>(size);
  }
}

void RequestParser::on_trailer_line() {
  const std::string line = std::move(line_);
  line_.clear();
  line_complete_ = false;
  if (line.empty()) return finish();
  trailer_bytes_ += line.size() + 2;
  if (trailer_bytes_ > limits_.max_header_bytes) {
    return fail(431, "Request trailer section is too large");
  }
  if (line.front() == ' ' || line.front() == '\t' || line.find(':') == std::string::npos ||
      !is_token(std::string_view(line).substr(0, line.find(':')))) {
    return fail(400, "Malformed trailer field line");
  }
  // Trailer fields are read and dropped: nothing in the API uses them.
}

void RequestParser::finish() {
  const std::string_view coding = find_header(request_.headers, "Content-Encoding");
  if (!coding.empty()) {
    const DecodeOutcome outcome = decode_content(coding, limits_.max_body_bytes, &request_.body);
    if (outcome.status != 0) return fail(outcome.status, outcome.message);
  }
  phase_ = Phase::kDone;
  state_ = State::kComplete;
}

}  // namespace ls
