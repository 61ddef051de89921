#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace ls {

const char* error_type_for_status(int http_status) {
  switch (http_status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 403:
      return "PermissionDeniedError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 413:
      return "PayloadTooLargeError";
    case 422:
      return "UnprocessableEntityError";
    case 429:
      return "RateLimitError";
    case 501:
      return "NotImplementedError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return http_status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

ApiError make_api_error(int http_status, std::string message) {
  return ApiError{http_status, error_type_for_status(http_status), std::move(message)};
}

ApiError api_error_from_status(const Status& status) {
  int http_status = 500;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      http_status = 400;
      break;
    case StatusCode::kNotFound:
      http_status = 404;
      break;
    case StatusCode::kUnimplemented:
      http_status = 501;
      break;
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition:
      http_status = 503;
      break;
    default:
      http_status = 500;
      break;
  }
  return make_api_error(http_status, status.message());
}

std::string ApiError::body() const {
  nlohmann::ordered_json error = {
      {"message", message}, {"type", type}, {"param", nullptr}, {"code", http_status}};
  nlohmann::ordered_json wrapper = {{"error", std::move(error)}};
  return wrapper.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ApiError::sse_event() const {
  return "data: " + body() + "\n\n";
}

}  // namespace ls
