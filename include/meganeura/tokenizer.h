#pragma once
// Hugging Face byte-level BPE tokenizers (GPT-2/SmolLM2, Llama 3, Qwen 2/3): tokenizer.json and
// tokenizer_config.json read as `tokenizers` and `transformers` read them, encoding to the same
// ids, decoding (whole or streamed token by token) and chat formatting.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/error.h>

namespace mn {

// The tokenizer file asks for something this implementation does not support (a WordPiece or
// Unigram model, an unknown normalizer, byte_fallback...): the message names the file and the
// type or field.
class UnsupportedTokenizerError : public FormatError {
 public:
  using FormatError::FormatError;
};

// A pre-tokenizer regex uses syntax outside the supported subset or is malformed: the message
// names the pattern and the position.
class RegexError : public FormatError {
 public:
  using FormatError::FormatError;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  // tokenizer.json and, when present, tokenizer_config.json of a model directory.
  static Tokenizer from_dir(const std::filesystem::path& dir);
  // An empty `config` path means no tokenizer_config.json.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json,
                             const std::filesystem::path& config = {});
  // The same from file contents; `source` names them in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             const std::string& source = "tokenizer.json");

  // Special tokens written in the text are always recognized; add_special_tokens applies the
  // post-processor (Llama 3 prepends <|begin_of_text|>).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The text as transformers' tokenizer.decode gives it: invalid UTF-8 (a sequence cut between
  // tokens) becomes U+FFFD, and where tokenizer_config.json sets clean_up_tokenization_spaces
  // the spaces before punctuation and English contractions are removed (" ." -> ".",
  // " n't" -> "n't", see clean_up_tokenization_spaces()).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // The raw bytes the ids stand for, before any UTF-8 repair.
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Whether decode() cleans up spaces (tokenizer_config.json's clean_up_tokenization_spaces).
  bool cleans_up_spaces() const;

  // Largest id + 1 over the model vocabulary and the added tokens.
  int32_t vocab_size() const;
  std::optional<int32_t> token_id(std::string_view token) const;
  // The token's string as the vocabulary spells it (byte-level characters); nullopt if unknown.
  std::optional<std::string> token(int32_t id) const;
  bool is_special(int32_t id) const;

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  // tokenizer_config.json's add_bos_token (false when absent). The post-processor of
  // tokenizer.json is what encode() applies; this flag is informational.
  bool add_bos_token() const;
  // Ids that end generation: eos and whichever of <|im_end|>, <|eot_id|>, <|eom_id|>,
  // <|endoftext|>, <|end_of_text|> the vocabulary has. Sorted, no duplicates.
  const std::vector<int32_t>& stop_ids() const;

  // The chat template's text for a conversation, for the two template families in use: ChatML
  // (<|im_start|>role\ncontent<|im_end|>\n; SmolLM2, Qwen; with the template's default system
  // message when the conversation has none) and Llama 3 headers (contents trimmed where the
  // template trims them; Llama 3.1's system header with knowledge cutoff and date). Encode it with
  // add_special_tokens = false (the template already holds bos), or call encode_chat.
  // Throws UnsupportedTokenizerError for a template of neither kind or none.
  std::string format_chat(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::vector<int32_t> encode_chat(std::span<const ChatMessage> messages,
                                   bool add_generation_prompt) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class TokenStream;
};

// Streaming decode: push ids as they are generated, get the text they complete. Bytes of a UTF-8
// sequence not yet complete are held back until a later token completes it (or flush()); with
// the tokenizer's space clean-up, so is a tail that could begin a clean-up pattern (" ", " n'"),
// so that the pieces joined are always decode() of the ids.
class TokenStream {
 public:
  explicit TokenStream(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  // The text completed by this id (possibly empty).
  std::string push(int32_t id);
  // Whatever is held back, invalid sequences replaced by U+FFFD; the stream starts over.
  std::string flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
  std::string text_;     // the complete text so far (with the clean-up: what may still change)
};

// transformers' clean_up_tokenization: " ." " ?" " !" " ," " ' " " n't" " 'm" " 's" " 've"
// " 're" lose their space, in that order, each replaced throughout.
std::string clean_up_tokenization(std::string text);

}  // namespace mn
