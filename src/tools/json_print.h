#pragma once
// JSON string quoting for command output without pulling a JSON library into every command.
// Invalid UTF-8 bytes become U+FFFD so the output always parses.

#include <string>
#include <string_view>

namespace ls {

std::string json_string(std::string_view text);

}  // namespace ls
