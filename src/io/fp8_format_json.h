#pragma once
// Internal to io/: parses config.json's quantization_config (the object) into an
// Fp8CheckpointFormat, refusing every format io/fp8_format.h does not describe.

#include "core/status.h"
#include "io/fp8_format.h"
#include "io/json_util.h"

namespace ls {

Result<Fp8CheckpointFormat> parse_fp8_format(const io_json::Json& quantization_config,
                                             std::string_view source);

}  // namespace ls
