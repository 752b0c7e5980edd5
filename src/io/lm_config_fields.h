#pragma once
// The fields of a causal LM's config as an object inside another file (a vision-language
// model's text_config), with errors naming that file and the object's path.
#include <string>

#include <meganeura/hf.h>

#include "io/json_fields.h"

namespace mn::io {

LmConfig parse_lm_config_fields(const JsonFields& fields, const std::string& json_text);

}  // namespace mn::io
