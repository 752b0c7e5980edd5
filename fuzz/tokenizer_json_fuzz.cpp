// tokenizer.json: the pipeline it describes (added tokens, normalizer, pre-tokenizers with their
// regexes, BPE vocabulary and merges, post-processor), then encoding, decoding and streaming
// with the tokenizer it gives.
#include <meganeura/tokenizer.h>

#include "harness.h"

namespace mn::fuzz {
namespace {

constexpr std::string_view kText =
    "Hello world! It's 2024, isn't it?\n\n  <|im_start|>user déjà vu 東京 🙂 <|eot_id|>";

void use(const Tokenizer& tok) {
  parse_or_refuse([&] {
    const std::vector<int32_t> ids = tok.encode(kText);
    for (int32_t id : ids)
      require(id >= 0 && id < tok.vocab_size(), "encode: an id outside the vocabulary");
    tok.decode(ids);
    TokenStream stream(tok);
    for (int32_t id : ids) stream.push(id);
    stream.flush();
  });
  for (int32_t id = -1; id <= std::min(tok.vocab_size(), 300); ++id) {
    parse_or_refuse([&] {
      const std::vector<int32_t> one = {id};
      tok.decode(one);
      tok.decode_bytes(one, true);
      tok.token(id);
      tok.is_special(id);
    });
  }
  tok.bos_id();
  tok.eos_id();
  tok.stop_ids();
}

void fuzz_tokenizer_json(std::span<const uint8_t> data) {
  parse_or_refuse([&] { use(Tokenizer::from_json(as_text(data), {}, "fuzz/tokenizer.json")); });
}

const Registration registered("tokenizer_json", fuzz_tokenizer_json);

}  // namespace
}  // namespace mn::fuzz
