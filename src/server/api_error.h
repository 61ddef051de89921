#pragma once
// Errors as vLLM serves them: an HTTP status plus the nested body
//   {"error":{"message":"…","type":"BadRequestError","param":null,"code":400}}
// Library code reports failures as Status; the StatusCode decides the HTTP status here, so the
// mapping lives in one place.

#include <string>

#include "core/status.h"

namespace ls {

struct ApiError {
  int http_status = 500;
  std::string type;  // "BadRequestError", "NotFoundError", ...
  std::string message;

  // The nested JSON body, one line.
  std::string body() const;
  // The SSE event for an error after the 200 headers were sent: "data: {…}\n\n".
  std::string sse_event() const;
};

// The OpenAI/vLLM error type name for an HTTP status ("BadRequestError" for 400, ...).
const char* error_type_for_status(int http_status);

ApiError make_api_error(int http_status, std::string message);
// kInvalidArgument / kOutOfRange → 400, kNotFound → 404, kUnimplemented → 501,
// kResourceExhausted / kFailedPrecondition → 503, anything else → 500.
ApiError api_error_from_status(const Status& status);

}  // namespace ls
