#pragma once
// The BPE model over byte-level pieces: merges applied by rank, lowest first, every occurrence
// left to right (as GPT-2's encoder and Hugging Face's BPE do), with a cache of pieces.
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mn::io {

struct BpeMerge {
  uint32_t rank;
  int32_t merged;  // the id of the two tokens joined
};

class Bpe {
 public:
  // `vocab`: byte-level spelling -> id. `unk_token` stands for a byte without a token (never
  // needed with a complete byte-level alphabet; as in Hugging Face, such a byte is dropped when
  // there is no unk_token, and an unk_token missing from the vocabulary is an error only then).
  // `merges`: pairs of spellings in rank order; a merge naming a token outside the vocabulary
  // throws FormatError naming `source` and the merge.
  Bpe(std::unordered_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
      std::optional<std::string> unk_token, const std::string& source);

  // Appends the ids of one pre-tokenized piece (raw bytes, not yet byte-level spelled).
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  void merge(std::vector<int32_t>& symbols) const;
  static uint64_t key(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, BpeMerge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // -1: the byte's spelling is not in the vocabulary
  bool ignore_merges_;
  std::optional<std::string> unk_token_;
  std::optional<int32_t> unk_id_;  // unk_token's id, when the vocabulary has it
  std::string source_;

  static constexpr size_t kCacheLimit = 100000;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace mn::io
