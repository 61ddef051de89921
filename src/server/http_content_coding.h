#pragma once
// Content codings of request bodies (RFC 9110 8.4): identity, gzip (x-gzip) and deflate (zlib
// format, and raw deflate as some clients send it), decoded with zlib under a limit on the
// decoded size, so a small compressed body cannot expand past the payload limit in memory.

#include <cstdint>
#include <string>
#include <string_view>

namespace ls {

struct DecodeOutcome {
  int status = 0;       // 0: decoded; else the HTTP status to answer (400, 413, 415)
  std::string message;  // why, when status != 0
};

// Replaces `body` by its decoding under `coding` (the Content-Encoding value; empty = identity).
// Stops with 413 as soon as the decoded size would pass `max_decoded_bytes`.
DecodeOutcome decode_content(std::string_view coding, int64_t max_decoded_bytes, std::string* body);

}  // namespace ls
