// generation_config.json: sampling defaults and special token ids, and the file written back.
#include <meganeura/hf.h>

#include "harness.h"

namespace mn::fuzz {
namespace {

void fuzz_generation_config(std::span<const uint8_t> data) {
  parse_or_refuse([&] {
    const GenerationConfig c =
        parse_generation_config(std::string(as_text(data)), "fuzz/generation_config.json");
    const GenerationConfig again =
        parse_generation_config(generation_config_json(c), "fuzz/written.json");
    require(again.do_sample == c.do_sample && again.top_k == c.top_k &&
                again.eos_token_id == c.eos_token_id,
            "generation_config_json: the written config reads back differently");
  });
}

const Registration registered("generation_config", fuzz_generation_config);

}  // namespace
}  // namespace mn::fuzz
