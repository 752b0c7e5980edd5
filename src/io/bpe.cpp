#include "io/bpe.h"

#include <optional>

#include <meganeura/error.h>

#include "io/byte_level.h"
#include "io/utf8.h"

namespace mn::io {

Bpe::Bpe(std::unordered_map<std::string, int32_t> vocab,
         const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
         std::optional<std::string> unk_token, const std::string& source)
    : vocab_(std::move(vocab)),
      ignore_merges_(ignore_merges),
      unk_token_(std::move(unk_token)),
      source_(source) {
  if (unk_token_) {
    auto it = vocab_.find(*unk_token_);
    if (it != vocab_.end()) unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_to_char(static_cast<uint8_t>(b)));
    auto it = vocab_.find(s);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end()) {
      const std::string& missing = ia == vocab_.end() ? a : ib == vocab_.end() ? b : a + b;
      throw FormatError(source + ": model.merges[" + std::to_string(r) + "] \"" + a + " " + b +
                        "\" refers to \"" + missing + "\", which is not in model.vocab");
    }
    // A repeated merge keeps its first (best) rank.
    merges_.try_emplace(key(ia->second, ib->second),
                        BpeMerge{static_cast<uint32_t>(r), im->second});
  }
}

void Bpe::merge(std::vector<int32_t>& s) const {
  while (s.size() > 1) {
    uint32_t best = UINT32_MAX;
    int32_t merged = -1;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = merges_.find(key(s[i], s[i + 1]));
      if (it != merges_.end() && it->second.rank < best) {
        best = it->second.rank;
        merged = it->second.merged;
      }
    }
    if (merged < 0) return;
    // Every occurrence of the best pair, left to right, without overlaps.
    size_t w = 0;
    for (size_t i = 0; i < s.size();) {
      if (i + 1 < s.size()) {
        auto it = merges_.find(key(s[i], s[i + 1]));
        if (it != merges_.end() && it->second.rank == best) {
          s[w++] = merged;
          i += 2;
          continue;
        }
      }
      s[w++] = s[i++];
    }
    s.resize(w);
  }
}

void Bpe::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  const std::string key_str(bytes);
  {
    std::lock_guard lock(cache_mutex_);
    auto it = cache_.find(key_str);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  std::optional<int32_t> whole;
  if (ignore_merges_) {
    auto it = vocab_.find(byte_level_encode(bytes));
    if (it != vocab_.end()) whole = it->second;
  }
  if (whole) {
    ids.push_back(*whole);
  } else {
    ids.reserve(bytes.size());
    for (char c : bytes) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        ids.push_back(id);
      } else if (unk_id_) {
        ids.push_back(*unk_id_);
      } else if (unk_token_) {
        throw FormatError(source_ + ": byte " + std::to_string(static_cast<uint8_t>(c)) +
                          " has no token and model.unk_token \"" + *unk_token_ +
                          "\" is not in model.vocab");
      }
    }
    merge(ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard lock(cache_mutex_);
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(key_str, std::move(ids));
}

}  // namespace mn::io
