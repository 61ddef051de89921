#include "server/http_message.h"

#include <fmt/format.h>

namespace ls {

namespace {

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view find_header(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (iequals(key, name)) return value;
  }
  return {};
}

bool has_header(const HttpHeaders& headers, std::string_view name) {
  for (const auto& header : headers) {
    if (iequals(header.first, name)) return true;
  }
  return false;
}

const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status >= 500 ? "Server Error" : status >= 400 ? "Client Error" : "OK";
  }
}

std::string serialize_response_head(const HttpResponse& res, int64_t body_size, bool keep_alive) {
  std::string head = fmt::format("HTTP/1.1 {} {}\r\n", res.status, http_reason(res.status));
  if (!res.content_type.empty()) head += fmt::format("Content-Type: {}\r\n", res.content_type);
  for (const auto& [key, value] : res.headers) head += fmt::format("{}: {}\r\n", key, value);
  if (body_size == kChunkedBody) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (body_size >= 0) {
    head += fmt::format("Content-Length: {}\r\n", body_size);
  }
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  head += "\r\n";
  return head;
}

}  // namespace ls
