#pragma once
// Errors are values at library boundaries: every fallible call returns Status or Result<T>.
// A Status carries a code (for callers that branch, e.g. the server mapping to HTTP codes) and
// one human-readable message that names the file / tensor / field at fault.

#include <fmt/format.h>

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace ls {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad user input (CLI flag, request field)
  kNotFound,            // missing file, tensor, token
  kOutOfRange,          // index / length beyond a limit (e.g. prompt longer than the context)
  kDataLoss,            // a file is corrupt or inconsistent
  kUnimplemented,       // valid input we do not support (unknown architecture, dtype)
  kResourceExhausted,   // out of KV pages, memory
  kFailedPrecondition,  // call made in the wrong state
  kCancelled,           // request aborted (client gone)
  kIoError,             // the OS refused (open, mmap, read)
  kInternal,            // a bug: an invariant was violated
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code: message", for logs and CLI errors.
  std::string to_string() const;
  // Prefix the message with where the failure happened: "reading X: <message>".
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status make_status(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
#define LS_STATUS_FACTORY(fn, code)                                       \
  template <typename... Args>                                             \
  Status fn(fmt::format_string<Args...> f, Args&&... args) {              \
    return Status(StatusCode::code, fmt::format(f, std::forward<Args>(args)...)); \
  }
LS_STATUS_FACTORY(invalid_argument, kInvalidArgument)
LS_STATUS_FACTORY(not_found, kNotFound)
LS_STATUS_FACTORY(out_of_range, kOutOfRange)
LS_STATUS_FACTORY(data_loss, kDataLoss)
LS_STATUS_FACTORY(unimplemented, kUnimplemented)
LS_STATUS_FACTORY(resource_exhausted, kResourceExhausted)
LS_STATUS_FACTORY(failed_precondition, kFailedPrecondition)
LS_STATUS_FACTORY(cancelled, kCancelled)
LS_STATUS_FACTORY(io_error, kIoError)
LS_STATUS_FACTORY(internal_error, kInternal)
#undef LS_STATUS_FACTORY

// Result<T>: a T or a non-ok Status (C++23's std::expected is not in GCC 12's C++20).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(implicit)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

#define LS_CONCAT_INNER(a, b) a##b
#define LS_CONCAT(a, b) LS_CONCAT_INNER(a, b)

#define LS_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::ls::Status ls_status_ = (expr);          \
    if (!ls_status_.ok()) return ls_status_;   \
  } while (0)

#define LS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// LS_ASSIGN_OR_RETURN(auto x, make_x()); — declares x or returns the error.
#define LS_ASSIGN_OR_RETURN(lhs, expr) \
  LS_ASSIGN_OR_RETURN_IMPL(LS_CONCAT(ls_result_, __LINE__), lhs, expr)

}  // namespace ls
