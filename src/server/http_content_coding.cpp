#include "server/http_content_coding.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>

#include "server/http_message.h"

namespace ls {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// window_bits as zlib's inflateInit2 takes them: 15 + 16 gzip, 15 zlib, -15 raw deflate.
DecodeOutcome inflate_body(int window_bits, int64_t max_decoded_bytes, std::string* body) {
  z_stream zs{};
  if (inflateInit2(&zs, window_bits) != Z_OK) return {500, "cannot start the zlib decoder"};
  std::string out;
  std::array<unsigned char, 64 * 1024> chunk{};
  const auto* in = reinterpret_cast<const unsigned char*>(body->data());
  size_t in_left = body->size();
  DecodeOutcome outcome;
  int rc = Z_OK;
  while (true) {
    const auto feed = static_cast<uInt>(std::min<size_t>(in_left, 1u << 30));
    zs.next_in = const_cast<unsigned char*>(in);
    zs.avail_in = feed;
    zs.next_out = chunk.data();
    zs.avail_out = static_cast<uInt>(chunk.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    const size_t consumed = feed - zs.avail_in;
    in += consumed;
    in_left -= consumed;
    const size_t produced = chunk.size() - zs.avail_out;
    if (static_cast<int64_t>(out.size() + produced) > max_decoded_bytes) {
      outcome = {413, fmt::format("Request body decodes to more than the limit of {} bytes",
                                  max_decoded_bytes)};
      break;
    }
    out.append(reinterpret_cast<const char*>(chunk.data()), produced);
    if (rc == Z_STREAM_END) {
      // Trailing bytes after the stream (a second gzip member, garbage) are refused rather
      // than silently dropped.
      if (in_left != 0) outcome = {400, "Request body has data after the end of its encoding"};
      break;
    }
    if (rc != Z_OK) {
      outcome = {400, "Request body is not valid for its Content-Encoding"};
      break;
    }
    if (produced == 0 && consumed == 0) {
      outcome = {400, "Request body ends before its Content-Encoding stream does"};
      break;
    }
  }
  inflateEnd(&zs);
  if (outcome.status == 0) body->swap(out);
  return outcome;
}

}  // namespace

DecodeOutcome decode_content(std::string_view coding, int64_t max_decoded_bytes,
                             std::string* body) {
  coding = trim(coding);
  if (coding.empty() || iequals(coding, "identity")) return {};
  if (iequals(coding, "gzip") || iequals(coding, "x-gzip")) {
    return inflate_body(15 + 16, max_decoded_bytes, body);
  }
  if (iequals(coding, "deflate")) {
    // RFC 9110 says zlib format; some clients send raw deflate, told apart by the zlib header
    // check (CMF*256 + FLG is a multiple of 31, CM = 8).
    const bool zlib_header = body->size() >= 2 &&
                             (static_cast<unsigned char>((*body)[0]) & 0x0f) == 8 &&
                             ((static_cast<unsigned char>((*body)[0]) << 8) |
                              static_cast<unsigned char>((*body)[1])) % 31 == 0;
    return inflate_body(zlib_header ? 15 : -15, max_decoded_bytes, body);
  }
  return {415, fmt::format("Unsupported Content-Encoding '{}' (supported: gzip, deflate, identity)",
                           coding)};
}

}  // namespace ls
