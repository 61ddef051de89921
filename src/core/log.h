#pragma once
// Logging goes through spdlog to stderr, so stdout stays clean for command output
// (generated text, JSON). LS_LOG_LEVEL=debug|info|warn|error overrides the default (info).

#include <spdlog/spdlog.h>

namespace ls {

// Installs the stderr logger once; safe to call repeatedly.
void init_logging();

}  // namespace ls

#define LS_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LS_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LS_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LS_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
