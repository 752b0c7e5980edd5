#pragma once
// What a loaded tokenizer holds: the pipeline of tokenizer.json (added tokens, normalizer,
// pre-tokenizer steps, BPE model, post-processor) and tokenizer_config.json's special tokens and
// chat template.
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <meganeura/tokenizer.h>

#include "io/added_tokens.h"
#include "io/bpe.h"
#include "io/chat_template.h"
#include "io/regex.h"

namespace mn::io {

struct PreTokenizerStep {
  // Split: pieces are the regex matches and the stretches between them (behavior Isolated).
  // ByteLevel: a space prepended to each piece (add_prefix_space) and, with use_regex, a split
  // on GPT-2's pattern; the byte-level spelling itself is done by the BPE model.
  enum class Kind { split, byte_level } kind;
  std::shared_ptr<const Regex> regex;  // null for ByteLevel without use_regex
  bool add_prefix_space = false;
};

struct TokenizerConfig {
  std::string source;  // the file, for messages; empty without one
  std::optional<int32_t> bos_id, eos_id, pad_id;
  std::string bos_text;  // what {{ bos_token }} writes
  bool add_bos_token = false;
  // transformers' clean_up_tokenization_spaces (absent: false, as transformers 4.45 and later).
  bool clean_up_spaces = false;
  ChatTemplate chat;
};

// Parsing entry points over bytes (no file access), so that they can be fuzzed.
void parse_tokenizer_json(std::string_view json, const std::string& source, Tokenizer::Impl& out);
void parse_tokenizer_config(std::string_view json, const std::string& source, Tokenizer::Impl& out);

}  // namespace mn::io

namespace mn {

struct Tokenizer::Impl {
  std::string source;
  bool nfc = false;
  io::AddedTokenMatcher raw_added;         // matched in the text as given
  io::AddedTokenMatcher normalized_added;  // matched after normalization
  std::vector<io::PreTokenizerStep> pre_tokenizer;
  std::unique_ptr<io::Bpe> bpe;
  std::vector<int32_t> post_prefix, post_suffix;  // the post-processor, for one sequence

  // Indexed by id; ids without a token have an empty spelling and `known` false.
  std::vector<std::string> spelling;  // as in the vocabulary (byte-level) or added content
  std::vector<std::string> bytes;     // what the id decodes to
  std::vector<uint8_t> known, special;
  std::unordered_map<std::string, int32_t> added_by_content;

  io::TokenizerConfig config;
  std::vector<int32_t> stop_ids;

  std::optional<int32_t> find(std::string_view token) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const;
  void finish();  // fills stop_ids once vocabulary and config are in
};

}  // namespace mn
