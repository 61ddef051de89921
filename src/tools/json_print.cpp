#include "tools/json_print.h"

#include <nlohmann/json.hpp>

namespace ls {

std::string json_string(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace);
}

}  // namespace ls
