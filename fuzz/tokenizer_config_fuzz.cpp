// tokenizer_config.json over a fixed tokenizer.json (seed-all_specials.json of the
// tokenizer_json corpus: GPT-2's with the special tokens of every family): special tokens, the
// chat template's family, and a conversation laid out and encoded.
#include <fstream>
#include <iterator>

#include <meganeura/tokenizer.h>

#include "harness.h"

namespace mn::fuzz {
namespace {

const std::string& tokenizer_json() {
  static const std::string text = [] {
    std::ifstream f(std::string(MN_FUZZ_CORPUS_DIR) + "/tokenizer_json/seed-all_specials.json");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    require(!s.empty(), "the fixed tokenizer.json is missing from the corpus");
    return s;
  }();
  return text;
}

void fuzz_tokenizer_config(std::span<const uint8_t> data) {
  parse_or_refuse([&] {
    const Tokenizer tok =
        Tokenizer::from_json(tokenizer_json(), as_text(data), "fuzz/tokenizer_config.json");
    tok.bos_id();
    tok.eos_id();
    tok.pad_id();
    tok.add_bos_token();
    for (int32_t id : tok.stop_ids()) require(id >= 0 && id < tok.vocab_size(), "stop_ids");
    const std::vector<ChatMessage> chat = {
        {"system", "Be brief."}, {"user", "Hi there"}, {"assistant", "Hello!"}, {"user", "Bye"}};
    parse_or_refuse([&] {
      tok.format_chat(chat, true);
      tok.encode_chat(chat, false);
    });
  });
}

const Registration registered("tokenizer_config", fuzz_tokenizer_config);

}  // namespace
}  // namespace mn::fuzz
