// config.json of a Hugging Face causal LM: LmConfig, the parameters it implies, the rotary
// frequencies, and the config written back and read again.
#include <cmath>

#include <meganeura/causal_lm.h>
#include <meganeura/hf.h>

#include "harness.h"

namespace mn::fuzz {
namespace {

void fuzz_lm_config(std::span<const uint8_t> data) {
  parse_or_refuse([&] {
    const LmConfig c = parse_lm_config(std::string(as_text(data)), "fuzz/config.json");
    for (const ParameterSpec& p : lm_parameters(c)) {
      for (int64_t d : p.shape) require(d > 0, "lm_parameters: a dimension below 1");
    }
    // The frequencies take head_dim / 2 doubles: computed for the head sizes models have, not
    // for every size the parser accepts (up to 2^31 - 1, gigabytes of them).
    if (c.head_dim <= 65536) {
      for (double f : rope_inv_freq(c)) require(std::isfinite(f), "rope_inv_freq: not finite");
    }
    const LmConfig again = parse_lm_config(lm_config_json(c), "fuzz/written.json");
    require(again.vocab_size == c.vocab_size && again.hidden_size == c.hidden_size &&
                again.num_hidden_layers == c.num_hidden_layers,
            "lm_config_json: the written config reads back differently");
  });
}

const Registration registered("lm_config", fuzz_lm_config);

}  // namespace
}  // namespace mn::fuzz
